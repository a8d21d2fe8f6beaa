// Prometheus metrics. Counters and histograms count what this process did (publishes, intake
// claims, attempts, lease recoveries, finalization retries); gauges describe the whole database and
// are read at scrape time. Each herald owns its Registry (never prom-client's global one), so
// several heralds in one process — tests, or a library user's own app — do not collide.
//
// Labels are bounded enums or operator-defined names only: never a message, endpoint or app id,
// which would make a series per object and let publishers grow the metric set without limit.

import type { Logger } from 'pino';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import { awaitsReview, SLOT_RESTING, UNSERVED_SINCE } from '../db/deliveries.ts';
import type { Queryable } from '../db/port.ts';

export type PublishedVia = 'api' | 'library' | 'ingest';
export type IntakeOutcome = 'claimed' | 'joined' | 'duplicate' | 'rejected';

export interface AttemptSample {
  outcome: 'success' | 'failure' | 'unknown';
  /** One of the sender's RESPONSE_CLASSES, or payload_expired / no_signing_secret / headers_unreadable: a bounded set. */
  responseClass: string;
  durationMs: number;
}

/** The writes that batch many callers' items into one statement and one commit. */
export type BatchedWrite = 'publish' | 'intake' | 'outcome';
const BATCHED_WRITES: readonly BatchedWrite[] = ['publish', 'intake', 'outcome'];

const NOT_SENT_REASONS = [
  'lease_short',
  'origin_congested',
  'stopping',
  'claim_lost',
  'keys_unavailable',
  'endpoint_changed',
] as const;
export type NotSentReason = (typeof NOT_SENT_REASONS)[number];
const INTAKE_OUTCOMES: readonly IntakeOutcome[] = ['claimed', 'joined', 'duplicate', 'rejected'];

export interface Metrics {
  readonly registry: Registry;
  /** A new message was committed (idempotent replays are not new messages). */
  published(via: PublishedVia): void;
  /** `source` is the source's label (sourceLabel). */
  intake(source: string, outcome: IntakeOutcome): void;
  /**
   * Sources this process may receive for, by label: their series start at 0 before their first
   * delivery, so that increase() sees a first refusal after a start (a secret rotated while the
   * process was down) instead of a series that begins at 1.
   */
  sourcesKnown(sources: readonly string[]): void;
  /**
   * Every source there is, by label: as sourcesKnown, and the series of a source no longer among
   * them (deleted, or renamed) go, so that their number stays the number of sources.
   */
  sourcesAre(sources: readonly string[]): void;
  /** An attempt's outcome was recorded under its lease. */
  attemptRecorded(attempt: AttemptSample): void;
  /** Seconds from the message's creation to the start of its first attempt at one endpoint. */
  firstAttempt(latencySeconds: number): void;
  leasesRecovered(count: number): void;
  /**
   * Claimed attempts were given back unsent: too little lease left, their origin congested, the
   * worker stopping, the claim's answer lost, or their signing keys unreadable.
   */
  attemptNotSent(reason: NotSentReason, count?: number): void;
  finalizationRetried(): void;
  /**
   * A batched write committed `items` items in `seconds` (see group-commit.ts). Never throws: it
   * runs right after a commit, which a metric must not turn into a failure (and a retry).
   */
  batchWritten(write: BatchedWrite, items: number, seconds: number): void;
  /** Reads of history waiting for their turn in this API process now (api/history-reads.ts). */
  historyReadsWaiting(count: number): void;
  /** A read of history was refused as `overloaded`: its caller's share, or the queue, was full. */
  historyReadRefused(): void;
  /** An inbound body was refused as `overloaded` before it was read: the bodies in flight were at their bound. */
  ingestBodiesRefused(): void;
  /** Bytes the inbound bodies being received and answered hold now (by their declared length). */
  ingestBodiesHeld(bytes: number): void;
  /** The Prometheus text exposition, with the database gauges read now. */
  scrape(): Promise<string>;
  readonly contentType: string;
}

