// Retention: a message's payload is removed once its retention period has passed (Svix's
// payloadRetentionPeriod). The message, its deliveries, attempts and intake records stay, with
// ids, states, times and digests — the history outlives the content — unless history retention
// (opt-in) deletes finished messages whole, with their old intake records.

import { steadyNow } from '../domain/steady-clock.ts';
import type { Db, Queryable } from './port.ts';
import { firstIdAt } from './time-ids.ts';

/**
 * What history pruning leaves: a message with a delivery waiting or in flight, or one parked with
 * an attempt whose outcome is unknown (invariant: the evidence stays until someone has looked at
 * it; resending it or acknowledging it ends the parking, and `herald doctor` lists it until then).
 */
function kept(id: string): string {
  return `(exists (select 1 from delivery d where d.message_id = ${id} and d.state in ('pending', 'sending'))
    or exists (select 1 from delivery d join delivery_failed f on (f.endpoint_id, f.delivery_id) = (d.endpoint_id, d.id)
                where d.message_id = ${id} and f.unknown_attempts > 0))`;
}
const KEPT = kept('m.id');

/** Rows per retention statement: small batches keep locks short. */
export const RETENTION_BATCH = 1000;

/**
 * How much one transaction of history pruning takes: up to `messages` messages, and no more once
 * their deliveries reach `deliveries` (a message is never split: one with more goes alone). A
 * message's deliveries and attempts go with it, so a count of messages alone is no bound: at a
 * fan-out of 1,000, 1,000 messages are a million deliveries and their attempts in one transaction
 * (~16 s on the benchmark's machine, against ~0.2 s for a batch of 10,000 deliveries), holding
 * its locks and its WAL for longer than the pass's time budget, which cannot cut a batch short.
 */
export interface PruneBatch {
  messages: number;
  deliveries: number;
  /**
   * Old messages a batch walks past at most, kept ones included: the walk is bounded however many
   * messages are kept at the old end of the history (a disabled endpoint's backlog, deliveries
   * parked for review), and a statement never walks all of them.
   */
  walk?: number;
}

export const PRUNE_BATCH: PruneBatch = { messages: RETENTION_BATCH, deliveries: 10_000, walk: 10_000 };

/** SQL: the messages older than `$1` days, by their id (the primary key's first entries) and their time. */
const OLD = `m.id < ${firstIdAt('msg', 'now() - make_interval(days => $1)')}
  and m.created_at < now() - make_interval(days => $1)`;

/** One batch of history pruning, and where its walk stopped. */
export interface PrunedBatch {
  /** Messages deleted. */
  pruned: number;
  /** The last old message the walk passed, kept or not; null when it found none after `after`. */
  walkedTo: string | null;
  /** The walk stopped at the batch's bounds, not at the newest old message: more may lie beyond. */
  more: boolean;
}

/**
 * Deletes the old finished messages that one batch takes (`PruneBatch`) after the message id
 * `after` ('' from the oldest), with their deliveries and attempts (foreign keys cascade), the
 * inbound claims older than `days` that relayed them, with every receipt observed (so herald
 * remembers an inbound delivery id for `days`: one redelivered later is a new event, as a
 * publish's idempotency key is forgotten with its message), and the audit entry of their creation
 * (one per message; an operator's actions on a message stay in the audit log). A younger claim —
 * a delivery id that joined the old message by its business key — stays, marked
 * `message_pruned_at` so that nobody takes it for a claim that never made its message, until
 * pruneOldClaims takes it. Opt-in: by default herald keeps the history, which is its audit trail.
 *
 * Run it in a transaction (`db.transaction`): it walks to the old messages, locks them, then
 * deletes those still finished as a statement that starts after the locks were taken sees them. A
 * replay, resend or recovery holds its delivery's message (deliveries.ts, MESSAGE_HELD) until it
 * commits: one under way keeps its message out of the pass (skip locked), one committed before the
 * delete is seen by it, one that comes after waits and finds the message gone. A single statement
 * judged "finished" on a snapshot taken before it waited for its locks, and could delete a
 * delivery a replay had just restarted, with the lease a worker held on it.
 */
