// What one run does: the counts of each scenario (full or --quick), the shared concurrency, and
// the one payload that every scenario sends, stores or inserts.

import { parseArgs } from 'node:util';

export interface Counts {
  /** Requests of the bare HTTP loop. */
  httpRequests: number;
  /** Single-row insert transactions. */
  commits: number;
  /** e2e with one endpoint: messages (= deliveries). */
  e2eOneMessages: number;
  /** e2e with 1,000 endpoints: messages (x 1,000 deliveries). */
  e2eFanMessages: number;
  /** Endpoints of the fan-out app (E = 1,000). */
  fanEndpoints: number;
  /** Jobs of the peer's throughput run (= the e2e E = 1,000 deliveries). */
  peerJobs: number;
  /**
   * Throughput pairs, peer then herald end to end (E = 1,000), back to back: the ratio of one pair
   * moves with the VM's speed from minute to minute, so a full run takes several.
   */
  e2ePairs: number;
  /** Publishes per face (HTTP, library). */
  publishes: number;
  /** Samples of each latency run (herald, peer). */
  latencySamples: number;
  /** Messages per second of the latency runs. */
  latencyRate: number;
  /** Signed /ingest requests. */
  intakes: number;
  /** Fan-out publishes to the 1,000-endpoint app. */
  fanoutPublishes: number;
  /** Pending deliveries for the memory scenario. */
  memoryDeliveries: number;
  /** How long the memory scenario's worker may work through them. */
  memoryMaxSeconds: number;
  /** How long any other wait for the receiver may last before the figure is taken as it stands. */
  waitMaxSeconds: number;
}

export interface BenchOptions {
  quick: boolean;
  concurrency: number;
  /** Scenario names to run (all when empty). */
  only: string[];
  outDir: string;
  serverUrl: string;
  counts: Counts;
}

export const SCENARIOS = [
  'http-limit',
  'commit-limit',
  'peer',
  'e2e',
  'pairs',
  'latency',
  'publish',
  'intake',
  'fanout',
  'memory',
] as const;
export type ScenarioName = (typeof SCENARIOS)[number];

const FULL: Counts = {
  httpRequests: 50_000,
  commits: 20_000,
  e2eOneMessages: 2_000,
  e2eFanMessages: 100,
  fanEndpoints: 1_000,
  peerJobs: 100_000,
  e2ePairs: 3,
  publishes: 20_000,
  latencySamples: 1_000,
  latencyRate: 25,
  intakes: 10_000,
  fanoutPublishes: 20,
  memoryDeliveries: 1_000_000,
  memoryMaxSeconds: 1_200,
  waitMaxSeconds: 600,
};

const QUICK: Counts = {
  // Each throughput figure takes a second or more: shorter windows made the ratios swing.
  httpRequests: 30_000,
  commits: 15_000,
  e2eOneMessages: 200,
  e2eFanMessages: 10,
  fanEndpoints: 1_000,
  peerJobs: 10_000,
  e2ePairs: 0,
  publishes: 6_000,
  latencySamples: 150,
  latencyRate: 25,
  intakes: 6_000,
  fanoutPublishes: 5,
  memoryDeliveries: 100_000,
  memoryMaxSeconds: 30,
  waitMaxSeconds: 30,
};

export function parseOptions(argv: string[]): BenchOptions {
  const { values } = parseArgs({
    args: argv,
    options: {
      quick: { type: 'boolean', default: false },
      concurrency: { type: 'string', default: '32' },
      only: { type: 'string', default: '' },
      pairs: { type: 'string' },
      out: { type: 'string', default: 'bench-results' },
      help: { type: 'boolean', default: false },
    },
    strict: true,
  });
  if (values.help) {
    console.log(
      [
        'npm run bench [-- --quick] [--concurrency 32] [--only e2e,latency] [--pairs 3] [--out bench-results]',
        '--pairs: peer and end-to-end throughput pairs, interleaved (3 in a full run, none in a quick one)',
        `scenarios: ${SCENARIOS.join(', ')}`,
        'PostgreSQL: DATABASE_URL or postgres://postgres@127.0.0.1:5432/test (scratch databases are created and dropped)',
      ].join('\n'),
    );
    process.exit(0);
  }
  const concurrency = Number(values.concurrency);
  if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 64) {
    throw new Error('--concurrency expects an integer from 1 to 64');
  }
  const only = values.only
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  for (const name of only) {
    if (!(SCENARIOS as readonly string[]).includes(name)) {
      throw new Error(`--only: unknown scenario ${name} (one of ${SCENARIOS.join(', ')})`);
    }
  }
  const counts = values.quick ? QUICK : FULL;
  if (values.pairs !== undefined && !/^\d$/.test(values.pairs)) {
    throw new Error('--pairs expects an integer from 0 to 9');
  }
  const pairs = values.pairs === undefined ? counts.e2ePairs : Number(values.pairs);
  // Either would run nothing that was asked for, and say nothing.
  if (only.includes('pairs') && pairs === 0) {
    throw new Error('--only pairs: no pairs to take (a quick run takes none): add --pairs N');
  }
  if (values.pairs !== undefined && pairs > 0 && only.length > 0 && !only.includes('pairs')) {
    throw new Error('--pairs: add pairs to --only');
  }
  return {
    quick: values.quick,
    concurrency,
    only,
    outDir: values.out,
    serverUrl: process.env['DATABASE_URL'] || 'postgres://postgres@127.0.0.1:5432/test',
    counts: { ...counts, e2ePairs: pairs },
  };
}

export function wants(options: BenchOptions, name: ScenarioName): boolean {
  // No pairs to take (a quick run, or --pairs 0): the scenario is not run, even when named.
  if (name === 'pairs' && options.counts.e2ePairs === 0) return false;
  return options.only.length === 0 || options.only.includes(name);
}

/**
 * Jobs the peer locks ahead of the ones it runs (graphile-worker's local queue). herald's worker
 * holds as many leases beyond its connections, so that both hold the same work in hand.
 */
export const PEER_LOCAL_QUEUE = 500;

/** The event every scenario sends: about 1 KiB of JSON, like a typical webhook. */
export const PAYLOAD = {
  type: 'invoice.paid',
  data: {
    object: 'invoice',
    id: 'in_1PbenchAAAAAAAAAAAAAAAAA',
    customer: 'cus_QbenchBBBBBBBBBB',
    currency: 'eur',
    amount_due: 120_000,
    amount_paid: 120_000,
    status: 'paid',
    lines: Array.from({ length: 6 }, (_, i) => ({
      id: `il_bench_${i}`,
      description: `Line item ${i} of the benchmark invoice`,
      amount: 20_000,
      quantity: 1,
      period: { start: 1_767_225_600, end: 1_769_904_000 },
    })),
    metadata: { order: 'ord_4711', region: 'eu-west', plan: 'business' },
  },
};
export const PAYLOAD_TEXT = JSON.stringify(PAYLOAD);
export const EVENT_TYPE = 'invoice.paid';
