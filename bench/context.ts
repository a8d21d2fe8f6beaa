// What scenarios share: the options, the receiver, the main scratch database, herald started on
// first use (in process for set-up and the library face; a `herald api` process for publish and
// intake over HTTP), the apps the scenarios need, and the raw results they leave behind.

import type { BatchFigures } from './batches.ts';
import type { BenchOptions } from './config.ts';
import type { CpuPerOperation } from './cpu.ts';
import type { ScratchDatabase } from './db.ts';
import type { InProcessHerald } from './herald-setup.ts';
import type { HeraldApi } from './processes.ts';
import type { Receiver } from './receiver.ts';

export interface Throughput {
  /** operations per second */
  perSecond: number;
  count: number;
  elapsedMs: number;
  /** Where the CPU went, per operation (bench/cpu.ts), where the scenario measured it. */
  cpu?: CpuPerOperation;
  /** How the herald process under test batched its writes (bench/batches.ts), where measured. */
  batches?: BatchFigures;
}

export type SizeStage = 'finished' | 'payloadRetention' | 'historyRetention';

export interface MemoryResult {
  pending: number;
  endpoints: number;
  delivered: number;
  workedSeconds: number;
  /** RSS once the worker said it started, before it had claimed much. */
  startRssBytes: number;
  peakRssBytes: number;
  /** Bytes of each hot table and hot index, after each stage (see scenarios/memory.ts). */
  sizes: Record<SizeStage, Record<string, number>>;
}

export interface Results {
  httpLimit?: Throughput;
  commitLimit?: Throughput;
  /** The commit limit taken again right before publish and intake: their ratios' base. */
  commitLimitBeforePublish?: Throughput;
  peer?: Throughput & { peakRssBytes: number };
  peerLatency?: number[];
  e2eOne?: Throughput & { recordedMs: number; peakRssBytes: number };
  e2eFan?: Throughput & { recordedMs: number; peakRssBytes: number; endpoints: number };
  /** Throughput pairs, back to back: the peer's jobs/s, then herald's deliveries/s (E = 1,000). */
  pairs?: { peer: number; herald: number }[];
  latency?: number[];
  publishHttp?: Throughput;
  /** publish({ db }) in the caller's transaction: the NOTIFY commits with it (the default). */
  publishLibrary?: Throughput;
  /** publish({ db, wake: false }), then herald.wake() after the caller's COMMIT. */
  publishLibraryWakeAfter?: Throughput;
  intake?: Throughput;
  fanout?: { commitMs: number[]; endpoints: number };
  memory?: MemoryResult;
}

export interface Context {
  options: BenchOptions;
  receiver: Receiver;
  db: ScratchDatabase;
  /** The in-process herald on `db` (started on first use). */
  herald(): Promise<InProcessHerald>;
  /** A `herald api` process on `db`, as a user runs it (started on first use). */
  api(): Promise<HeraldApi>;
  /** The 1,000-endpoint app (created on first use). */
  fanApp(): Promise<string>;
  /** The server's postmaster when it runs on this machine (bench/cpu.ts), else null. */
  postmasterPid: number | null;
  results: Results;
  /** Things a reader of the figures must know (truncations, fallbacks). */
  notes: string[];
  log(message: string): void;
}