export async function pruneHistoryBatch(
  tx: Queryable,
  days: number,
  batch: PruneBatch,
  after: string,
): Promise<PrunedBatch> {
  // The old messages are the first ids of the primary key (time-ids.ts): a walk that stops at
  // the cutoff's id, never a read of the whole history. It goes one message at a time, adding up
  // the finished ones' deliveries (by the (message, endpoint) key), and stops at the batch's
  // bounds: its messages, their deliveries, or the old messages walked past.
  const step = (id: string) => `cross join lateral (select not ${kept(id)} as finished) f
     cross join lateral (select case when f.finished then (select count(*) from delivery d where d.message_id = ${id})
                                     else 0 end as n) c`;
  const walked = await tx.query<{ id: string; finished: boolean; bounded: boolean }>(
    `with recursive walk (id, finished, deliveries, taken, passed) as (
       (select m.id, f.finished, c.n, f.finished::int, 1
          from (select m.id from message m where m.id > $2 and ${OLD} order by m.id limit 1) m
          ${step('m.id')})
       union all
       (select next.id, f.finished, walk.deliveries + c.n, walk.taken + f.finished::int, walk.passed + 1
          from walk
          cross join lateral (select m.id from message m where m.id > walk.id and ${OLD}
                               order by m.id limit 1) next
          ${step('next.id')}
         where walk.deliveries < $4 and walk.taken < $3 and walk.passed < $5)
     )
     select id, finished, (deliveries >= $4 or taken >= $3 or passed >= $5) as bounded from walk order by id`,
    [days, after, batch.messages, batch.deliveries, batch.walk ?? PRUNE_BATCH.walk],
  );
  const last = walked.rows.at(-1);
  if (last === undefined) return { pruned: 0, walkedTo: null, more: false };
  // A walk that stopped at a bound may have more after it; one that did not found no next message.
  const walkedTo = last.id;
  const more = last.bounded;
  const candidates = walked.rows.filter((r) => r.finished).map((r) => r.id);
  if (candidates.length === 0) return { pruned: 0, walkedTo, more };
  const locked = await tx.query<{ id: string }>(
    'select id from message where id = any($1) order by id for update skip locked',
    [candidates],
  );
  // Their deliveries too, without waiting: a message one of whose deliveries another transaction
  // holds is passed by, as one whose own lock is. The delete's cascade would wait for that
  // transaction — an endpoint's deletion holds the finished deliveries it purges until it commits
  // (history-purge.ts) — and hold up the worker's maintenance, lease recovery among it, as long.
  const free = await tx.query<{ id: string }>(
    `with held as (
       select message_id, count(*) as n
         from (select message_id from delivery where message_id = any($1) for update skip locked) l
        group by message_id
     ), every as (
       select message_id, count(*) as n from delivery where message_id = any($1) group by message_id
     )
     select m.id from unnest($1::text[]) m (id)
       left join every e on e.message_id = m.id
       left join held h on h.message_id = m.id
      where coalesce(e.n, 0) = coalesce(h.n, 0)`,
    [locked.rows.map((r) => r.id)],
  );
  // Still finished as a statement after the locks sees them; and so they stay until the delete
  // below: what could restart one waits for the message's lock, held here.
  const finished = await tx.query<{ id: string }>(
    `select m.id from message m where m.id = any($1) and not ${KEPT}`,
    [free.rows.map((r) => r.id)],
  );
  const ids = finished.rows.map((r) => r.id);
  await tx.query(
    'delete from intake where message_id = any($1) and claimed_at < now() - make_interval(days => $2)',
    [ids, days],
  );
  await tx.query('update intake set message_pruned_at = now() where message_id = any($1)', [ids]);
  await tx.query(
    `delete from audit_entry where target_id = any($1) and target_type = 'message' and action = 'message.created'`,
    [ids],
  );
  const result = await tx.query(`delete from message m where m.id = any($1) and not ${KEPT}`, [ids]);
  return { pruned: result.rowCount, walkedTo, more };
}

/**
 * One batch of history pruning from the oldest message: the first old finished messages that
 * `batch` takes, however many kept ones lie before them (see pruneHistoryBatch). Returns how many
 * it deleted. Run it in a transaction.
 */
export async function pruneFinishedHistory(
  tx: Queryable,
  days: number,
  batch: PruneBatch = PRUNE_BATCH,
): Promise<number> {
  let after = '';
  for (;;) {
    const { pruned, walkedTo, more } = await pruneHistoryBatch(tx, days, batch, after);
    if (pruned > 0 || !more || walkedTo === null) return pruned;
    after = walkedTo;
  }
}

/**
 * Where a worker's history pruning stands between its passes. A sweep walks the old messages from
 * the oldest to the newest, batch after batch and pass after pass, each old message once; once it
 * has reached the newest, the passes after it walk on from there (the messages that have grown
 * old since), and a new sweep starts from the oldest `resweepEveryMs` later, for the messages that
 * were kept then (waiting, parked for review) and have finished since. Starting every batch from
 * the oldest would walk every kept message at every batch, every five seconds while behind: with
 * millions kept, each batch outgrew the pass's time, then the statement's deadline, and pruning
 * stopped for good.
 */
