// History purge: what an endpoint, an app or an inbound source has accumulated goes ahead of it,
// in transactions of a bounded size, before the row itself is deleted.
//
// Deleting the row alone cascades through its whole history in one transaction, holding the row's
// lock for as long: every publish to the app fans out to the endpoints under that lock (FOR KEY
// SHARE) and waited behind the deletion — a batch of the group commit for 2 s, then each of the
// app's publishes answered 503 — and so did the outcome write of a worker whose batch held the
// endpoint's delivery in flight (~1.3 s per 200,000 deliveries with their attempts, measured). Here
// each batch locks only the rows it deletes, never the endpoint, app or source: the deletion that
// follows cascades through what came since and what was in flight, which is little.
//
// A deletion cut short leaves the row with part of its history gone; asking again finishes it.

import type { Queryable } from './port.ts';

/** Rows per purge transaction: as history retention's batches (retention.ts). */
export const PURGE_BATCH = 10_000;

/**
 * Runs `step` (one statement, so one transaction) from cursor '' until a batch finds nothing
 * more; each answers how many rows it deleted and the last key it walked past.
 */
async function inBatches(db: Queryable, sql: string, key: string, batch: number): Promise<number> {
  let after = '';
  let total = 0;
  for (;;) {
    const { rows } = await db.query<{ deleted: number; last: string | null }>(sql, [key, after, batch]);
    const { deleted, last } = rows[0]!;
    total += deleted;
    if (last === null) return total;
    after = last;
  }
}

// Each statement picks its batch by the index that leads with the owner's key (the order by names
// it, so that no plan walks another index from the cursor), and deletes it by primary key. A
// delivery in flight is left to its outcome write, and the deletion after the purge takes it; a
// row that became one while the statement waited for its lock is passed over as well.
const ENDPOINT_DELIVERIES = `
  with gone as (
    delete from delivery d
     where d.id = any (array(select id from delivery
                               where endpoint_id = $1 and message_id > $2 and state <> 'sending'
                               order by endpoint_id, message_id limit $3))
       and d.state <> 'sending'
    returning d.message_id
  )
  select count(*)::int as deleted, max(message_id) as last from gone`;

// An app's messages once their deliveries are gone; intake claims that relayed them keep their
// record, unlinked (as after history retention).
const APP_MESSAGES = `
  with gone as (
    delete from message m
     where m.id = any (array(select id from message k
                               where k.app_id = $1 and k.id > $2
                                 and not exists (select 1 from delivery d where d.message_id = k.id)
                               order by k.app_id, k.id limit $3))
       and not exists (select 1 from delivery d where d.message_id = m.id)
    returning m.id
  )
  select count(*)::int as deleted, max(id) as last from gone`;

const SOURCE_CLAIMS = `
  with gone as (
    delete from intake i
     where i.id = any (array(select id from intake
                               where source_id = $1 and delivery_id > $2
                               order by source_id, delivery_id limit $3))
    returning i.delivery_id
  )
  select count(*)::int as deleted, max(delivery_id) as last from gone`;

/** Deletes the endpoint's deliveries and their attempts, but for the one in flight. */
export function purgeEndpointHistory(
  db: Queryable,
  endpointId: string,
  batch = PURGE_BATCH,
): Promise<number> {
  return inBatches(db, ENDPOINT_DELIVERIES, endpointId, batch);
}

/** Deletes the source's intake claims and their observations. */
export function purgeSourceHistory(db: Queryable, sourceId: string, batch = PURGE_BATCH): Promise<number> {
  return inBatches(db, SOURCE_CLAIMS, sourceId, batch);
}

/** Deletes the app's deliveries, messages and intake claims, endpoint by endpoint and source by source. */
export async function purgeAppHistory(db: Queryable, appId: string, batch = PURGE_BATCH): Promise<void> {
  const endpoints = await db.query<{ id: string }>('select id from endpoint where app_id = $1 order by id', [
    appId,
  ]);
  for (const { id } of endpoints.rows) await purgeEndpointHistory(db, id, batch);
  const sources = await db.query<{ id: string }>('select id from source where app_id = $1 order by id', [
    appId,
  ]);
  for (const { id } of sources.rows) await purgeSourceHistory(db, id, batch);
  await inBatches(db, APP_MESSAGES, appId, batch);
}
