// History purge: what an endpoint or an app has accumulated goes ahead of it, in transactions of
// a bounded size, before its row is deleted.
//
// Deleting the row alone cascades through its whole history in one transaction, holding the row's
// lock for as long: every publish to the app fans out to the endpoints under that lock (FOR KEY
// SHARE) and waited behind an endpoint's deletion — a batch of the group commit for 2 s, then each
// of the app's publishes answered 503 — and so did the outcome write of a worker whose batch held
// the endpoint's delivery in flight (~1.3 s per 200,000 deliveries with their attempts, measured).
// An app's deletion held every batch of the group commit that carried one of its publishes, other
// tenants' publishes with them, and one transaction over an app's whole history holds back every
// VACUUM of the queue tables for as long. Here each batch locks only the rows it deletes.
//
// What goes early must not be missed while the row still stands:
// - an endpoint keeps its pending deliveries, work still owed were its deletion cut short; only
//   its finished ones go ahead of it;
// - an app's messages are the records that make a retried publish with its idempotency key a
//   duplicate, and its sources' intake claims make a provider's redelivery one. They go only once
//   the app's endpoints are gone, each in a transaction of its own: a retry or a redelivery
//   answered meanwhile is a new message with no one to send it to, and goes with the app.
//
// A deletion cut short leaves the row with part of what it had gone; asking again finishes it.

import { deleteEndpoint } from './endpoints.ts';
import type { Db, Queryable } from './port.ts';

/** Rows per purge transaction: as history retention's batches (retention.ts). */
export const PURGE_BATCH = 10_000;

/**
 * Runs `sql` (one statement, so one transaction) from the cursor '' until a batch picks nothing
 * more; answers how many rows it deleted. Each statement picks its batch by the index that leads
 * with the owner (the order by names it, so that no plan walks another index from the cursor) and
 * deletes it by primary key. A row that changed while the statement waited for its lock — claimed
 * for a new cycle, replayed, deleted by another purge or by history retention — is rechecked and
 * passed over; the cursor follows the rows picked, not those deleted, so such a batch does not end
 * the purge.
 */
async function inBatches(db: Queryable, sql: string, owner: string, batch: number): Promise<number> {
  let after = '';
  let total = 0;
  for (;;) {
    const { rows } = await db.query<{ deleted: number; last: string | null }>(sql, [owner, after, batch]);
    const { deleted, last } = rows[0]!;
    total += deleted;
    if (last === null) return total;
    after = last;
  }
}

/** The statement that deletes one batch of `table`'s rows of an owner, picked by `pick`. */
function batchDelete(table: string, pick: string, recheck: string): string {
  return `
    with picked as materialized (${pick}),
    gone as (
      delete from ${table} x where x.id = any (array(select id from picked)) ${recheck}
      returning 1
    )
    select (select count(*) from gone)::int as deleted, (select max(key) from picked) as last`;
}

const FINISHED = `state in ('succeeded', 'failed')`;

const ENDPOINT_FINISHED_DELIVERIES = batchDelete(
  'delivery',
  `select id, message_id as key from delivery
    where endpoint_id = $1 and message_id > $2 and ${FINISHED}
    order by endpoint_id, message_id limit $3`,
  `and x.${FINISHED}`,
);

const SOURCE_CLAIMS = batchDelete(
  'intake',
  `select id, delivery_id as key from intake
    where source_id = $1 and delivery_id > $2
    order by source_id, delivery_id limit $3`,
  '',
);

// A message with deliveries (to an endpoint made meanwhile), or relayed for a claim made since the
// claims went (a redelivery), is left to the app's deletion: a claim is never left without its
// message, were the deletion cut short.
const UNCLAIMED_UNSENT = (m: string) =>
  `not exists (select 1 from delivery d where d.message_id = ${m}.id)
   and not exists (select 1 from intake i where i.message_id = ${m}.id)`;
const APP_MESSAGES = batchDelete(
  'message',
  `select id, id as key from message k
    where app_id = $1 and id > $2 and ${UNCLAIMED_UNSENT('k')}
    order by app_id, id limit $3`,
  `and ${UNCLAIMED_UNSENT('x')}`,
);

/** Deletes the endpoint's finished deliveries with their attempts; answers how many. */
export function purgeEndpointHistory(
  db: Queryable,
  endpointId: string,
  batch = PURGE_BATCH,
): Promise<number> {
  return inBatches(db, ENDPOINT_FINISHED_DELIVERIES, endpointId, batch);
}

/**
 * Deletes all that the app holds but its row and its sources: each endpoint after its history,
 * then the sources' intake claims, then the messages. The app's own deletion, after it, takes what
 * came meanwhile.
 */
export async function purgeApp(db: Db, appId: string, batch = PURGE_BATCH): Promise<void> {
  const ids = (table: 'endpoint' | 'source') =>
    db.query<{ id: string }>(`select id from ${table} where app_id = $1 order by id`, [appId]);
  for (const { id } of (await ids('endpoint')).rows) {
    await purgeEndpointHistory(db, id, batch);
    await db.transaction((tx) => deleteEndpoint(tx, id));
  }
  for (const { id } of (await ids('source')).rows) await inBatches(db, SOURCE_CLAIMS, id, batch);
  await inBatches(db, APP_MESSAGES, appId, batch);
}
