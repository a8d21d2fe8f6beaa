// Request schemas of the Svix-compatible API, validated with zod. The library face validates
// with the same schemas, so a message is judged the same way however it arrives.

import { z } from 'zod';
import { isValidEndpointSecret, withSecretPrefix } from '../signing/standard-webhooks.ts';
import { storable, text, UNSTORABLE_REFUSED } from './text.ts';
import { isoTime, UNTIL_AFTER_SINCE } from './window.ts';

const IDENT = /^[a-zA-Z0-9\-_.]+$/;
/** A name of Svix's (an event type, a channel, a tag, a uid): letters, digits, - _ and ., up to `max`. */
export const ident = (max: number) =>
  z.string().min(1).max(max).regex(IDENT, 'only letters, digits, - _ and .');
/** A uid: what a path segment must look like when PUT creates an object under it. */
export const Uid = ident(256);
/** How the ids of each kind of object that also has a uid begin (herald_id, migration 0013). */
export const ID_PREFIX = { app: 'app_', endpoint: 'ep_', message: 'msg_', source: 'src_' } as const;
/**
 * A uid beside ids that begin with `idPrefix`: refused when it begins so too, as Svix refuses it.
 * A lookup by "id or uid" takes the id first, so such a uid could name another object: the one it
 * names is then out of reach by it, and a delete by it removes the other one.
 */
export const uidBeside = (idPrefix: string) =>
  ident(256).refine((v) => !v.startsWith(idPrefix), `must not begin with ${idPrefix}, as ids do`);
const metadata = z.record(text(), text());
// The pattern alone lets through text that is not canonical base64 (e.g. 33 'A's), which no
// worker could decode into a signing key: require what signing needs (24 to 75 bytes).
const secret = () =>
  z
    .string()
    .refine(isValidEndpointSecret, 'expected whsec_ followed by the base64 of 24 to 75 random bytes')
    .transform(withSecretPrefix);
/**
 * A field the official SDKs send that herald does not do: refused by name when given (null is
 * absent), rather than dropped with the request taken as if it had been done.
 */
const notSupported = (why: string) =>
  z
    .unknown()
    .refine((v) => v === undefined || v === null, why)
    .optional()
    .describe(`Not supported: ${why}`);

/**
 * `throttleRate` and `rateLimit` are one setting under two names (the SDKs' newer one): both sent
 * with different rates would leave one silently unused, where the caller may have meant either.
 * Refused, naming it, as two different filters are.
 */
const oneRate = (o: { throttleRate?: number | null | undefined; rateLimit?: number | null | undefined }) =>
  o.throttleRate === undefined || o.rateLimit === undefined || o.throttleRate === o.rateLimit;
const ONE_RATE = {
  path: ['rateLimit'],
  message: "differs from throttleRate, the same setting under the SDKs' newer name: send one of them",
};

export const ApplicationIn = z
  .object({
    // herald: days message payloads are kept when a publisher does not say (default 90).
    retentionDays: z.number().int().min(1).max(90).nullish(),
    name: text().min(1).max(256),
    uid: uidBeside(ID_PREFIX.app).nullish(),
    throttleRate: z.number().int().min(1).max(65535).nullish(),
    // The official SDKs' newer name for throttleRate.
    rateLimit: z.number().int().min(1).max(65535).nullish(),
    metadata: metadata.optional(),
  })
  .refine(oneRate, ONE_RATE);
export type ApplicationIn = z.infer<typeof ApplicationIn>;

export const ApplicationPatch = z
  .object({
    retentionDays: z.number().int().min(1).max(90).nullish(),
    name: text().min(1).max(256).optional(),
    uid: uidBeside(ID_PREFIX.app).nullish(),
    throttleRate: z.number().int().min(0).max(65535).nullish(),
    rateLimit: z.number().int().min(0).max(65535).nullish(),
    metadata: metadata.optional(),
  })
  .refine(oneRate, ONE_RATE);

export const EventTypeIn = z.object({
  name: ident(256),
  description: text().max(4096),
  archived: z.boolean().optional(),
  deprecated: z.boolean().optional(),
  featureFlag: ident(256).nullish(),
  // Newer SDKs' fields, refused by name rather than dropped.
  featureFlags: notSupported('herald keeps one featureFlag per event type'),
  groupName: notSupported('herald does not group event types'),
  schemas: z
    .record(z.string(), z.record(z.string(), z.unknown()))
    .refine(storable, UNSTORABLE_REFUSED)
    .nullish(),
});
export const EventTypeUpdate = EventTypeIn.omit({ name: true });
export const EventTypePatch = EventTypeUpdate.partial();

// Sets, as the contract's `uniqueItems` says: a name given twice is kept once.
const unique = <T>(list: T[]): T[] => [...new Set(list)];
const channels = (max: number) => z.array(ident(128)).min(1).max(max).transform(unique);
const eventTypes = z.array(ident(256)).min(1).transform(unique);

/**
 * `filterTypes` and `eventTypes` are one field under two names: both sent with different types
 * would leave one silently unused, where the caller may have meant either. Refused, naming it.
 */
