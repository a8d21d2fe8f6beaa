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
const KEPT = `(exists (select 1 from delivery d where d.message_id = m.id and d.state in ('pending', 'sending'))
  or exists (select 1 from delivery d join delivery_failed f on (f.endpoint_id, f.delivery_id) = (d.endpoint_id, d.id)
              where d.message_id = m.id and f.unknown_attempts > 0))`;

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
}

export const PRUNE_BATCH: PruneBatch = { messages: RETENTION_BATCH, deliveries: 10_000 };

/** SQL: the old messages, not kept, in id order (the condition on `m` that every step of the walk applies). */
const OLD_AND_FINISHED = `m.id < ${firstIdAt('msg', 'now() - make_interval(days => $1)')}
  and m.created_at < now() - make_interval(days => $1)
  and not ${KEPT}`;

/**
 * Deletes the old finished messages that one batch takes (`PruneBatch`), with their deliveries and
 * attempts (foreign keys cascade), the inbound claims older than `days` that relayed them, with
 * every receipt observed (so herald remembers an inbound delivery id for `days`: one redelivered
 * later is a new event, as a publish's idempotency key is forgotten with its message), and the
 * audit entry of their creation (one per message; an operator's actions on a message stay in the
 * audit log). Returns how many messages it deleted. A younger claim — a delivery id that joined
 * the old message by its business key — stays, marked `message_pruned_at` so that nobody takes it
 * for a claim that never made its message, until pruneOldClaims takes it. Opt-in: by default
 * herald keeps the history, which is its audit trail.
 *
 * Run it in a transaction (`db.transaction`): it walks to the old messages, locks them, then
 * deletes those still finished as a statement that starts after the locks were taken sees them. A
 * replay, resend or recovery holds its delivery's message (deliveries.ts, MESSAGE_HELD) until it
 * commits: one under way keeps its message out of the pass (skip locked), one committed before the
 * delete is seen by it, one that comes after waits and finds the message gone. A single statement
 * judged "finished" on a snapshot taken before it waited for its locks, and could delete a
 * delivery a replay had just restarted, with the lease a worker held on it.
 */
export async function pruneFinishedHistory(
  tx: Queryable,
  days: number,
  batch: PruneBatch = PRUNE_BATCH,
): Promise<number> {
  // The old messages are the first ids of the primary key (time-ids.ts): a walk that stops at
  // the cutoff's id, never a read of the whole history. It goes one message at a time, adding up
  // their deliveries (by the (message, endpoint) key), and stops at the batch's bound.
  const walked = await tx.query<{ id: string }>(
    `with recursive walk (id, deliveries) as (
       (select m.id, (select count(*) from delivery d where d.message_id = m.id)
          from message m where ${OLD_AND_FINISHED}
         order by m.id limit 1)
       union all
       (select next.id, walk.deliveries + (select count(*) from delivery d where d.message_id = next.id)
          from walk, lateral (select m.id from message m where m.id > walk.id and ${OLD_AND_FINISHED}
                               order by m.id limit 1) next
         where walk.deliveries < $3)
     )
     select id from walk limit $2`,
    [days, batch.messages, batch.deliveries],
  );
  if (walked.rowCount === 0) return 0;
  const locked = await tx.query<{ id: string }>(
    'select id from message where id = any($1) order by id for update skip locked',
    [walked.rows.map((r) => r.id)],
  );
  // Still finished as a statement after the locks sees them; and so they stay until the delete
  // below: what could restart one waits for the message's lock, held here.
  const finished = await tx.query<{ id: string }>(
    `select m.id from message m where m.id = any($1) and not ${KEPT}`,
    [locked.rows.map((r) => r.id)],
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
  return result.rowCount;
}

/**
 * Deletes up to `batch` claims marked `message_pruned_at` (their message pruned while they were
 * younger than `days`, or by a version of herald that kept every claim) once they are older than
 * `days`, with their observations. The old claims are the first ids of the primary key
 * (time-ids.ts); once retention keeps up, the walk steps over the old claims that stay — those of
 * messages still kept (waiting, or parked for review), and defects without a message, which
 * `herald doctor` reports — and no others.
 */
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
  options: { historyRetentionDays: number | undefined; budgetMs: number; batch?: number },
): Promise<RetentionPass> {
  const batch = options.batch ?? RETENTION_BATCH;
  const until = steadyNow() + options.budgetMs;
  // History pruning's batches are bounded by their deliveries too: only an empty one says it is done.
  const drain = (step: () => Promise<number>, full = (n: number) => n >= batch) =>
    drainBatches(step, until, full);
  const expired = await drain(() => expireOldPayloads(db, batch));
  const days = options.historyRetentionDays;
  const none = { done: 0, behind: false };
  const pruned =
    days === undefined
      ? none
      : await drain(
          () => db.transaction((tx) => pruneFinishedHistory(tx, days, { ...PRUNE_BATCH, messages: batch })),
          (n) => n > 0,
        );
  const claims = days === undefined ? none : await drain(() => pruneOldClaims(db, days, batch));
  return {
    expired: expired.done,
    pruned: pruned.done,
    claims: claims.done,
    behind: expired.behind || pruned.behind || claims.behind,
  };
}