interface DatabaseSnapshot {
  pending: number;
  sending: number;
  failed: number;
  oldestDueSeconds: number;
  unknownParked: number;
  oldestUnknownSeconds: number;
  endpointsDisabled: number;
  endpointsResting: number;
  oldestExpiredLeaseSeconds: number;
}

/**
 * Rows counted exactly below this many, by PostgreSQL's estimate (pg_class.reltuples, kept by
 * VACUUM and ANALYZE) from it on: the failed deliveries accumulate for as long as history is kept,
 * and a count of millions of rows at every scrape of every process would cost seconds each.
 */
export const EXACT_COUNT_BELOW = 1_000_000;

/** SQL: the rows of a queue table, exact below EXACT_COUNT_BELOW (a never-analysed table: exact). */
const rowsOf = (table: string) => `(select case when c.reltuples >= ${EXACT_COUNT_BELOW} then c.reltuples
         else (select count(*) from ${table}) end
    from pg_class c where c.oid = '${table}'::regclass)`;

/**
 * SQL: each endpoint with rows in a queue table keyed (endpoint_id, next_attempt_at, …), with its
 * earliest, found by skipping through the key: one index probe per such endpoint.
 */
const earliestPerEndpoint = (name: string, table: string) => `${name} (endpoint_id, next_attempt_at) as (
      (select endpoint_id, next_attempt_at from ${table} order by endpoint_id, next_attempt_at limit 1)
      union all
      select next.endpoint_id, next.next_attempt_at from ${name}
       cross join lateral (select q.endpoint_id, q.next_attempt_at from ${table} q
                            where q.endpoint_id > ${name}.endpoint_id
                            order by q.endpoint_id, q.next_attempt_at limit 1) next
    )`;

/**
 * SQL: the oldest moment from which a due delivery of an enabled endpoint has waited unserved.
 * The endpoints with queued rows, due or deferred (held ones too: a rest that ended with tending
 * late, or an enable whose release is under way), each with its earliest, by skipping through the
 * queue tables' keys: a scrape costs what the endpoints with work cost, not every endpoint
 * registered.
 */
const OLDEST_UNSERVED = `with recursive ${earliestPerEndpoint('due', 'delivery_due')},
    ${earliestPerEndpoint('deferred', 'delivery_deferred')}
    select min(${UNSERVED_SINCE}) from (select * from due union all select * from deferred) q
      join endpoint e on e.id = q.endpoint_id
      left join delivery_lease s on s.endpoint_id = e.id
     where not e.disabled and ${UNSERVED_SINCE} <= now()`;

// One statement for every database gauge, so a scrape costs one round trip. Each count reads a
// queue table (due or deferred, in flight, failed — migrations 0015, 0030), never the whole
// history, and only when Prometheus asks. A failed delivery carries the count of its unknown attempts (0019).
// The oldest due delivery ignores disabled endpoints (their deliveries wait on purpose; they are
// counted in herald_endpoints_disabled), and counts from UNSERVED_SINCE (a throttled backlog waits
// its turn): either would otherwise hide a worker that falls behind, or cry wolf at a backlog
// that drains.
const SNAPSHOT_SQL = `
  select
    (${rowsOf('delivery_due')} + ${rowsOf('delivery_deferred')})::float8 as pending,
    l.sending::float8 as sending,
    ${rowsOf('delivery_failed')}::float8 as failed,
    coalesce(extract(epoch from now() - (${OLDEST_UNSERVED})), 0)::float8 as "oldestDueSeconds",
    f.unknown::float8 as "unknownParked",
    coalesce(extract(epoch from now() - f.parked_since), 0)::float8 as "oldestUnknownSeconds",
    (select count(*) from endpoint where disabled)::float8 as "endpointsDisabled",
    l.resting::float8 as "endpointsResting",
    coalesce(extract(epoch from now() - l.oldest_expired), 0)::float8 as "oldestExpiredLeaseSeconds"
    -- The failed deliveries parked with unknown attempts, by their index (0042), and one read
    -- of the slots. Awaiting review since its delivery was parked (its last change): looked up by
    -- key.
    from (select coalesce(sum(unknown_attempts), 0) as unknown,
                 min((select d.updated_at from delivery d where d.id = u.delivery_id limit 1)) as parked_since
            from delivery_failed u where ${awaitsReview('u')}) f,
         (select count(*) filter (where s.delivery_id is not null) as sending,
                 count(*) filter (where ${SLOT_RESTING}) as resting,
                 min(s.lease_expires_at) filter (where s.delivery_id is not null and s.lease_expires_at < now())
                   as oldest_expired
            from delivery_lease s) l`;

