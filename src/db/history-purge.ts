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
// locking only its own rows, which nothing else writes: finished deliveries (no claim or outcome
// write touches them; a replay or a resend of one waits), an app's messages whose deliveries are
// all finished, a source's claims. What is still owed or in flight goes in the cascade.
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
 * Walks an owner's rows a batch at a time from the cursor '': `step` deletes the batch after its
 * cursor and answers the last key it walked past, or null once it walked past nothing. The cursor
 * follows the rows walked, not those deleted, so a batch whose rows another transaction deleted
 * meanwhile (history retention) does not end the purge.
 */
async function inBatches(step: (after: string) => Promise<string | null>): Promise<void> {
  for (let after: string | null = ''; after !== null; ) after = await step(after);
}

/**
 * Runs `sql` (batchDelete's) batch after batch. Each statement picks its batch by the index that
 * leads with the owner (the order by names it, so that no plan walks another index from the
 * cursor) and deletes it by primary key.
 */
function batchDeletes(tx: Queryable, sql: string, owner: string, batch: number): Promise<void> {
  return inBatches(
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

const ENDPOINT_FINISHED_DELIVERIES = batchDelete('delivery', 'endpoint_id', 'message_id', FINISHED);

const SOURCE_CLAIMS = batchDelete('intake', 'source_id', 'delivery_id');

/** Deletes the endpoint's finished deliveries with their attempts. */
export function purgeEndpointHistory(tx: Queryable, endpointId: string, batch = PURGE_BATCH): Promise<void> {
  return batchDeletes(tx, ENDPOINT_FINISHED_DELIVERIES, endpointId, batch);
}

/** Deletes the source's intake claims with their observations. */
export function purgeSourceHistory(tx: Queryable, sourceId: string, batch = PURGE_BATCH): Promise<void> {
  return batchDeletes(tx, SOURCE_CLAIMS, sourceId, batch);
}

const ALL_FINISHED = (m: string) =>
  `not exists (select 1 from delivery d where d.message_id = ${m}.id and not ${FINISHED('d')})`;

/**
 * Deletes each source's claims, then the messages whose deliveries are all finished, with them:
 * what is owed or in flight, and its message, stay for the cascade.
 *
 * A batch of messages goes in two steps, each a statement that sees what committed before it:
 * - it locks those of the walk whose deliveries are all finished. Message first, as every writer
 *   that holds a message and its deliveries does (history retention, a replay, a resend, a
 *   recovery): deleting the deliveries first deadlocked with them. Held so, no delivery of theirs
 *   can be restarted, and a finished one nothing else writes;
 * - it deletes those messages still with none owed or in flight: a restart that committed while
 *   the first step waited for its message was not in that step's snapshot, and its delivery may
 *   be leased by now; its message stays. (One statement that tested and deleted at once tested a
 *   snapshot, and its cascade deleted a delivery a claim had leased since, and made the worker's
 *   outcome write wait for the whole deletion.)
 */
export async function purgeAppHistory(tx: Queryable, appId: string, batch = PURGE_BATCH): Promise<void> {
  const sources = await tx.query<{ id: string }>('select id from source where app_id = $1 order by id', [
    appId,
  ]);
  for (const { id } of sources.rows) await purgeSourceHistory(tx, id, batch);
  await inBatches(async (after) => {
    const walked = await tx.query<{ id: string }>(
      'select id from message where app_id = $1 and id > $2 order by app_id, id limit $3',
      [appId, after, batch],
    );
    if (walked.rows.length === 0) return null;
    const locked = await tx.query<{ id: string }>(
      `select id from message m where m.id = any($1) and ${ALL_FINISHED('m')} order by m.id for update`,
      [walked.rows.map((r) => r.id)],
    );
    await tx.query(`delete from message m where m.id = any($1) and ${ALL_FINISHED('m')}`, [
      locked.rows.map((r) => r.id),
    ]);
    return walked.rows.at(-1)!.id;
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
