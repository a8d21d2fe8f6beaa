// Rows → Svix response shapes. herald's own additions sit beside Svix's fields; clients that do
// not know them ignore them.

import type { AppRow } from '../db/apps.ts';
import type { AttemptedMessageRow, AttemptRow } from '../db/attempts.ts';
import type { DestinationRow } from '../db/deliveries.ts';
import type { EndpointRow } from '../db/endpoints.ts';
import type { EventTypeRow } from '../db/event-types.ts';
import type { MessageRow } from '../db/messages.ts';
import type { Page } from '../db/pagination.ts';
import { parseKeepingNumbers } from '../domain/json-numbers.ts';
import { attemptStatus, deliveryStatus } from '../domain/message-status.ts';

export const presentPage = <T, O>(page: Page<T>, present: (row: T) => O) => ({
  ...page,
  data: page.data.map(present),
});

export const presentApp = (a: AppRow) => ({
  id: a.id,
  uid: a.uid,
  name: a.name,
  throttleRate: a.throttleRate,
  rateLimit: a.throttleRate,
  metadata: a.metadata,
  retentionDays: a.retentionDays,
  createdAt: a.createdAt,
  updatedAt: a.updatedAt,
});

/** `withContent` false: without its schemas (null), as Svix's event type list by default. */
export const presentEventType = (e: EventTypeRow, withContent = true) =>
  withContent ? { ...e } : { ...e, schemas: null };

export const presentEndpoint = (e: EndpointRow) => ({
  id: e.id,
  uid: e.uid,
  url: e.url,
  description: e.description,
  version: e.version,
  throttleRate: e.throttleRate,
  rateLimit: e.throttleRate,
  filterTypes: e.filterTypes,
  eventTypes: e.filterTypes,
  channels: e.channels,
  metadata: e.metadata,
  disabled: e.disabled,
  disabledReason: e.disabledReason,
  idempotent: e.idempotent,
  clientErrorPolicy: e.clientErrorPolicy,
  credentialsRejectedAt: e.credentialsRejectedAt,
  restingUntil: e.restingUntil,
  createdAt: e.createdAt,
  updatedAt: e.updatedAt,
});

/** An expunged or expired payload reads as `{"expired": true}`, as in Svix. */
const payloadOf = (payload: string | null) =>
  payload === null ? { expired: true } : parseKeepingNumbers(payload);

export const presentMessage = (m: MessageRow, withContent = true) => ({
  id: m.id,
  eventType: m.eventType,
  eventId: m.eventId,
  payload: withContent ? payloadOf(m.payload) : {},
  channels: m.channels,
  tags: m.tags,
  timestamp: m.createdAt,
});

/**
 * presentMessage as JSON text, for a message whose payload is JSON text herald serialised itself
 * (a new publish's): the payload is spliced in as it is, not parsed and serialised again — it is
 * most of the response. (Inside the fields before it, quotes are escaped: the first unescaped
 * `"payload":{}` is the field.)
 */
export function presentMessageJson(m: MessageRow, withContent = true): string {
  if (!withContent || m.payload === null) return JSON.stringify(presentMessage(m, withContent));
  return JSON.stringify(presentMessage(m, false)).replace('"payload":{}', () => `"payload":${m.payload}`);
}

/**
 * `withContent: false` leaves out the attempt's content: the response body it recorded reads `{}`,
 * as Svix answers it (a client that parses it as JSON must not fail on herald alone).
 */
export const presentAttempt = (a: AttemptRow, withContent = true) => ({
  id: a.id,
  msgId: a.messageId,
  endpointId: a.endpointId,
  url: a.url,
  response: withContent ? (a.responseBody ?? '') : '{}',
  responseStatusCode: a.statusCode ?? 0,
  responseDurationMs: a.durationMs ?? 0,
  ...attemptStatus(a.outcome),
  timestamp: a.startedAt,
  triggerType: a.trigger === 'manual' ? 1 : 0,
  // herald: what is really known about this attempt.
  outcome: a.outcome,
  responseClass: a.responseClass,
  cycle: a.cycle,
  finishedAt: a.finishedAt,
});

/**
 * When the delivery is next tried: none while its endpoint is disabled. Its deliveries wait for
 * it to be enabled (their stored time long past, it would read as overdue), and go then.
 */
const nextAttempt = (endpoint: { disabled: boolean }, at: Date | null) => (endpoint.disabled ? null : at);

export const presentDestination = (e: EndpointRow, d: DestinationRow) => ({
  ...presentEndpoint(e),
  ...deliveryStatus(d.state),
  nextAttempt: nextAttempt(e, d.nextAttemptAt),
});

export const presentAttemptedMessage = (
  m: AttemptedMessageRow,
  endpoint: { disabled: boolean },
  withContent = true,
) => ({
  id: m.messageId,
  eventType: m.eventType,
  eventId: m.eventId,
  payload: withContent ? payloadOf(m.payload) : {},
  channels: m.channels,
  tags: m.tags,
  timestamp: m.createdAt,
  ...deliveryStatus(m.state),
  nextAttempt: nextAttempt(endpoint, m.nextAttemptAt),
});