export interface HistoryWalk {
  after: string;
  /** When (steady clock) the sweep reached the newest old message; null while it goes on. */
  sweptAt: number | null;
  resweepEveryMs: number;
}

export const newHistoryWalk = (resweepEveryMs = 10 * 60_000): HistoryWalk => ({
  after: '',
  sweptAt: null,
  resweepEveryMs,
});

export async function pruneOldClaims(db: Queryable, days: number, batch = RETENTION_BATCH): Promise<number> {
  const result = await db.query(
    `delete from intake where id in (
       select id from intake
        where id < ${firstIdAt('in', 'now() - make_interval(days => $1)')}
          and claimed_at < now() - make_interval(days => $1)
          and message_pruned_at is not null and message_id is null
        order by id limit $2 for update skip locked)`,
    [days, batch],
  );
  return result.rowCount;
}

/**
 * Removes up to `batch` expired payloads; returns how many. Small batches keep locks short. The
 * payloads still kept are indexed by their expiry (migration 0020): the run reads only those due.
 */
export async function expireOldPayloads(db: Queryable, batch = RETENTION_BATCH): Promise<number> {
  const result = await db.query(
    `update message set payload = null, request_hash = null
      where id in (select id from message where payload is not null and payload_expires_at < now()
                    order by payload_expires_at limit $1 for update skip locked)`,
    [batch],
  );
  return result.rowCount;
}

export interface RetentionPass {
  expired: number;
  pruned: number;
  /** Claims of pruned messages deleted on their own (pruneOldClaims). */
  claims: number;
  /** A batch came back full when the pass's time was up: more is due, the next pass goes on. */
  behind: boolean;
}

/**
 * Runs `step` (one batch, returning how many rows it took) again while `full` says the batch may
 * have more behind it, until the steady clock passes `until`: how many it took in all, and
 * whether it stopped with work left (behind), for the next maintenance pass to go on with.
 */
export async function drainBatches(
  step: () => Promise<number>,
  until: number,
  full: (n: number) => boolean,
): Promise<{ done: number; behind: boolean }> {
  let done = 0;
  for (;;) {
    const n = await step();
    done += n;
    if (!full(n)) return { done, behind: false };
    if (steadyNow() >= until) return { done, behind: true };
  }
}

/**
 * One pass of payload retention and, with `historyRetentionDays`, history pruning: batch after
 * batch while they come back full, for at most `budgetMs` (the pass shares the maintenance loop
 * with lease recovery). One batch a pass would fall behind for good once more messages expire
 * per pass than a batch holds.
 */
export async function retentionPass(
  db: Db,
  options: {
    historyRetentionDays: number | undefined;
    budgetMs: number;
    batch?: number;
    /** Where the last pass's history pruning stopped; a new walk from the oldest without it. */
    historyWalk?: HistoryWalk;
  },
): Promise<RetentionPass> {
  const batch = options.batch ?? RETENTION_BATCH;
  const until = steadyNow() + options.budgetMs;
  const drain = (step: () => Promise<number>, full = (n: number) => n >= batch) =>
    drainBatches(step, until, full);
  const expired = await drain(() => expireOldPayloads(db, batch));
  const days = options.historyRetentionDays;
  const none = { done: 0, behind: false };
  const pruned = days === undefined ? none : await pruneHistory(db, days, batch, options.historyWalk, drain);
  const claims = days === undefined ? none : await drain(() => pruneOldClaims(db, days, batch));
  return {
    expired: expired.done,
    pruned: pruned.done,
    claims: claims.done,
    behind: expired.behind || pruned.behind || claims.behind,
  };
}

/** History pruning's share of a pass: batch after batch from where the walk stands, while more lies ahead. */
async function pruneHistory(
  db: Db,
  days: number,
  batch: number,
  walk: HistoryWalk = newHistoryWalk(),
  drain: (step: () => Promise<number>, full: () => boolean) => Promise<{ done: number; behind: boolean }>,
): Promise<{ done: number; behind: boolean }> {
  if (walk.sweptAt !== null && steadyNow() - walk.sweptAt >= walk.resweepEveryMs) {
    walk.after = '';
    walk.sweptAt = null;
  }
  let more = false;
  return drain(
    async () => {
      const step = await db.transaction((tx) =>
        pruneHistoryBatch(tx, days, { ...PRUNE_BATCH, messages: batch }, walk.after),
      );
      if (step.walkedTo !== null) walk.after = step.walkedTo;
      more = step.more;
      if (!more && walk.sweptAt === null) walk.sweptAt = steadyNow();
      return step.pruned;
    },
    // Only a walk that reached the newest old message is done: a batch bounded by its deliveries
    // or its walk may prune few or none, with more behind it.
    () => more,
  );
}
