// Retention: a message's payload is removed once its retention period has passed (Svix's
// payloadRetentionPeriod). The message, its deliveries, attempts and intake records stay, with
// ids, states, times and digests — the history outlives the content.

import type { Queryable } from './port.ts';
import { firstIdAt } from './time-ids.ts';

/**
 * Deletes up to `batch` messages older than `days` whose deliveries are all finished, with their
 * deliveries and attempts (foreign keys cascade; intake records keep their claim, losing only the
 * link). Opt-in: by default herald keeps the history, which is its audit trail.
 */
export async function pruneFinishedHistory(db: Queryable, days: number, batch = 1000): Promise<number> {
  // The old messages are the first ids of the primary key (time-ids.ts): a walk that stops at
  // the cutoff's id, never a read of the whole history.
  const result = await db.query(
    `delete from message where id in (
       select m.id from message m
        where m.id < ${firstIdAt('msg', 'now() - make_interval(days => $1)')}
          and m.created_at < now() - make_interval(days => $1)
          and not exists (select 1 from delivery d where d.message_id = m.id and d.state in ('pending', 'sending'))
        order by m.id limit $2 for update skip locked)`,
    [days, batch],
  );
  return result.rowCount;
}

/**
 * Removes up to `batch` expired payloads; returns how many. Small batches keep locks short. The
 * payloads still kept are indexed by their expiry (migration 0020): the run reads only those due.
 */
export async function expireOldPayloads(db: Queryable, batch = 1000): Promise<number> {
  const result = await db.query(
    `update message set payload = null
      where id in (select id from message where payload is not null and payload_expires_at < now()
                    order by payload_expires_at limit $1 for update skip locked)`,
    [batch],
  );
  return result.rowCount;
}
