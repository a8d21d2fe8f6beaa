// Publishing: the one path by which a message enters herald, whether through the HTTP API or
// the library inside the caller's own transaction.

import crypto from 'node:crypto';
import { type AppRow, findApp, insertAppIfAbsent } from '../db/apps.ts';
import { EXAMPLE_SENT, recordAudit } from '../db/audit.ts';
import { findEventType } from '../db/event-types.ts';
import { INTAKE_KEY_PREFIX } from '../db/intake.ts';
import {
  type MessageRow,
  type NewMessage,
  OWN_WRITE_LOCK_TIMEOUT,
  type PublishResult,
  publishMessage,
  publishMessages,
} from '../db/messages.ts';
import type { Queryable } from '../db/port.ts';
import { MAX_PAYLOAD_DEPTH, nestedDeeperThan } from '../domain/json-depth.ts';
import { numberByValue } from '../domain/json-numbers.ts';
import {
  assertIdempotencyKeyLength,
  HeraldError,
  invalidField,
  invalidIdempotencyKey,
  notFound,
} from '../errors.ts';
import { ID_PREFIX, type MessageIn } from '../schemas/svix.ts';
import { assertPathIdentifier, uidFromPath } from '../schemas/validate.ts';
import {
  appFieldsFrom,
  assertPublishAllowed,
  assertUidAllowed,
  auditAppCreated,
  requireApp,
} from './apps.ts';
import type { Actor, Core } from './core.ts';

export const DEFAULT_RETENTION_DAYS = 90;

export interface PublishOptions {
  idempotencyKey?: string | null;
  /** In a caller's transaction: NOTIFY the workers at its commit (default), or leave it to them. */
  wake?: boolean | undefined;
}

export interface Published {
  message: MessageRow;
  /** false when an earlier publish with the same idempotency key is returned. */
  created: boolean;
}

export async function publish(
  core: Core,
  db: Queryable,
  actor: Actor,
  appIdOrUid: string,
  input: MessageIn,
  options: PublishOptions = {},
): Promise<Published> {
  const payload = payloadJson(input.payload);
  if (Buffer.byteLength(payload) > core.config.maxBodyBytes) {
    throw new HeraldError('payload_too_large', `payload exceeds ${core.config.maxBodyBytes} bytes`);
  }
  const key = idempotencyKeyOf(options.idempotencyKey);
  if (key?.startsWith(INTAKE_KEY_PREFIX))
    throw invalidIdempotencyKey(
      `keys beginning with "${INTAKE_KEY_PREFIX}" are those of messages relayed from inbound sources`,
    );
  // Once per publish: a group commit that writes its items alone after a failure asks again.
  const hash = key === null ? null : requestHash(input);
  const messageFor = (app: AppRow): NewMessage => ({
    appId: app.id,
    eventType: input.eventType,
    eventId: input.eventId ?? null,
    payload,
    channels: input.channels ?? null,
    tags: input.tags ?? null,
    idempotencyKey: key,
    requestHash: hash,
    retentionDays: input.payloadRetentionPeriod ?? app.retentionDays ?? DEFAULT_RETENTION_DAYS,
  });
  // On herald's own pool the publish joins a group commit, which also looks its app up together
  // with the others'. In a caller's transaction it runs there, and commits with the caller's work.
  // Creating a missing app (`application` in the body) is rare: it takes the one-by-one path.
  const publishAlone = (tx: Queryable, heraldsOwn: boolean) =>
    resolveOrCreateApp(tx, actor, appIdOrUid, input).then((app) => {
      assertPublishAllowed(actor, app);
      return publishMessage(tx, messageFor(app), actor.id, { wake: options.wake, heraldsOwn });
    });
  // In a caller's transaction a database error stays what it is: PostgreSQL has aborted that
  // transaction, and "application not found" (which requireApp says before anything is written,
  // the transaction still usable) would let a caller that skips a gone app COMMIT — which
  // PostgreSQL answers with a ROLLBACK, losing the caller's own work without an error.
  const result = await (db !== core.db
    ? publishAlone(db, false)
    : (!input.application
        ? core.publishGrouped({ appRef: appIdOrUid, actor, messageFor, size: payload.length })
        : // The app it creates, its audit entry and the message commit together, or none of them;
          // herald's own write, it waits for a lock no longer than a group commit's publishes —
          // the app's uid too, which another transaction creating that app holds until it ends.
          core.db.transaction(async (tx) => {
            await tx.query(`set local lock_timeout = '${OWN_WRITE_LOCK_TIMEOUT}'`);
            return publishAlone(tx, true);
          })
      ).catch(rethrowAppGone));
  if (result.kind === 'conflict') {
    throw new HeraldError(
      'idempotency_conflict',
      'this idempotency-key was already used with different content',
    );
  }
  if (result.kind === 'event_id_taken') {
    throw new HeraldError('conflict', `eventId ${input.eventId} names message ${result.message.id} already`);
  }
  if (result.kind === 'key_holder_gone') {
    // Only this publish: the others of its group commit went in. Tried again, it publishes anew.
    throw new HeraldError(
      'store_unavailable',
      'the message that held this idempotency-key was removed by history retention just now; publish again',
    );
  }
  return { message: result.message, created: result.kind === 'created' };
}

