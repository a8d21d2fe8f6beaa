// Retention: a message's payload is removed once its retention period has passed (Svix's
// payloadRetentionPeriod). The message, its deliveries, attempts and intake records stay, with
// ids, states, times and digests — the history outlives the content.

import type { Queryable } from './port.ts';

/** Removes up to `batch` expired payloads; returns how many. Small batches keep locks short. */
export async function expireOldPayloads(db: Queryable, batch = 1000): Promise<number> {
  const result = await db.query(
    `update message set payload = null
      where id in (select id from message where payload is not null and payload_expires_at < now()
                    order by payload_expires_at limit $1 for update skip locked)`,
    [batch],
  );
  return result.rowCount;
}
