// History purge: what an endpoint, an app or an inbound source has accumulated is deleted ahead of
// its row, in the transaction that deletes the row, so that the row is locked only for the short
// cascade at the end.
//
// Deleting the row first cascades through its whole history while holding the row's lock: every
// publish to the app fans out to the endpoints under that lock (FOR KEY SHARE) and waited behind an
// endpoint's deletion — a batch of the group commit for 2 s, then each of the app's publishes
// answered 503 — and so did the outcome write of a worker whose batch held the endpoint's delivery
// in flight, which the deletion locks first (~1.3 s per 200,000 deliveries with their attempts,
// measured); a source's receipts waited the same way for its claims. Here the history goes first,
// locking only rows that no claim, outcome write or receipt is about to write: finished deliveries
// (a replay or a resend of one waits); owed ones out of the claims' walk (a disabled endpoint's held
// backlog, retries due later); an endpoint's due ones from the tail of its queue, behind the head
// that claims lease from; an app's messages whose deliveries all went so; a source's claims. The
// delivery in flight, the head of the queue and what comes due soon go in the cascade.
//
// One transaction still: until it commits, every reader sees the history whole, and a deletion
// that fails leaves it whole. (In batches of their own, the history would be gone while the row
// stood: a message that lost its delivery reads as missing — replay-missing would send it again,
// the doctor would report it — and a message or claim gone while its app still sends would no
// longer make a retry or a redelivery a duplicate.) The transaction is as long as before: it still
// holds back VACUUM for as long. Its statements are not: each deletes PURGE_BATCH rows at most, so
// that none meets the client's statement deadline (HERALD_DB_QUERY_TIMEOUT_MS), which one statement
// over a long history did — a deletion that could never succeed, however often asked.

import type { Db, Queryable, Transaction } from './port.ts';
import { refusedStatementCode } from './server-error.ts';

/** Rows per statement of a purge (~0.1 s each): as history retention's batches (retention.ts). */
export const PURGE_BATCH = 10_000;

/**
 * Runs a purge with its settings. On indexes, for the rest of the deletion's transaction: each
 * purge statement names its rows by key, and a table small when its statistics were taken (a new
 * database) was read whole instead, at every batch, once it had grown. A statement timeout, for the
 * purge's statements only: one that ran longer would test owed deliveries on a snapshot older than
 * OWED_OUT_OF_THE_WALK's margin (a wait for locks is the way it could); the deletion is answered
 * 503 instead, and can be asked again. The closing cascade keeps the client's deadline.
 */
async function purging(tx: Queryable, purge: () => Promise<void>): Promise<void> {
  await tx.query('set local enable_seqscan = off');
  await tx.query(`set local statement_timeout = '30s'`);
  await purge();
  await tx.query('set local statement_timeout to default');
}

/**
 * Walks an owner's rows a batch at a time from the cursor `start`: `step` deletes the batch after
 * its cursor and answers the last key it walked past, or null once it walked past nothing. The
 * cursor follows the rows walked, not those deleted, so a batch whose rows another transaction
 * deleted meanwhile (history retention) does not end the purge.
 */
async function inBatches<K>(start: K, step: (after: K) => Promise<K | null>): Promise<void> {
  for (let after: K | null = start; after !== null; ) after = await step(after);
}

/**
 * Runs `sql` (batchDelete's) batch after batch. Each statement picks its batch by the index that
 * leads with the owner (the order by names it, so that no plan walks another index from the
 * cursor) and deletes it by primary key.
 */
function batchDeletes(tx: Queryable, sql: string, owner: string, batch: number): Promise<void> {
  return inBatches(
    '',
    async (after) => (await tx.query<{ last: string | null }>(sql, [owner, after, batch])).rows[0]!.last,
  );
}

/**
 * The statement that deletes one batch of `table`'s rows of an owner (`owner` = $1): it picks $3
 * of them in `key` order from the cursor ($2), a walk of the owner's index alone, and deletes
 * those of them that `only` (of a row alias) admits, checked as each is locked. The test is not
 * part of the walk: a planner that joined it there read a whole table for each batch (a hash or
 * materialized anti-join over `delivery`); on the picked rows it is a probe of an index each.
 */
function batchDelete(
  table: string,
  owner: string,
  key: string,
  only: (row: string) => string = () => 'true',
): string {
  return `
    with picked as materialized (
      select id, ${key} as key from ${table}
       where ${owner} = $1 and ${key} > $2
       order by ${owner}, ${key} limit $3
    ),
    gone as (delete from ${table} x where x.id = any (array(select id from picked)) and ${only('x')})
    select max(key) as last from picked`;
}

