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
// holds back VACUUM for as long.

import type { Db, Queryable, Transaction } from './port.ts';
import { refusedStatementCode } from './server-error.ts';

const FINISHED = `state in ('succeeded', 'failed')`;

/** Deletes the endpoint's finished deliveries with their attempts. */
export async function purgeEndpointHistory(tx: Queryable, endpointId: string): Promise<void> {
  await tx.query(`delete from delivery where endpoint_id = $1 and ${FINISHED}`, [endpointId]);
}

/** Deletes the source's intake claims with their observations. */
export async function purgeSourceHistory(tx: Queryable, sourceId: string): Promise<void> {
  await tx.query('delete from intake where source_id = $1', [sourceId]);
}

/**
 * Deletes each source's claims, then the messages whose deliveries are all finished, with them:
 * what is owed or in flight, and its message, stay for the cascade. By message, not by endpoint:
 * every writer that holds a message and its deliveries (history retention, a replay, a resend, a
 * recovery) locks the message first, and so does this delete — all its messages, then their
 * deliveries as its cascade runs — where deleting the deliveries first deadlocked with them.
 */
export async function purgeAppHistory(tx: Queryable, appId: string): Promise<void> {
  const sources = await tx.query<{ id: string }>('select id from source where app_id = $1 order by id', [
    appId,
  ]);
  for (const { id } of sources.rows) await purgeSourceHistory(tx, id);
  await tx.query(
    `delete from message m
      where m.app_id = $1 and not exists (select 1 from delivery d where d.message_id = m.id and not d.${FINISHED})`,
    [appId],
  );
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
