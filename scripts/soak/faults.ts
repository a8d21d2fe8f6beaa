// The fault injector. Its schedule is drawn from the seed before the run starts (so a failing run
// can be replayed): SIGKILL and restart of an API or a worker process, every database connection
// cut at the proxy (sometimes with new ones refused for a moment), a PostgreSQL restart, and a
// worker SIGSTOPped for longer than its lease, then continued. Faults run one after another.

import type { TcpProxy } from '../../test/support/tcp-proxy.ts';
import type { PgCluster } from './cluster.ts';
import { createJournal, type Journal, now, sleep } from './journal.ts';
import type { Fleet } from './processes.ts';
import { forkRng } from './rng.ts';

export type FaultKind = 'kill-api' | 'kill-worker' | 'cut-db' | 'pg-restart' | 'stop-worker';
export const FAULT_KINDS: readonly FaultKind[] = [
  'kill-api',
  'kill-worker',
  'cut-db',
  'pg-restart',
  'stop-worker',
];

export interface PlannedFault {
  n: number;
  /** Milliseconds after the load started. */
  atMs: number;
  kind: FaultKind;
  /** The process it hits (kill-*, stop-worker). */
  target: string | null;
  /** kill-*: time down before the restart; cut-db: time new connections are refused; stop-worker: time stopped. */
  holdMs: number;
}

export interface FaultRecord extends PlannedFault {
  startedAt: number;
  endedAt: number;
  ok: boolean;
  detail: string | null;
}

const WEIGHTS: Record<FaultKind, number> = {
  'kill-worker': 22,
  'kill-api': 18,
  'cut-db': 22,
  'pg-restart': 13,
  'stop-worker': 25,
};

export function planFaults(
  seed: number,
  durationMs: number,
  leaseSeconds: number,
  kinds: readonly FaultKind[] = FAULT_KINDS,
): PlannedFault[] {
  const rng = forkRng(seed, 'faults');
  const plan: PlannedFault[] = [];
  if (kinds.length === 0) return plan;
  // Every kind once early on (in a seeded order), so that even a short soak sees each of them.
  const firstRound = rng.shuffle(kinds);
  let at = rng.int(2500, 4000);
  for (let n = 0; at < durationMs - 4000; n++) {
    const kind =
      firstRound[n] ??
      rng.weighted<FaultKind>(
        (Object.keys(WEIGHTS) as FaultKind[])
          .filter((k) => kinds.includes(k))
          .map((k) => [k, WEIGHTS[k]] as const),
      );
    const target =
      kind === 'kill-api'
        ? rng.pick(['api-1', 'api-2'])
        : kind === 'cut-db' || kind === 'pg-restart'
          ? null
          : rng.pick(['worker-1', 'worker-2']);
    const holdMs =
      kind === 'stop-worker'
        ? leaseSeconds * 1000 + rng.int(500, 3000)
        : kind === 'cut-db'
          ? rng.chance(0.5)
            ? rng.int(200, 1500)
            : 0
          : kind === 'pg-restart'
            ? 0
            : rng.int(0, 1500);
    plan.push({ n, atMs: at, kind, target, holdMs });
    at += rng.int(2500, 6000);
  }
  return plan;
}

export interface Injector {
  readonly records: Journal<FaultRecord>;
  /** Runs the plan from `startedAt` until it is done or stopped. */
  run(startedAt: number): Promise<void>;
  /** No new fault starts after this; the one under way finishes. */
  stop(): void;
}

export function createInjector(options: {
  plan: readonly PlannedFault[];
  fleet: Fleet;
  proxy: TcpProxy;
  cluster: PgCluster;
  outDir: string;
  log: (msg: string) => void;
}): Injector {
  const records = createJournal<FaultRecord>(options.outDir, 'faults');
  let stopped = false;
  const { fleet, proxy, cluster } = options;

  async function inject(fault: PlannedFault): Promise<string | null> {
    const member = fault.target ? fleet.members.find((m) => m.name === fault.target) : undefined;
    switch (fault.kind) {
      case 'kill-api':
      case 'kill-worker':
        await fleet.killAndRestart(member!, fault.holdMs);
        return `${member!.name} is generation ${member!.generation}`;
      case 'cut-db': {
        const live = proxy.live;
        if (fault.holdMs > 0) proxy.pause();
        proxy.cutAll();
        if (fault.holdMs > 0) {
          await sleep(fault.holdMs);
          proxy.resume();
        }
        return `${live} connections cut`;
      }
      case 'pg-restart':
        await cluster.restart();
        return null;
      case 'stop-worker': {
        if (!member!.proc || member!.proc.exitInfo) return 'not running: skipped';
        fleet.pause(member!);
        await sleep(fault.holdMs);
        fleet.resume(member!);
        return null;
      }
    }
  }

  return {
    records,
    async run(startedAt) {
      for (const fault of options.plan) {
        while (!stopped && now() < startedAt + fault.atMs)
          await sleep(Math.min(250, startedAt + fault.atMs - now()));
        if (stopped) break;
        const began = now();
        options.log(`fault #${fault.n} ${fault.kind}${fault.target ? ` ${fault.target}` : ''}`);
        let ok = true;
        let detail: string | null = null;
        try {
          detail = await inject(fault);
        } catch (error) {
          ok = false;
          detail = (error as Error).message.slice(0, 1000);
          options.log(`fault #${fault.n} failed: ${detail}`);
        }
        records.push({ ...fault, startedAt: began, endedAt: now(), ok, detail });
      }
    },
    stop() {
      stopped = true;
    },
  };
}