const FINISHED = (d: string) => `${d}.state in ('succeeded', 'failed')`;

/**
 * Owed, and queued where nothing will bring it into the claims' walk while the statement runs: held
 * while its endpoint is disabled (until an enable), or due after tending's horizon and a minute
 * more (`purging` keeps a statement's snapshot well younger than that). A delivery that a
 * writer changes and commits between a statement's snapshot and its lock stays locked by the
 * statement, though no longer deleted (PostgreSQL locks the latest version before it tests it
 * again); one that tending brought into the walk and a claim leased so would hold its outcome
 * write for the whole deletion. Rows closer to their time go in the cascade. What is left: an
 * enable, a resend or a replay of the endpoint's deliveries, and a claim of one, all committed in
 * the moment between a batch's snapshot and its lock of that row.
 */
const OWED_OUT_OF_THE_WALK = (d: string) =>
  `(${d}.state = 'pending' and exists (
     select 1 from delivery_deferred q
      where q.endpoint_id = ${d}.endpoint_id and q.next_attempt_at = ${d}.next_attempt_at and q.delivery_id = ${d}.id
        and case when q.held then (select e.disabled from endpoint e where e.id = q.endpoint_id)
                 else q.next_attempt_at > statement_timestamp() + herald_defer_horizon() + interval '1 minute' end))`;

/** What a purge takes: a delivery no claim or outcome write reads. */
const PURGEABLE = (d: string) => `(${FINISHED(d)} or ${OWED_OUT_OF_THE_WALK(d)})`;

const ENDPOINT_DELIVERIES_OUT_OF_THE_WALK = batchDelete('delivery', 'endpoint_id', 'message_id', PURGEABLE);

const SOURCE_CLAIMS = batchDelete('intake', 'source_id', 'delivery_id');

/**
 * A due time as text and back, to the microsecond, whatever the session's DateStyle and time zone
 * (JavaScript's Date keeps milliseconds).
 */
const UTC_TEXT = (at: string) => `to_char(${at} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US')`;
const FROM_UTC_TEXT = (param: string) => `(${param}::timestamp at time zone 'UTC')`;

/** The queue key of the endpoint's due row $2 rows from the head: the purge of due rows stops above it. */
const DUE_HEAD_KEPT = `
  select ${UTC_TEXT('next_attempt_at')} as at, delivery_id as id from delivery_due
   where endpoint_id = $1 order by endpoint_id, next_attempt_at, delivery_id offset $2 - 1 limit 1`;

/**
 * One batch of the endpoint's due deliveries, latest due first, from the cursor ($2, $3) down to
 * the kept head ($4, $5): $6 rows of delivery_due's own index, deleted by key if still pending.
 */
const DUE_LATEST_FIRST = `
  with picked as materialized (
    select next_attempt_at, delivery_id from delivery_due
     where endpoint_id = $1
       and (next_attempt_at, delivery_id) < (${FROM_UTC_TEXT('$2')}, $3::text)
       and (next_attempt_at, delivery_id) > (${FROM_UTC_TEXT('$4')}, $5::text)
     order by endpoint_id desc, next_attempt_at desc, delivery_id desc limit $6
  ),
  gone as (delete from delivery x where x.id = any (array(select delivery_id from picked)) and x.state = 'pending')
  select ${UTC_TEXT('next_attempt_at')} as at, delivery_id as id from picked
   order by next_attempt_at, delivery_id limit 1`;

interface QueueKey {
  at: string;
  id: string;
}

/**
 * Deletes the endpoint's due deliveries but the `batch` at the head of its queue, latest due
 * first. A claim looks for the head (the earliest due row it can lock): a row deleted here stays
 * visible, locked, until the deletion commits, and each claim stepped over every such row ahead of
 * a free one (~4 µs apiece, for every tenant's claims), and so did a disable's hold of its due
 * rows. Deleted from the tail, they lie behind the head, which the claims reach first — and lease
 * from meanwhile, one request in flight at a time: ~10,000 rows a second are purged, and an
 * endpoint that took more than `batch` requests in the time its tail takes would drain the head
 * (then its claims step over the tail until the deletion commits). It runs last, right before the
 * row: the head goes in the cascade, under the endpoint's lock, which claims skip.
 */