/**
 * The payload as JSON text. What a library caller hands over may not be JSON (a BigInt, a cycle):
 * a validation error naming the field, not JSON.stringify's TypeError. Nor nested past
 * MAX_PAYLOAD_DEPTH (domain/json-depth.ts).
 */
function payloadJson(payload: Record<string, unknown>): string {
  let json: string;
  try {
    json = JSON.stringify(payload);
  } catch (error) {
    throw invalidField(['payload'], `must be JSON: ${(error as Error).message}`);
  }
  if (nestedDeeperThan(json, MAX_PAYLOAD_DEPTH)) {
    throw invalidField(['payload'], `nested more than ${MAX_PAYLOAD_DEPTH} objects and arrays deep`);
  }
  return json;
}

/**
 * The key as the API reads its header: '' is none. Anything but a string without U+0000 is
 * refused before anything is written: PostgreSQL refuses U+0000 in the write, which would abort a
 * library caller's transaction.
 */
function idempotencyKeyOf(given: unknown): string | null {
  if (given === undefined || given === null || given === '') return null;
  // (A lone surrogate would be written as U+FFFD, which two different keys could share.)
  if (typeof given !== 'string' || given.includes('\0') || !given.isWellFormed())
    throw invalidIdempotencyKey('a string without U+0000 or a lone UTF-16 surrogate');
  assertIdempotencyKeyLength(given);
  return given;
}

/** One publish waiting for its group commit: the app is looked up with the others of its batch. */
export interface GroupedPublish {
  /** The app's id or uid, as the caller named it. */
  appRef: string;
  actor: Actor;
  messageFor: (app: AppRow) => NewMessage;
  /** Characters of its payload: what its share of a batch's statement is (batchSize). */
  size: number;
}

/** Apps by the ids or uids their publishers named (findApps, or a cache in front of it). */
export type AppLookup = (idsOrUids: readonly string[]) => Promise<Map<string, AppRow>>;

/**
 * The group commit's write: one lookup of every app the batch names, then one call for every
 * message whose app exists and is within its caller's reach. A missing or forbidden app fails its
 * own publish only.
 */
export async function publishGroup(
  db: Queryable,
  batch: GroupedPublish[],
  appsOf: AppLookup,
): Promise<(PublishResult | Error)[]> {
  const apps = await appsOf([...new Set(batch.map((p) => p.appRef))]);
  const outcomes: (PublishResult | Error)[] = new Array(batch.length);
  const ready: { at: number; message: NewMessage & { actor: string } }[] = [];
  for (const [at, p] of batch.entries()) {
    const app = apps.get(p.appRef);
    try {
      if (!app) throw notFound('application');
      assertPublishAllowed(p.actor, app);
      ready.push({ at, message: { ...p.messageFor(app), actor: p.actor.id } });
    } catch (error) {
      outcomes[at] = error as Error;
    }
  }
  const published = await publishMessages(
    db,
    ready.map((r) => r.message),
    { heraldsOwn: true },
  );
  for (const [i, { at }] of ready.entries()) outcomes[at] = published[i]!;
  return outcomes;
}

/**
 * The app was found (in the app cache) but deleted before the message went in: the message's
 * foreign key says so. That is the app not found, as if the lookup had missed.
 */
function rethrowAppGone(error: unknown): never {
  if ((error as { constraint?: string }).constraint === 'message_app_id_fkey') throw notFound('application');
  throw error;
}

/**
 * What makes two publishes "the same": everything the caller sent, in the order it sent it, a
 * number kept as written counted by its value (numberByValue): a payload hashes as it did before
 * numbers were kept, so a retry across the upgrade is the same publish.
 */
function requestHash(input: MessageIn): Buffer {
  const { application: _ignored, ...content } = input;
  return crypto.createHash('sha256').update(JSON.stringify(content, numberByValue)).digest();
}

