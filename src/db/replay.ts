// Replay selection: which finished deliveries a filter names. The dry run and the real run read
// through this one WHERE clause, so what a dry run lists is what the real run restarts.

import { PARKED_FOR_REVIEW } from './deliveries.ts';
import type { Queryable } from './port.ts';
import { createdBetween } from './time-ids.ts';

export type FinishedState = 'failed' | 'succeeded';

export interface ReplaySelection {
  /** Never `pending` or `sending`: a delivery in flight or waiting already has its cycle. */
  states: readonly FinishedState[];
  /** null: every app (an unrestricted actor with no app filter). */
  appIds: readonly string[] | null;
  endpointId: string | null;
  messageIds: readonly string[] | null;
  /** On the message's creation time: [since, until). */
  since: Date | null;
  until: Date | null;
  /**
   * Failed deliveries with unknown outcomes not yet reviewed (`herald reconcile --acknowledge`)
   * are left unless this says otherwise: a request that may have been applied, sent again, could
   * apply it twice (why they were parked), and a restart would clear what the review waits on.
   */
  includeUnreviewed: boolean;
}

export interface ReplayPair {
  deliveryId: string;
  appId: string;
  messageId: string;
  endpointId: string;
  state: FinishedState;
}

// The app is tested on the message too: the same app, and what lets an app's selection walk its
// messages by index (message_app_idx) instead of every delivery ever made.
const MATCHED = `from delivery d join message m on m.id = d.message_id
  where d.state = any($1::text[])
    and ($2::text[] is null or (d.app_id = any($2) and m.app_id = any($2)))
    and ($3::text is null or d.endpoint_id = $3)
    and ($4::text[] is null or d.message_id = any($4))
    and ${createdBetween({ prefix: 'msg', idColumn: 'm.id', timeColumn: 'm.created_at', after: '$5', before: '$6', includeAfter: true })}`;

// What a replay selects: a delivery whose message's payload has passed its retention (or was
// expunged) has nothing left to send — restarted, it would fail at once — so it is left as it is;
// one awaiting review too, unless the selection includes those ($7).
const SENDABLE = `${MATCHED} and m.payload is not null`;
const FROM_WHERE = `${SENDABLE} and ($7 or not ${PARKED_FOR_REVIEW})`;

/** The filters' parameters ($1–$6), then whether parked deliveries are included ($7). */
const matchParams = (s: ReplaySelection) => [
  s.states,
  s.appIds,
  s.endpointId,
  s.messageIds,
  s.since,
  s.until,
];
const params = (s: ReplaySelection) => [...matchParams(s), s.includeUnreviewed];

export async function countReplay(db: Queryable, s: ReplaySelection): Promise<number> {
  const result = await db.query<{ n: number }>(`select count(*)::int as n ${FROM_WHERE}`, params(s));
  return result.rows[0]!.n;
}

/** The deliveries the filters match that replay leaves: their payload is gone. */
export async function countPayloadGone(db: Queryable, s: ReplaySelection): Promise<number> {
  const result = await db.query<{ n: number }>(
    `select count(*)::int as n ${MATCHED} and m.payload is null`,
    matchParams(s),
  );
  return result.rows[0]!.n;
}

/** The deliveries the filters match that are parked for review: left, unless the selection includes them. */
export async function countUnreviewed(db: Queryable, s: ReplaySelection): Promise<number> {
  const result = await db.query<{ n: number }>(
    `select count(*)::int as n ${SENDABLE} and ${PARKED_FOR_REVIEW}`,
    matchParams(s),
  );
  return result.rows[0]!.n;
}

/**
 * The first `limit` selected deliveries, in a stable order (message, then endpoint). With `lock`,
 * the rows are locked for the rest of the transaction: nothing can start or finish a cycle on them
 * between this read and the restart, and PostgreSQL re-checks the state filter on each locked row.
 * Their messages are locked first, in a statement of their own: history retention locks a message
 * before its deliveries (its delete cascades to them), so a replay that held a delivery and then
 * waited for its message (the restart's check that the payload is still there) could deadlock
 * with it; now retention skips the messages a replay holds, or the replay waits for retention.
 */
export async function listReplay(
  db: Queryable,
  s: ReplaySelection,
  limit: number,
  lock = false,
): Promise<ReplayPair[]> {
  const select = `select d.id as "deliveryId", d.app_id as "appId", d.message_id as "messageId",
            d.endpoint_id as "endpointId", d.state
       ${FROM_WHERE}`;
  if (!lock) {
    const result = await db.query<ReplayPair>(`${select} order by d.message_id, d.endpoint_id limit $8`, [
      ...params(s),
      limit,
    ]);
    return result.rows;
  }
  const messages = await db.query<{ id: string }>(
    `select m.id ${FROM_WHERE} order by d.message_id, d.endpoint_id limit $8 for key share of m`,
    [...params(s), limit],
  );
  const result = await db.query<ReplayPair>(
    `${select} and d.message_id = any($9)
      order by d.message_id, d.endpoint_id limit $8 for update of d`,
    [...params(s), limit, messages.rows.map((r) => r.id)],
  );
  return result.rows;
}

/** The app an endpoint belongs to, or null when no endpoint has this id. */
export async function endpointAppId(db: Queryable, endpointId: string): Promise<string | null> {
  const result = await db.query<{ appId: string }>(`select app_id as "appId" from endpoint where id = $1`, [
    endpointId,
  ]);
  return result.rows[0]?.appId ?? null;
}