const DURATION_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, 60];
// From sub-second (a worker waiting on NOTIFY) to hours (an endpoint that was disabled at publish).
const LATENCY_BUCKETS = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 3600, 21600];
// A batch is one item at low load, and up to the group commit's maxBatch (256 publishes, 64
// receipts) or a worker's concurrency (outcomes) under load.
const BATCH_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512];
// One write with its commit: sub-millisecond on a local database, seconds when it struggles.
const WRITE_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];

/**
 * How long a scrape waits for the database gauges before it answers without them (NaN, and
 * herald_metrics_database_up 0): under Prometheus's default scrape timeout of 10 s, so that a
 * database that hangs shows as down instead of as a scrape that failed, with nothing to alert on.
 */
const SNAPSHOT_DEADLINE_MS = 5_000;

export function createMetrics(
  db: Queryable,
  log?: Logger,
  { snapshotDeadlineMs = SNAPSHOT_DEADLINE_MS }: { snapshotDeadlineMs?: number } = {},
): Metrics {
  const registry = new Registry();
  const registers = [registry];

  const published = new Counter({
    name: 'herald_messages_published_total',
    help: 'Messages committed, by how they entered herald (api, library, ingest).',
    labelNames: ['via'] as const,
    registers,
  });
  // Every face from the start: a series that appears only at its first increment hides that
  // increment from rate().
  for (const via of ['api', 'library', 'ingest'] as const) published.inc({ via }, 0);
  const seenSources = new Set<string>();
  const knowSource = (source: string) => {
    if (seenSources.has(source)) return;
    seenSources.add(source);
    for (const each of INTAKE_OUTCOMES) intake.inc({ source, outcome: each }, 0);
  };
  const intake = new Counter({
    name: 'herald_intake_claims_total',
    help: 'Inbound deliveries by source (uid or id) and outcome: claimed (relayed), joined (a new delivery id whose business key had a message already), duplicate, or rejected before anything was stored.',
    labelNames: ['source', 'outcome'] as const,
    registers,
  });
  const attempts = new Counter({
    name: 'herald_attempts_total',
    help: 'Attempts whose outcome this process recorded, by outcome and response class.',
    labelNames: ['outcome', 'response_class'] as const,
    registers,
  });
  // The failures that are herald's own, which an alert watches (a worker with the wrong master
  // key), from the start: its first scrape may come after the first of them.
  for (const response_class of ['no_signing_secret', 'headers_unreadable', 'payload_expired'] as const)
    attempts.inc({ outcome: 'failure', response_class }, 0);
  const duration = new Histogram({
    name: 'herald_attempt_duration_seconds',
    help: 'Time one attempt took: DNS, connect, request and response.',
    buckets: DURATION_BUCKETS,
    registers,
  });
  const firstAttempt = new Histogram({
    name: 'herald_publish_to_first_attempt_seconds',
    help: "From a message's creation to the start of its first scheduled attempt at an endpoint.",
    buckets: LATENCY_BUCKETS,
    registers,
  });
  const recoveries = new Counter({
    name: 'herald_lease_recoveries_total',
    help: 'Expired leases this process recovered (their attempts became unknown).',
    registers,
  });
  const notSent = new Counter({
    name: 'herald_attempts_not_sent_total',
    help: 'Claimed attempts given back unsent (no outcome recorded, budget kept), by reason.',
    labelNames: ['reason'],
    registers,
  });
  for (const reason of NOT_SENT_REASONS) notSent.inc({ reason }, 0);
  const finalizationRetries = new Counter({
    name: 'herald_finalization_retries_total',
    help: 'Failed writes of attempt outcomes that were retried (the database was unreachable or erred).',
    registers,
  });

  const batchItems = new Histogram({
    name: 'herald_batched_write_items',
    help: 'Items per batched write (publish, intake, outcome) that committed: how many callers shared one database call and its commit. A batch the database rejected is not counted; its items, written alone then, are.',
    labelNames: ['write'] as const,
    buckets: BATCH_BUCKETS,
    registers,
  });
  const batchSeconds = new Histogram({
    name: 'herald_batched_write_seconds',
    help: 'Time of one batched write that committed, from the call to its commit: what a caller waits for, after the write ahead of it. An outcome write includes the claim it carries; a write pipelined behind another, its wait for that one.',
    labelNames: ['write'] as const,
    buckets: WRITE_BUCKETS,
    registers,
  });
  const historyReadsWaiting = new Gauge({
    name: 'herald_history_reads_waiting',
    help: 'Reads of history (endpoint stats, lists of messages and attempts) waiting for one of the places this API process gives them in its pool.',
    registers,
  });
  const historyReadsRefused = new Counter({
    name: 'herald_history_reads_refused_total',
    help: "Reads of history answered 503 overloaded: their caller's share of the places, or the queue, was full.",
    registers,
  });
  const ingestBodiesRefused = new Counter({
    name: 'herald_ingest_bodies_refused_total',
    help: 'Inbound requests answered 503 overloaded before their body was read: the bytes of bodies being received were at their bound.',
    registers,
  });
  const ingestBodiesHeld = new Gauge({
    name: 'herald_ingest_bodies_bytes',
    help: 'Bytes the inbound bodies being received and answered hold now, by their declared length (a chunked one: the limit).',
    registers,
  });
  for (const write of BATCHED_WRITES) {
    batchItems.zero({ write });
    batchSeconds.zero({ write });
  }

  // The database gauges share one query per scrape: prom-client calls every collect callback
  // before awaiting any of them, so the first one starts the query and the others join it.
  // Concurrent scrapes share it too, and so do scrapes while a query outlives its deadline: a
  // hanging database holds one connection of the pool, not one more at every scrape.
  let querying: Promise<DatabaseSnapshot | null> | null = null;
  let answering: Promise<DatabaseSnapshot | null> | null = null;
  const snapshot = (): Promise<DatabaseSnapshot | null> => {
    if (answering) return answering;
    querying ??= db
      .query<DatabaseSnapshot>(SNAPSHOT_SQL)
      .then((result) => result.rows[0] ?? null)
      .catch((error: unknown) => {
        log?.warn({ err: (error as Error).message }, 'metrics: the database gauges could not be read');
        return null;
      })
      .finally(() => {
        querying = null;
      });
    let deadline: NodeJS.Timeout | undefined;
    const late = new Promise<null>((resolve) => {
      deadline = setTimeout(() => {
        log?.warn({ deadlineMs: snapshotDeadlineMs }, 'metrics: the database gauges took too long to read');
        resolve(null);
      }, snapshotDeadlineMs);
    });
    answering = Promise.race([querying, late]).finally(() => {
      clearTimeout(deadline);
      answering = null;
    });
    return answering;
  };
  // An unreadable database is reported as NaN (no value), never as a reassuring 0; the counters of
  // this process are still served, and herald_metrics_database_up says why the gauges are empty.
  const fromDatabase = (name: string, help: string, read: (s: DatabaseSnapshot) => number) =>
    new Gauge({
      name,
      help,
      registers,
      async collect() {
        const s = await snapshot();
        this.set(s === null ? Number.NaN : read(s));
      },
    });

  new Gauge({
    name: 'herald_metrics_database_up',
    help: '1 when this scrape read the database gauges, 0 when the database could not be read.',
    registers,
    async collect() {
      this.set((await snapshot()) === null ? 0 : 1);
    },
  });
  new Gauge({
    name: 'herald_deliveries',
    help: `Deliveries by state (pending, sending, failed), in the whole database: exact below ${EXACT_COUNT_BELOW} of a state, PostgreSQL's estimate from there on.`,
    labelNames: ['state'] as const,
    registers,
    async collect() {
      const s = await snapshot();
      for (const state of ['pending', 'sending', 'failed'] as const) {
        this.set({ state }, s === null ? Number.NaN : s[state]);
      }
    },
  });
  fromDatabase(
    'herald_oldest_due_delivery_age_seconds',
    'How long the oldest due pending delivery of an enabled endpoint has waited unserved (a throttled endpoint: since its slot last opened; 0: none).',
    (s) => s.oldestDueSeconds,
  );
  fromDatabase(
    'herald_unknown_outcomes_parked',
    'Attempts with an unknown outcome whose delivery to an endpoint that is not idempotent failed: parked, awaiting review.',
    (s) => s.unknownParked,
  );
  fromDatabase(
    'herald_unknown_outcomes_oldest_seconds',
    'How long the oldest failed delivery with unknown attempts to an endpoint that is not idempotent has awaited review, since it was parked (0: none).',
    (s) => s.oldestUnknownSeconds,
  );
  fromDatabase('herald_endpoints_disabled', 'Endpoints currently disabled.', (s) => s.endpointsDisabled);
  fromDatabase(
    'herald_endpoints_resting',
    'Endpoints resting after failures or a Retry-After: no request starts until the rest ends.',
    (s) => s.endpointsResting,
  );
  // What no counter can show: leases that ran out and that nobody recovers (every worker gone, or
  // none scraped). herald_lease_recoveries_total moves only when a running worker recovers one.
  fromDatabase(
    'herald_oldest_expired_lease_seconds',
    'How long ago the longest-expired lease still held ran out (0: none): running workers recover expired leases within seconds.',
    (s) => s.oldestExpiredLeaseSeconds,
  );

  return {
    registry,
    contentType: registry.contentType,
    published: (via) => published.inc({ via }),
    intake(source, outcome) {
      // Every outcome of a source from its first delivery on, so that the first refusal after a
      // run of claims (a secret rotated) is not hidden from rate().
      knowSource(source);
      intake.inc({ source, outcome });
    },
    sourcesKnown(sources) {
      for (const source of sources) knowSource(source);
    },
    sourcesAre(sources) {
      const there = new Set(sources);
      for (const source of seenSources) {
        if (there.has(source)) continue;
        seenSources.delete(source);
        for (const outcome of INTAKE_OUTCOMES) intake.remove({ source, outcome });
      }
      for (const source of there) knowSource(source);
    },
    attemptRecorded(a) {
      attempts.inc({ outcome: a.outcome, response_class: a.responseClass });
      duration.observe(a.durationMs / 1000);
    },
    firstAttempt: (seconds) => firstAttempt.observe(Math.max(0, seconds)),
    leasesRecovered: (count) => recoveries.inc(count),
    attemptNotSent: (reason, count = 1) => notSent.inc({ reason }, count),
    finalizationRetried: () => finalizationRetries.inc(),
    batchWritten(write, items, seconds) {
      // prom-client throws on a value that is not a finite number.
      if (!Number.isFinite(items) || !Number.isFinite(seconds)) return;
      batchItems.observe({ write }, items);
      batchSeconds.observe({ write }, seconds);
    },
    historyReadsWaiting: (count) => historyReadsWaiting.set(count),
    historyReadRefused: () => historyReadsRefused.inc(),
    ingestBodiesRefused: () => ingestBodiesRefused.inc(),
    ingestBodiesHeld: (bytes) => ingestBodiesHeld.set(bytes),
    // prom-client writes NaN (a gauge the database did not answer) as `Nan`: Prometheus reads it
    // in any case, the exposition format and OpenMetrics parsers want `NaN`.
    scrape: async () => (await registry.metrics()).replace(/ Nan$/gm, ' NaN'),
  };
}

/** A source's label in herald_intake_claims_total: its uid, or its id when it has none. */
export const sourceLabel = (source: { id: string; uid: string | null }): string => source.uid ?? source.id;
