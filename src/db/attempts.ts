// The attempt history: one row per request herald started, never rewritten once finished.

import type { AttemptOutcome, DeliveryState } from '../domain/message-status.ts';
import { shownPayload } from './messages.ts';
import { type PageRequest, pageQuery, toPage } from './pagination.ts';
import type { Queryable } from './port.ts';
import { createdBetween } from './time-ids.ts';

export interface AttemptRow {
  id: string;
  appId: string;
  deliveryId: string;
  messageId: string;
  endpointId: string;
  cycle: number;
  trigger: 'scheduled' | 'manual';
  url: string;
  startedAt: Date;
  finishedAt: Date | null;
  outcome: AttemptOutcome | null;
  statusCode: number | null;
  responseClass: string | null;
  responseBody: string | null;
  durationMs: number | null;
}

const COLUMNS = `id, app_id as "appId", delivery_id as "deliveryId", message_id as "messageId",
  endpoint_id as "endpointId", cycle, trigger, url, started_at as "startedAt", finished_at as "finishedAt",
  outcome, status_code as "statusCode", response_class as "responseClass", response_body as "responseBody",
  duration_ms as "durationMs"`;

export interface AttemptFilter {
  /** Svix MessageStatus to keep: 0 success, 1 pending, 2 fail, 3 sending. */
  status: number | null;
  endpointId: string | null;
  before: Date | null;
  after: Date | null;
  /** Svix StatusCodeClass: 0 no status code, else the hundred (200: 2xx). */
  statusCodeClass: number | null;
  /** Of the attempt's message. */
  eventTypes: string[] | null;
  channel: string | null;
  tag: string | null;
}

const STATUS_CONDITION = `($3::int is null
  or ($3 = 0 and outcome = 'success') or ($3 = 2 and outcome in ('failure', 'unknown'))
  or ($3 = 3 and outcome is null))`;

async function listAttemptsWhere(
  db: Queryable,
  appId: string,
  column: 'message_id' | 'endpoint_id',
  value: string,
  page: PageRequest,
  f: AttemptFilter,
) {
  const q = pageQuery('id', page, 7);
  // An attempt's id is minted at its claim, whose now() is its started_at.
  const result = await db.query<AttemptRow>(
    `select ${COLUMNS} from attempt
      where app_id = $1 and ${column} = $2 and ${STATUS_CONDITION}
        and ($4::text is null or endpoint_id = $4)
        and ${createdBetween({ prefix: 'atmpt', idColumn: 'id', timeColumn: 'started_at', before: '$5', after: '$6' })}
        and ${q.condition}
        and ($8::int is null or ($8 = 0 and status_code is null) or status_code between $8 and $8 + 99)
        and (($9::text[] is null and $10::text is null and $11::text is null)
             or exists (select 1 from message m
                         where m.id = attempt.message_id
                           and ($9::text[] is null or m.event_type = any($9))
                           and ($10::text is null or $10 = any(m.channels))
                           and ($11::text is null or $11 = any(m.tags))))
      order by ${q.orderBy} limit ${q.fetch}`,
    [
      appId,
      value,
      f.status,
      f.endpointId,
      f.before,
      f.after,
      q.param,
      f.statusCodeClass,
      f.eventTypes,
      f.channel,
      f.tag,
    ],
  );
  return toPage(result.rows, page, q, (r) => r.id);
}

export const listAttemptsByMessage = (
  db: Queryable,
  appId: string,
  messageId: string,
  page: PageRequest,
  f: AttemptFilter,
) => listAttemptsWhere(db, appId, 'message_id', messageId, page, f);

export const listAttemptsByEndpoint = (
  db: Queryable,
  appId: string,
  endpointId: string,
  page: PageRequest,
  f: AttemptFilter,
) => listAttemptsWhere(db, appId, 'endpoint_id', endpointId, page, f);

export async function findAttempt(
  db: Queryable,
  appId: string,
  messageId: string,
  attemptId: string,
): Promise<AttemptRow | null> {
  const result = await db.query<AttemptRow>(
    `select ${COLUMNS} from attempt where app_id = $1 and message_id = $2 and id = $3`,
    [appId, messageId, attemptId],
  );
  return result.rows[0] ?? null;
}

/**
 * Removes a finished attempt's stored response. An attempt still in flight has none yet: its
 * outcome write would store the response after the expunge, so it is left as it is
 * ('in_flight'). One statement: the row's lock decides between the two, as the outcome write
 * takes it too.
 */
export async function expungeAttemptResponse(
  tx: Queryable,
  appId: string,
  messageId: string,
  attemptId: string,
): Promise<'expunged' | 'in_flight' | 'not_found'> {
  const result = await tx.query<{ finished: boolean }>(
    `update attempt set response_body = case when outcome is null then response_body end
      where app_id = $1 and message_id = $2 and id = $3
      returning outcome is not null as finished`,
    [appId, messageId, attemptId],
  );
  const row = result.rows[0];
  if (row === undefined) return 'not_found';
  return row.finished ? 'expunged' : 'in_flight';
}

export interface AttemptedMessageRow {
  messageId: string;
  eventType: string;
  eventId: string | null;
  payload: string | null;
  channels: string[] | null;
  tags: string[] | null;
  createdAt: Date;
  state: DeliveryState;
  nextAttemptAt: Date | null;
}

export interface AttemptedMessageFilter {
  /** The delivery's state (Svix MessageStatus); `canceled` matches nothing (deliveryStateOf). */
  state: DeliveryState | 'canceled' | null;
  eventTypes: string[] | null;
  channel: string | null;
  tag: string | null;
  before: Date | null;
  after: Date | null;
}

/**
 * The messages an endpoint was sent, newest first, with the delivery's current state. `before`
 * and `after` bound the walk of the endpoint's deliveries by message id.
 */
export async function listAttemptedMessages(
  db: Queryable,
  appId: string,
  endpointId: string,
  page: PageRequest,
  f: AttemptedMessageFilter,
) {
  const q = pageQuery('d.message_id', page, 3);
  const result = await db.query<AttemptedMessageRow>(
    `select m.id as "messageId", m.event_type as "eventType", m.event_id as "eventId", ${shownPayload('m.')} as payload,
            m.channels,
            m.tags, m.created_at as "createdAt", d.state, d.next_attempt_at as "nextAttemptAt"
       from delivery d join message m on m.id = d.message_id
      where d.app_id = $1 and d.endpoint_id = $2 and ${q.condition}
        and ($4::text is null or d.state = $4)
        and ($5::text[] is null or m.event_type = any($5)) and ($6::text is null or $6 = any(m.channels))
        and ${createdBetween({ prefix: 'msg', idColumn: 'd.message_id', timeColumn: 'm.created_at', before: '$7', after: '$8' })}
        and ($9::text is null or $9 = any(m.tags))
      order by ${q.orderBy} limit ${q.fetch}`,
    [appId, endpointId, q.param, f.state, f.eventTypes, f.channel, f.before, f.after, f.tag],
  );
  return toPage(result.rows, page, q, (r) => r.messageId);
}