async function purgeDueTail(tx: Queryable, endpointId: string, batch: number): Promise<void> {
  const head = (await tx.query<QueueKey>(DUE_HEAD_KEPT, [endpointId, batch])).rows[0];
  if (!head) return;
  await inBatches<QueueKey>({ at: 'infinity', id: '' }, async (after) => {
    const params = [endpointId, after.at, after.id, head.at, head.id, batch];
    return (await tx.query<QueueKey>(DUE_LATEST_FIRST, params)).rows[0] ?? null;
  });
}

/**
 * Deletes what the endpoint's row would cascade to, but for what claims walk or the worker holds:
 * its finished deliveries with their attempts, the owed ones that wait out of the claims' walk
 * (held while it is disabled, or due later), and its due ones but for the head of its queue. Its
 * delivery in flight, and the head, go in the cascade.
 */
export async function purgeEndpointDeliveries(
  tx: Queryable,
  endpointId: string,
  batch = PURGE_BATCH,
): Promise<void> {
  await purging(tx, async () => {
    await batchDeletes(tx, ENDPOINT_DELIVERIES_OUT_OF_THE_WALK, endpointId, batch);
    // Last, right before the row: the head need last only as long as this.
    await purgeDueTail(tx, endpointId, batch);
  });
}

/** Deletes the source's intake claims with their observations. */
export async function purgeSourceHistory(
  tx: Queryable,
  sourceId: string,
  batch = PURGE_BATCH,
): Promise<void> {
  await purging(tx, () => batchDeletes(tx, SOURCE_CLAIMS, sourceId, batch));
}

const ALL_PURGEABLE = (m: string) =>
  `not exists (select 1 from delivery d where d.message_id = ${m}.id and not ${PURGEABLE('d')})`;

/**
 * Deletes each source's claims, then the messages whose deliveries are all finished or owed out of
 * the claims' walk, with them: a delivery in flight or due, and its message, stay for the cascade.
 *
 * A batch of messages goes in two steps, each a statement that sees what committed before it:
 * - it locks those of the walk whose deliveries a purge may all take. Message first, as every
 *   writer that holds a message and its deliveries does (history retention, a replay, a resend, a
 *   recovery): deleting the deliveries first deadlocked with them. Held so, no delivery of theirs
 *   can be restarted, and a finished one nothing else writes; an owed one only an enable of its
 *   endpoint brings back into the walk (see OWED_OUT_OF_THE_WALK);
 * - it deletes those messages still so: a restart that committed while the first step waited for
 *   its message was not in that step's snapshot, and its delivery may be leased by now; its
 *   message stays. (One statement that tested and deleted at once tested a snapshot, and its
 *   cascade deleted a delivery a claim had leased since, and made the worker's outcome write wait
 *   for the whole deletion.)
 */
export async function purgeAppHistory(tx: Queryable, appId: string, batch = PURGE_BATCH): Promise<void> {
  await purging(tx, async () => {
    const sources = await tx.query<{ id: string }>('select id from source where app_id = $1 order by id', [
      appId,
    ]);
    for (const { id } of sources.rows) await batchDeletes(tx, SOURCE_CLAIMS, id, batch);
    await inBatches('', async (after) => {
      const walked = await tx.query<{ id: string }>(
        'select id from message where app_id = $1 and id > $2 order by app_id, id limit $3',
        [appId, after, batch],
      );
      if (walked.rows.length === 0) return null;
      const locked = await tx.query<{ id: string }>(
        `select id from message m where m.id = any($1) and ${ALL_PURGEABLE('m')} order by m.id for update`,
        [walked.rows.map((r) => r.id)],
      );
      await tx.query(`delete from message m where m.id = any($1) and ${ALL_PURGEABLE('m')}`, [
        locked.rows.map((r) => r.id),
      ]);
      return walked.rows.at(-1)!.id;
    });
  });
}

const DEADLOCK_DETECTED = '40P01';
const DEADLOCK_TRIES = 3;

/**
 * Runs a deletion's transaction, again when PostgreSQL rolled it back to break a deadlock (up to
 * DEADLOCK_TRIES times in all). A long deletion meets a bulk writer of the same rows in another
 * order more often than a short write does — a recovery of the endpoint's failed deliveries,
 * `herald reconcile --acknowledge` — and the deletion, which began to wait first, is the one
 * PostgreSQL rolls back; its work is all inside the transaction, so it can start over.
 */
export async function deletionTransaction<T>(db: Db, work: (tx: Transaction) => Promise<T>): Promise<T> {
  for (let tries = 1; ; tries++) {
    try {
      return await db.transaction(work);
    } catch (error) {
      if (tries >= DEADLOCK_TRIES || refusedStatementCode(error) !== DEADLOCK_DETECTED) throw error;
    }
  }
}
