// History purge: an endpoint's finished deliveries go ahead of it, in transactions of a bounded
// size, before the endpoint itself is deleted.
//
// Deleting the endpoint alone cascades through its whole history in one transaction, holding the
// endpoint's lock for as long: every publish to its app fans out to the endpoints under that lock
// (FOR KEY SHARE) and waited behind the deletion — a batch of the group commit for 2 s, then each
// of the app's publishes answered 503 — and so did the outcome write of a worker whose batch held
// the endpoint's delivery in flight (~1.3 s per 200,000 deliveries with their attempts, measured).
// Here each batch locks only the rows it deletes, never the endpoint: the deletion that follows
// cascades through what is still to be sent or in flight, and what finished since.
//
// Only finished deliveries go early. A pending one is work still owed: were the deletion cut short,
// the endpoint would stay with it. Messages stay too (an app's deletion takes them in its last
// transaction): they are the records that make a retried publish a duplicate — gone while the app
// still takes publishes, a retry would be a new message, sent again. An inbound source's claims
// are the same records for its receipts, and stay for the same reason.
//
// A deletion cut short leaves the endpoint with part of its history gone; asking again finishes it.

import type { Queryable } from './port.ts';

/** Rows per purge transaction: as history retention's batches (retention.ts). */
export const PURGE_BATCH = 10_000;

// One batch, one statement, so one transaction. It picks the batch by the index that leads with
// the endpoint (the order by names it, so that no plan walks another index from the cursor) and
// deletes it by primary key. A row that changed while the statement waited for its lock — claimed
// by a retry's cycle, replayed, deleted by another purge or by history retention — is rechecked
// and passed over; the cursor follows the rows picked, not those deleted, so such a batch does not
// end the purge.
const FINISHED_DELIVERIES = `
  with picked as materialized (
    select id, message_id from delivery
     where endpoint_id = $1 and message_id > $2 and state in ('succeeded', 'failed')
     order by endpoint_id, message_id limit $3
  ), gone as (
    delete from delivery d
     where d.id = any (array(select id from picked)) and d.state in ('succeeded', 'failed')
    returning 1
  )
  select (select count(*) from gone)::int as deleted, (select max(message_id) from picked) as last`;

/**
 * Deletes the endpoint's finished deliveries with their attempts, from the cursor '' until a
 * batch picks nothing more; answers how many it deleted.
 */
export async function purgeEndpointHistory(
  db: Queryable,
  endpointId: string,
  batch = PURGE_BATCH,
): Promise<number> {
  let after = '';
  let total = 0;
  for (;;) {
    const { rows } = await db.query<{ deleted: number; last: string | null }>(FINISHED_DELIVERIES, [
      endpointId,
      after,
      batch,
    ]);
    const { deleted, last } = rows[0]!;
    total += deleted;
    if (last === null) return total;
    after = last;
  }
}

/** Purges each of the app's endpoints in turn (purgeEndpointHistory). */
export async function purgeAppHistory(db: Queryable, appId: string, batch = PURGE_BATCH): Promise<void> {
  const endpoints = await db.query<{ id: string }>('select id from endpoint where app_id = $1 order by id', [
    appId,
  ]);
  for (const { id } of endpoints.rows) await purgeEndpointHistory(db, id, batch);
}
