// Publishing: the one path by which a message enters herald, whether through the HTTP API or
// the library inside the caller's own transaction.

import crypto from 'node:crypto';
import { type AppRow, findApp, insertAppIfAbsent } from '../db/apps.ts';
import { findEventType } from '../db/event-types.ts';
import { type MessageRow, type NewMessage, publishMessage } from '../db/messages.ts';
import type { Queryable } from '../db/port.ts';
import { HeraldError, notFound } from '../errors.ts';
import type { MessageIn } from '../schemas/svix.ts';
import { appFieldsFrom, auditAppCreated, requireApp } from './apps.ts';
import type { Actor, Core } from './core.ts';

export const DEFAULT_RETENTION_DAYS = 90;

export interface PublishOptions {
  idempotencyKey?: string | null;
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
  const app = await resolveOrCreateApp(db, actor, appIdOrUid, input);
  const payload = JSON.stringify(input.payload);
  if (Buffer.byteLength(payload) > core.config.maxBodyBytes) {
    throw new HeraldError('payload_too_large', `payload exceeds ${core.config.maxBodyBytes} bytes`);
  }
  const key = options.idempotencyKey ?? null;
  const message: NewMessage = {
    appId: app.id,
    eventType: input.eventType,
    eventId: input.eventId ?? null,
    payload,
    channels: input.channels ?? null,
    tags: input.tags ?? null,
    idempotencyKey: key,
    requestHash: key === null ? null : requestHash(input),
    retentionDays: input.payloadRetentionPeriod ?? app.retentionDays ?? DEFAULT_RETENTION_DAYS,
  };
  // On herald's own pool the publish joins a group commit; in a caller's transaction it runs
  // there, and commits with the caller's work.
  const result =
    db === core.db
      ? await core.publishGrouped({ ...message, actor: actor.id })
      : await publishMessage(db, message, actor.id);
  if (result.kind === 'conflict') {
    throw new HeraldError(
      'idempotency_conflict',
      'this idempotency-key was already used with different content',
    );
  }
  return { message: result.message, created: result.kind === 'created' };
}

/** What makes two publishes "the same": everything the caller sent, in the order it sent it. */
function requestHash(input: MessageIn): Buffer {
  const { application: _ignored, ...content } = input;
  return crypto.createHash('sha256').update(JSON.stringify(content)).digest();
}

/** Svix: `application` in the body creates the app when the path's id or uid does not exist. */
async function resolveOrCreateApp(db: Queryable, actor: Actor, appIdOrUid: string, input: MessageIn) {
  if (input.application) {
    try {
      return await requireApp(db, actor, appIdOrUid);
    } catch (error) {
      if (!(error instanceof HeraldError) || error.kind !== 'not_found') throw error;
      if (actor.appIds !== null) throw error;
      const created = await insertAppIfAbsent(db, {
        ...appFieldsFrom(input.application),
        uid: input.application.uid ?? appIdOrUid,
      });
      if (created) {
        await auditAppCreated(db, actor, created);
        return created;
      }
      // The uid is taken: by a concurrent publisher creating this same app (use theirs), or by
      // another app altogether (a conflict — never publish into an app the path did not name).
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
): Promise<MessageRow> {
  const eventType = await findEventType(db, eventTypeName);
  if (!eventType) throw notFound('event type');
  const result = await publishMessage(
    db,
    {
      appId: app.id,
      eventType: eventType.name,
      eventId: null,
      payload: JSON.stringify(exampleOf(eventType.schemas)),
      channels: null,
      tags: null,
      idempotencyKey: null,
      requestHash: null,
      retentionDays: app.retentionDays ?? DEFAULT_RETENTION_DAYS,
      onlyEndpointId: endpointId,
    },
    actor.id,
  );
  return result.message;
}

/** The first example of the highest schema version ("1", "2", …), when there is one. */
function exampleOf(schemas: Record<string, unknown> | null): Record<string, unknown> {
  const versions = Object.keys(schemas ?? {}).sort((a, b) => Number(b) - Number(a));
  const newest = versions[0] === undefined ? undefined : (schemas![versions[0]] as Record<string, unknown>);
  const example = (newest?.['examples'] as unknown[] | undefined)?.[0] ?? newest?.['example'];
  return example !== null && typeof example === 'object' && !Array.isArray(example)
    ? (example as Record<string, unknown>)
    : {};
}