/** Svix: `application` in the body creates the app when the path's id or uid does not exist. */
async function resolveOrCreateApp(db: Queryable, actor: Actor, appIdOrUid: string, input: MessageIn) {
  if (input.application) {
    try {
      return await requireApp(db, actor, appIdOrUid);
    } catch (error) {
      if (!(error instanceof HeraldError) || error.kind !== 'not_found') throw error;
      // Creating an app is an administrator's act, as POST /api/v1/app is, whatever the route.
      if (actor.appIds !== null || !actor.scopes.includes('admin')) {
        throw new HeraldError('forbidden', 'creating an application needs an unrestricted admin key');
      }
      // The app created is the one the path names: never another, which the answer's URL would
      // not find the message under.
      // Without a uid in the body, the path's becomes it: it must be one, as POST /app checks.
      assertPathIdentifier('app_id', appIdOrUid, 'application uid');
      const uid = uidFromPath(appIdOrUid, input.application.uid, {
        idPrefix: ID_PREFIX.app,
        what: 'application',
        field: ['application', 'uid'],
      });
      assertUidAllowed(actor, uid);
      const created = await insertAppIfAbsent(db, { ...appFieldsFrom(input.application), uid });
      if (created) {
        await auditAppCreated(db, actor, created);
        return created;
      }
      // The uid is taken: by a concurrent publisher creating this same app (use theirs), or by an
      // app deleted since (a conflict).
      const raced = await findApp(db, appIdOrUid);
      if (raced) return raced;
      throw new HeraldError('conflict', 'an application with this uid already exists');
    }
  }
  return requireApp(db, actor, appIdOrUid);
}

/**
 * Svix's send-example: a message of the event type, with the example from its newest schema (or
 * `{}`), delivered to one endpoint only, whatever the endpoint's filters. The workers are woken
 * when the caller commits.
 */
export async function publishExample(
  db: Queryable,
  actor: Actor,
  app: AppRow,
  endpointId: string,
  eventTypeName: string,
  exampleIndex = 0,
): Promise<MessageRow> {
  let example: Record<string, unknown> = PING_PAYLOAD;
  // The ping (a dashboard's "send test") needs no event type of that name, as in Svix.
  if (eventTypeName !== PING_EVENT_TYPE) {
    const eventType = await findEventType(db, eventTypeName);
    if (!eventType) throw notFound('event type');
    example = exampleOf(eventType.schemas, exampleIndex);
  }
  const result = await publishMessage(
    db,
    {
      appId: app.id,
      eventType: eventTypeName,
      eventId: null,
      payload: JSON.stringify(example),
      channels: null,
      tags: null,
      idempotencyKey: null,
      requestHash: null,
      retentionDays: app.retentionDays ?? DEFAULT_RETENTION_DAYS,
      onlyEndpointId: endpointId,
    },
    actor.id,
  );
  // Without an idempotency key, a publish can only create.
  if (result.kind !== 'created') throw new Error(`an example publish answered ${result.kind}`);
  // Said in the audit log: the message went to this endpoint alone, whatever else its event type
  // matches (the doctor must not take its single delivery for a lost fan-out).
  await recordAudit(db, {
    actor: actor.id,
    action: EXAMPLE_SENT,
    appId: app.id,
    targetType: 'message',
    targetId: result.message.id,
    details: { endpointId },
  });
  return result.message;
}

/** Svix's test event: an example of it is sent without an event type registered. */
const PING_EVENT_TYPE = 'svix.ping';
const PING_PAYLOAD = { success: true };

/**
 * Example `index` of the highest schema version ("1", "2", …): of its `examples`, or with index 0
 * its `example` when it has no list; `{}` when it has neither. An index past the list is refused,
 * naming it: a caller who asked for the third example must not be sent the first.
 */
function exampleOf(schemas: Record<string, unknown> | null, index: number): Record<string, unknown> {
  const versions = Object.keys(schemas ?? {}).sort((a, b) => Number(b) - Number(a));
  const newest = versions[0] === undefined ? undefined : (schemas![versions[0]] as Record<string, unknown>);
  const examples = Array.isArray(newest?.['examples']) ? (newest['examples'] as unknown[]) : [];
  if (index > 0 && index >= examples.length) {
    throw invalidField(['exampleIndex'], `the event type's schema has ${examples.length} examples`);
  }
  const example = examples[index] ?? newest?.['example'];
  return example !== null && typeof example === 'object' && !Array.isArray(example)
    ? (example as Record<string, unknown>)
    : {};
}
