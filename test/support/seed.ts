// Rows for tests that work below the API, straight on the db modules: an app, endpoints with
// the defaults the API would give them (or made by the engine, signing secret and all), messages published through the real fan-out, an inbound
// source and receipts as the ingestor hands them to recordReceipts.

import crypto from 'node:crypto';
import { type AppRow, insertApp } from '../../src/db/apps.ts';
import type { ClaimedDelivery } from '../../src/db/deliveries.ts';
import { type EndpointRow, insertEndpoint } from '../../src/db/endpoints.ts';
import type { IntakeReceipt } from '../../src/db/intake.ts';
import type { NewMessage } from '../../src/db/messages.ts';
import type { Db, Queryable } from '../../src/db/port.ts';
import { insertSource, type SourceRow } from '../../src/db/sources.ts';
import { LIBRARY_ACTOR } from '../../src/engine/core.ts';
import { createEndpoint } from '../../src/engine/endpoints.ts';
import type { Herald } from '../../src/herald.ts';
import { EndpointIn } from '../../src/schemas/svix.ts';
import { parseOrThrow } from '../../src/schemas/validate.ts';

export const seedApp = (db: Queryable, uid: string): Promise<AppRow> =>
  insertApp(db, { uid, name: uid, throttleRate: null, metadata: {}, retentionDays: null });

export const seedEndpoint = (
  db: Queryable,
  appId: string,
  url: string,
  idempotent = true,
): Promise<EndpointRow> =>
  insertEndpoint(db, appId, {
    uid: null,
    url,
    description: '',
    version: 1,
    throttleRate: null,
    filterTypes: null,
    channels: null,
    metadata: {},
    disabled: false,
    idempotent,
    clientErrorPolicy: 'retry',
  });

/** An endpoint as the library makes one (`body` as the API takes it), with its signing secret. */
export const addEndpoint = (
  herald: Herald,
  db: Db,
  app: AppRow,
  body: Record<string, unknown>,
): Promise<EndpointRow> =>
  db.transaction((tx) => createEndpoint(herald.core, tx, LIBRARY_ACTOR, app, parseOrThrow(EndpointIn, body)));

/** A message of event type `e` to the app, kept a day; `over` changes any field. */
export const newMessage = (appId: string, over: Partial<NewMessage> = {}): NewMessage => ({
  appId,
  eventType: 'e',
  eventId: null,
  payload: '{}',
  channels: null,
  tags: null,
  idempotencyKey: null,
  requestHash: null,
  retentionDays: 1,
  ...over,
});

/**
 * Publishes to every endpoint of the app subscribed now; returns the message id. It calls the
 * publish function for the one column every version of it answers with, so that a database an
 * upgrade test holds at an older migration is seeded as that version would seed it.
 */
export async function seedMessage(db: Queryable, appId: string, payload = '{}'): Promise<string> {
  const item = { ord: 0, app_id: appId, event_type: 'e', payload, retention_days: 1, actor: 'test' };
  const { rows } = await db.query<{ id: string }>('select id from herald_publish_messages($1::jsonb, true)', [
    JSON.stringify([item]),
  ]);
  return rows[0]!.id;
}

/** What tests below the worker need of a claimed delivery to write its outcome. */
export type ClaimedForTest = Pick<ClaimedDelivery, 'deliveryId' | 'leaseToken' | 'endpointId' | 'messageId'>;

/**
 * Claims up to `batch` deliveries (30 s leases) for the columns every version of the claim
 * answers with, as seedMessage publishes: for databases an upgrade test holds at an older
 * migration as well as for the current one.
 */
export async function claimForTest(db: Queryable, batch = 10): Promise<ClaimedForTest[]> {
  const { rows } = await db.query<ClaimedForTest>(
    `select delivery_id as "deliveryId", lease_token as "leaseToken", endpoint_id as "endpointId",
            message_id as "messageId"
       from herald_claim($1, interval '30 seconds', '', null)`,
    [batch],
  );
  return rows;
}

/** A standard-webhooks source relaying into the app as event type `e`, keyed by delivery id. */
export const seedSource = (db: Queryable, appId: string, uid: string): Promise<SourceRow> =>
  insertSource(db, {
    uid,
    scheme: 'standard-webhooks',
    settings: {},
    appId,
    eventType: 'e',
    businessKey: '{{delivery_id}}',
    retentionDays: null,
  });

/** A receipt of `deliveryId` on the source, carrying `businessKey` (the delivery id by default). */
export const seedReceipt = (
  sourceId: string,
  deliveryId: string,
  businessKey = deliveryId,
): IntakeReceipt => ({
  sourceId,
  deliveryId,
  businessKey,
  bodySha256: crypto.createHash('sha256').update(deliveryId).digest(),
  payload: JSON.stringify({ id: deliveryId }),
});
