// Messages and the publish transaction. Publishing writes the message, one delivery per endpoint
// subscribed at this moment (disabled ones included: their deliveries wait), the audit entry and a
// wake-up NOTIFY, all in the caller's transaction: acceptance is a database fact.

import { type PageRequest, pageQuery, toPage } from './pagination.ts';
import type { Queryable } from './port.ts';

export const WAKE_CHANNEL = 'herald_work';

export interface MessageRow {
  id: string;
  appId: string;
  eventType: string;
  eventId: string | null;
  payload: string | null;
  channels: string[] | null;
  tags: string[] | null;
  createdAt: Date;
}

export interface NewMessage {
  appId: string;
  eventType: string;
  eventId: string | null;
  payload: string;
  channels: string[] | null;
  tags: string[] | null;
  idempotencyKey: string | null;
  businessKey?: string | null;
  requestHash: Buffer | null;
  retentionDays: number;
  /**
   * NOTIFY the workers inside this transaction (fires exactly at the caller's COMMIT, but
   * serialises commits: see waker.ts). false: the caller wakes them after committing.
   */
  wakeOnCommit: boolean;
  /** Deliver to this endpoint only, whatever its filters (Svix's send-example). */
  onlyEndpointId?: string | null;
}

const COLUMNS = `id, app_id as "appId", event_type as "eventType", event_id as "eventId", payload, channels,
  tags, created_at as "createdAt"`;

export type PublishResult =
  | { kind: 'created'; message: MessageRow; deliveries: number }
  | { kind: 'replayed'; message: MessageRow }
  | { kind: 'conflict'; message: MessageRow };

/**
 * Inserts the message and its delivery snapshot in one statement. With an idempotency key that
 * was used before, nothing is inserted: the earlier message comes back as `replayed` when the
 * content matches and as `conflict` when it does not. Two concurrent publishers with one key
 * meet at the unique index: the second waits for the first to commit and then replays it.
 */
export async function publishMessage(db: Queryable, m: NewMessage, actor: string): Promise<PublishResult> {
  const inserted = await db.query<MessageRow & { deliveries: number }>(
    `with msg as (
       insert into message (app_id, event_type, event_id, payload, channels, tags, idempotency_key, request_hash,
                            payload_expires_at, business_key)
       values ($1, $2, $3, $4, $5, $10, $6, $7, now() + make_interval(days => $8), $11)
       on conflict (app_id, idempotency_key) do nothing
       returning ${COLUMNS}
     ), fanout as (
       insert into delivery (app_id, message_id, endpoint_id, next_attempt_at)
       select $1, msg.id, e.id, now() from msg join endpoint e on e.app_id = $1
        where case when $12::text is not null then e.id = $12
                   else (e.filter_types is null or $2 = any(e.filter_types))
                        and (e.channels is null or e.channels && coalesce($5::text[], '{}')) end
       returning 1
     ), audit as (
       insert into audit_entry (actor, action, app_id, target_type, target_id)
       select $9, 'message.created', $1, 'message', msg.id from msg
     )
     select msg.*, (select count(*) from fanout)::int as deliveries
       from msg${m.wakeOnCommit ? `, lateral (select pg_notify('${WAKE_CHANNEL}', $1)) wake` : ''}`,
    [
      m.appId,
      m.eventType,
      m.eventId,
      m.payload,
      m.channels,
      m.idempotencyKey,
      m.requestHash,
      m.retentionDays,
      actor,
      m.tags,
      m.businessKey ?? null,
      m.onlyEndpointId ?? null,
    ],
  );
  const row = inserted.rows[0];
  if (row) {
    const { deliveries, ...message } = row;
    return { kind: 'created', message, deliveries };
  }
  const existing = await db.query<MessageRow & { requestHash: Uint8Array | null }>(
    `select ${COLUMNS}, request_hash as "requestHash" from message where app_id = $1 and idempotency_key = $2`,
    [m.appId, m.idempotencyKey],
  );
  const { requestHash, ...message } = existing.rows[0]!;
  const same =
    requestHash !== null && m.requestHash !== null && Buffer.from(requestHash).equals(m.requestHash);
  return { kind: same ? 'replayed' : 'conflict', message };
}

export async function findMessage(
  db: Queryable,
  appId: string,
  idOrEventId: string,
): Promise<MessageRow | null> {
  const result = await db.query<MessageRow>(
    `select ${COLUMNS} from message where app_id = $1 and (id = $2 or event_id = $2)
      order by (id = $2) desc limit 1`,
    [appId, idOrEventId],
  );
  return result.rows[0] ?? null;
}

export interface MessageFilter {
  eventTypes: string[] | null;
  channel: string | null;
  before: Date | null;
  after: Date | null;
}

export async function listMessages(db: Queryable, appId: string, page: PageRequest, f: MessageFilter) {
  const q = pageQuery('id', page, 2);
  const result = await db.query<MessageRow>(
    `select ${COLUMNS} from message
      where app_id = $1 and ${q.condition}
        and ($3::text[] is null or event_type = any($3)) and ($4::text is null or $4 = any(channels))
        and ($5::timestamptz is null or created_at < $5) and ($6::timestamptz is null or created_at > $6)
      order by ${q.orderBy} limit ${q.fetch}`,
    [appId, q.param, f.eventTypes, f.channel, f.before, f.after],
  );
  return toPage(result.rows, page, q, (r) => r.id);
}

export async function expungeMessagePayload(db: Queryable, appId: string, id: string): Promise<boolean> {
  const result = await db.query(`update message set payload = null where app_id = $1 and id = $2`, [
    appId,
    id,
  ]);
  return result.rowCount > 0;
}