const oneFilter = (endpoint: {
  filterTypes?: string[] | null | undefined;
  eventTypes?: string[] | null | undefined;
}) =>
  endpoint.filterTypes === undefined ||
  endpoint.eventTypes === undefined ||
  JSON.stringify(endpoint.filterTypes?.toSorted() ?? null) ===
    JSON.stringify(endpoint.eventTypes?.toSorted() ?? null);
const ONE_FILTER = {
  path: ['eventTypes'],
  message: "differs from filterTypes, the same filter under the SDKs' name: send one of them",
};

const EndpointFields = z.object({
  url: z.string().min(1).max(65536),
  description: text().max(4096).optional(),
  uid: uidBeside(ID_PREFIX.endpoint).nullish(),
  // The official SDKs type version as `number | null`; the column is a PostgreSQL int.
  version: z.number().int().min(1).max(2147483647).nullish(),
  throttleRate: z.number().int().min(1).max(65535).nullish(),
  // The Svix OSS contract calls the filter `eventTypes`; the official SDKs send `filterTypes`.
  filterTypes: eventTypes.nullish(),
  eventTypes: eventTypes.nullish(),
  channels: channels(10).nullish(),
  metadata: metadata.optional(),
  disabled: z.boolean().optional(),
  // herald: the receiver's contract (see src/domain/outcome-policy.ts).
  idempotent: z.boolean().optional(),
  clientErrorPolicy: z.enum(['retry', 'dead-letter']).optional(),
  secret: secret().nullish(),
  rateLimit: z.number().int().min(1).max(65535).nullish(),
  // Custom headers sent with every delivery (checked like PUT .../headers).
  headers: z.record(z.string(), z.string()).nullish(),
});
export const EndpointIn = EndpointFields.refine(oneFilter, ONE_FILTER).refine(oneRate, ONE_RATE);
export type EndpointIn = z.infer<typeof EndpointIn>;
export const EndpointUpdate = EndpointFields.omit({ secret: true, headers: true })
  .refine(oneFilter, ONE_FILTER)
  .refine(oneRate, ONE_RATE);
// The fields of a create, each optional to leave it as it is. An empty filter is refused as on
// create (it would match no message and leave the endpoint silently deaf): null removes a filter.
export const EndpointPatch = EndpointFields.omit({ headers: true })
  .extend({
    url: EndpointFields.shape.url.optional(),
    // As Svix's contract allows, a PATCH may set 0: no throttle, no rate limit.
    throttleRate: z.number().int().min(0).max(65535).nullish(),
    rateLimit: z.number().int().min(0).max(65535).nullish(),
    secret: notSupported(
      'a secret is changed by POST …/secret/rotate, which keeps the old one valid for a while',
    ),
  })
  .refine(oneFilter, ONE_FILTER)
  .refine(oneRate, ONE_RATE);

export const EndpointSecretRotateIn = z.object({
  key: secret().nullish(),
  gracePeriodSeconds: z.number().int().min(0).max(604800).nullish(),
});

export const EndpointHeadersIn = z.object({ headers: z.record(z.string(), z.string()) });
// `deleteHeaders` is how the official SDKs remove headers; a null value does the same (herald).
export const EndpointHeadersPatchIn = z.object({
  headers: z.record(z.string(), z.string().nullable()),
  deleteHeaders: z.array(z.string()).optional(),
});

/** A window of message creation times (schemas/window.ts), `since` required. */
const window = () => z.object({ since: isoTime(), until: isoTime().nullish() }).refine(...UNTIL_AFTER_SINCE);

export const RecoverIn = window();

/** Svix's ReplayIn, of replay-missing (herald's own ReplayIn is /api/v1/replay's). */
export const ReplayMissingIn = window();

export const MessageIn = z.object({
  eventType: ident(256),
  eventId: uidBeside(ID_PREFIX.message).nullish(),
  payload: z.record(z.string(), z.unknown()),
  channels: channels(5).nullish(),
  payloadRetentionPeriod: z.number().int().min(5).max(90).nullish(),
  tags: z.array(ident(128)).max(5).nullish(),
  application: ApplicationIn.nullish(),
  deliverAt: notSupported('herald does not schedule messages: publish when the message is due'),
  payloadRetentionHours: notSupported('herald keeps payloads for whole days: use payloadRetentionPeriod'),
  // The SDKs' messageInRaw() sends `payload: {}` with the body to send in here: dropped, `{}`
  // would be delivered in its place.
  transformationsParams: notSupported(
    'herald delivers the JSON payload as published: a raw payload (messageInRaw) is not sent',
  ),
});
export type MessageIn = z.infer<typeof MessageIn>;

export const EventExampleIn = z.object({
  eventType: ident(256),
  // Which of the newest schema's `examples` to send (Svix's default, 0: the first).
  exampleIndex: z.number().int().min(0).max(1000).optional(),
});

export const ApiKeyIn = z.object({
  name: text().min(1).max(256),
  scopes: z
    .array(z.enum(['admin', 'publish', 'read']))
    .min(1)
    .transform(unique),
  apps: z.array(z.string().min(1)).min(1).transform(unique).nullish(),
});
