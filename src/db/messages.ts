// Messages and the publish transaction. Publishing writes the message, one delivery per endpoint
// subscribed at this moment (disabled ones included: their deliveries wait) and the audit entry in
// the caller's transaction — acceptance is a database fact — and, unless the caller wakes the
// workers itself after its COMMIT, a NOTIFY that fires with that commit.

import { type PageRequest, pageQuery, toPage } from './pagination.ts';
import type { Queryable } from './port.ts';
import { createdBetween } from './time-ids.ts';

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
  /** Deliver to this endpoint only, whatever its filters (Svix's send-example). */
  onlyEndpointId?: string | null;
}

/** A MessageRow's columns; `payload` is the expression its payload is read from. */
const columns = (payload: string) => `id, app_id as "appId", event_type as "eventType", event_id as "eventId",
  ${payload} as payload, channels, tags, created_at as "createdAt"`;
/**
 * Whether a message still has a payload to show or send, `alias` being its table's (with its dot,
 * or empty): one past its retention is gone before the job that removes expired payloads (each
 * minute) has reached it, as the claim sends none past that time (migration 0044).
 */
export const payloadKept = (alias: string) =>
  `(${alias}payload is not null and ${alias}payload_expires_at > now())`;

/** A message's payload as herald shows it: null (`{"expired": true}`) once it is not kept. */
export const shownPayload = (alias: string) => `case when ${payloadKept(alias)} then ${alias}payload end`;
const COLUMNS = columns(shownPayload(''));

export type PublishResult =
  | { kind: 'created'; message: MessageRow; deliveries: number }
  | { kind: 'replayed'; message: MessageRow }
  | { kind: 'conflict'; message: MessageRow }
  /** Its eventId names another message of the app (`message`): nothing was inserted. */
  | { kind: 'event_id_taken'; message: MessageRow }
  /**
   * Its idempotency key was held by a message that history retention deleted between the insert
   * and the read back: nothing was inserted for it (the others of the batch were).
   */
  | { kind: 'key_holder_gone' };

/**
 * Inserts the message and its delivery snapshot in one call. With an idempotency key that
 * was used before, nothing is inserted: the earlier message comes back as `replayed` when the
 * content matches and as `conflict` when it does not. Two concurrent publishers with one key
 * meet at the unique index: the second waits for the first to commit and then replays it.
 */
export async function publishMessage(
  db: Queryable,
  m: NewMessage,
  actor: string,
  options: PublishOptions = {},
): Promise<PublishResult> {
  const [result] = await publishMessages(db, [{ ...m, actor }], options);
  return result!;
}

export interface WakeOption {
  /**
   * NOTIFY the workers when the transaction commits (default). false leaves the wake-up to the
   * caller (`wakeWorkers` after its COMMIT) or to the workers' polling: see publishMessages.
   */
  wake?: boolean | undefined;
}

/**
 * How long a write of herald's own waits for a lock: as long as the publish functions do
 * (migration 0038), so that one held lock answers its publish `store_unavailable` and holds up no
 * other publish for longer.
 */
export const OWN_WRITE_LOCK_TIMEOUT = '2s';

export interface PublishOptions extends WakeOption {
  /**
   * A write of herald's own (a group commit's batch, or a publish in a transaction of herald's):
   * it waits at most 2 s for a lock (herald_publish_grouped, migration 0038), where a publish in a
   * caller's transaction waits as that transaction does.
   */
  heraldsOwn?: boolean | undefined;
}

/**
 * Publishes several messages in ONE call — each with its deliveries and audit entry, each with its
 * own idempotency outcome — so that they share one commit (group commit). Results come back in
 * the order of `messages`. Atomic as a whole: if it fails, nothing was published.
 *
 * The call also wakes the workers: its NOTIFY fires exactly when the transaction commits.
 * PostgreSQL holds a database-wide lock from a notifying COMMIT until its WAL flush, so notifying
 * commits queue behind one another — one per batch (group commit) keeps that queue short. A
 * caller that commits many small transactions of its own can leave the NOTIFY out (`wake: false`)
 * and wake the workers after its COMMIT instead, so that its commits are flushed together.
 * (herald_publish_messages, migrations/0005.)
 */
export async function publishMessages(
  db: Queryable,
  messages: readonly (NewMessage & { actor: string })[],
  { wake = true, heraldsOwn = false }: PublishOptions = {},
): Promise<PublishResult[]> {
  if (messages.length === 0) return [];
  const items = messages.map((m, ord) => ({
    ord,
    app_id: m.appId,
    event_type: m.eventType,
    event_id: m.eventId,
    payload: m.payload,
    channels: m.channels,
    tags: m.tags,
    idempotency_key: m.idempotencyKey,
    request_hash: m.requestHash?.toString('hex') ?? null,
    retention_days: m.retentionDays,
    business_key: m.businessKey ?? null,
    only_endpoint_id: m.onlyEndpointId ?? null,
    actor: m.actor,
  }));
  // A new message's payload is the one just sent, so it does not come back over the wire (most of
  // a publish's result); an earlier message's (a replay or a conflict) does while it is kept. Past
  // its retention, before the job that clears it has run, it and its digest are as good as gone:
  // the answer shows what a read shows, and the key names its message whatever the content.
  // Whether it is kept is a scalar subquery, looked up by key and only for a message not created
  // now: an EXISTS there may be planned as a hash of every message (test/plan-shape.test.ts). It
  // reads with the statement's snapshot, taken before the call: a message it does not see was
  // made by this call (a key twice in one batch) or committed during it, and is new, so kept.
  const rows = await db.query<
    MessageRow & {
      ord: number;
      created: boolean;
      requestHash: Uint8Array | null;
      deliveries: number;
      eventIdTaken: boolean;
    }
  >(
    `select ord, created, ${columns('case when kept then payload end')},
            case when kept then request_hash end as "requestHash", deliveries, event_id_taken as "eventIdTaken"
       from ${heraldsOwn ? 'herald_publish_grouped' : 'herald_publish_messages'}($1::jsonb, $2::boolean) f,
            lateral (select not created and coalesce((select ${payloadKept('k.')} from message k where k.id = f.id), true) as kept) g`,
    [JSON.stringify(items, wellFormed), wake],
    heraldsOwn ? 'publish_grouped' : 'publish_messages',
  );
  return inOrder(messages.length, rows.rows, 'message').map(
    ({ created, requestHash, deliveries, eventIdTaken, ...message }, ord) => {
      // Not an error of the call: the batch has committed, and only this item has no message.
      if (message.id === null) return { kind: 'key_holder_gone' };
      if (eventIdTaken) return { kind: 'event_id_taken', message };
      if (created) {
        // As stored: strings go in well-formed (see wellFormed).
        message.payload = messages[ord]!.payload.toWellFormed();
        return { kind: 'created', message, deliveries };
      }
      // The key was used before (or earlier in this batch): the same content is a replay; other
      // content, a conflict. A message whose content is gone (expunged, expired) keeps no
      // digest of it (expungeMessagePayload): nothing to compare, and the key names the message.
      const sent = messages[ord]!.requestHash;
      const same = requestHash === null || (sent !== null && Buffer.from(requestHash).equals(sent));
      return { kind: same ? 'replayed' : 'conflict', message };
    },
  );
}

/**
 * The rows of a batch call, one per item, put back in item order by their `ord`: a result can
 * never reach another item's caller, and a missing one fails the whole batch.
 */
export function inOrder<R extends { ord: number }>(
  count: number,
  rows: readonly R[],
  what: string,
): Omit<R, 'ord'>[] {
  const ordered: Omit<R, 'ord'>[] = new Array(count);
  for (const { ord, ...row } of rows) ordered[ord] = row;
  for (let i = 0; i < count; i++) {
    if (ordered[i] === undefined) throw new Error(`no result for ${what} ${i} of ${count}`);
  }
  return ordered;
}

/**
 * JSON cannot carry a lone UTF-16 surrogate into PostgreSQL (jsonb refuses the escape); it
 * becomes U+FFFD, as it would on its way into a text parameter.
 */
export const wellFormed = (_key: string, value: unknown): unknown =>
  typeof value === 'string' ? value.toWellFormed() : value;

/**
 * Wakes the workers outside any transaction of the caller's, for publishes made with
 * `wake: false`. Nothing is written, so the NOTIFY's own commit need not wait for a WAL flush
 * (synchronous_commit off for this transaction only): the database-wide notify lock is held for
 * a moment, not for a disk flush.
 */
export async function wakeWorkers(db: Queryable): Promise<void> {
  await db.query(
    `select set_config('synchronous_commit', 'off', true), pg_notify('${WAKE_CHANNEL}', '')`,
    [],
    'wake_workers',
  );
}

export async function findMessage(
  db: Queryable,
  appId: string,
  idOrEventId: string,
): Promise<MessageRow | null> {
  // By id, else by event id (one message of the app at most: 0027), each through its own
  // index: one condition naming both columns could use neither, and read every message ever
  // published.
  const result = await db.query<MessageRow>(
    `select ${COLUMNS} from (
       (select 0 as rank, m.* from message m where m.app_id = $1 and m.id = $2)
       union all
       (select 1 as rank, m.* from message m where m.app_id = $1 and m.event_id = $2)
     ) found
     order by rank limit 1`,
    [appId, idOrEventId],
    'find_message',
  );
  return result.rows[0] ?? null;
}

/** The app's messages with these ids (those that exist), for a page of attempts (`with_msg`). */
export async function findMessagesById(
  db: Queryable,
  appId: string,
  ids: readonly string[],
): Promise<MessageRow[]> {
  if (ids.length === 0) return [];
  const result = await db.query<MessageRow>(
    `select ${COLUMNS} from message m where m.app_id = $1 and m.id = any($2)`,
    [appId, ids],
  );
  return result.rows;
}

export interface MessageFilter {
  eventTypes: string[] | null;
  channel: string | null;
  tag: string | null;
  before: Date | null;
  after: Date | null;
}

export async function listMessages(db: Queryable, appId: string, page: PageRequest, f: MessageFilter) {
  const q = pageQuery('id', page, 2);
  // `before` and `after` bound the walk of the app's ids too: tested on created_at alone, a
  // `before` far back walked every message published since.
  const result = await db.query<MessageRow>(
    `select ${COLUMNS} from message
      where app_id = $1 and ${q.condition}
        and ($3::text[] is null or event_type = any($3)) and ($4::text is null or $4 = any(channels))
        and ${createdBetween({ prefix: 'msg', idColumn: 'id', timeColumn: 'created_at', before: '$5', after: '$6' })}
        and ($7::text is null or $7 = any(tags))
      order by ${q.orderBy} limit ${q.fetch}`,
    [appId, q.param, f.eventTypes, f.channel, f.before, f.after, f.tag],
  );
  return toPage(result.rows, page, q, (r) => r.id);
}

/**
 * Removes a message's payload, and the digest of the request that published it (request_hash):
 * a plain SHA-256 of the content would let whoever reads the table test guesses of what was
 * removed. A repeat of its idempotency key then has nothing to compare, and gets the message.
 */
export async function expungeMessagePayload(db: Queryable, appId: string, id: string): Promise<boolean> {
  const result = await db.query(
    `update message set payload = null, request_hash = null where app_id = $1 and id = $2`,
    [appId, id],
  );
  return result.rowCount > 0;
}
