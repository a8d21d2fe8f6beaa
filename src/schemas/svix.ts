// Request schemas of the Svix-compatible API, validated with zod. The library face validates
// with the same schemas, so a message is judged the same way however it arrives.

import { z } from 'zod';

const IDENT = /^[a-zA-Z0-9\-_.]+$/;
const ident = (max: number) => z.string().min(1).max(max).regex(IDENT, 'only letters, digits, - _ and .');
const metadata = z.record(z.string(), z.string());
const SECRET = /^(whsec_)?[a-zA-Z0-9+/=]{32,100}$/;

export const ApplicationIn = z.object({
  name: z.string().min(1).max(256),
  uid: ident(256).nullish(),
  throttleRate: z.number().int().min(1).max(65535).nullish(),
  metadata: metadata.optional(),
});
export type ApplicationIn = z.infer<typeof ApplicationIn>;

export const ApplicationPatch = z.object({
  name: z.string().min(1).max(256).optional(),
  uid: ident(256).nullish(),
  throttleRate: z.number().int().min(0).max(65535).nullish(),
  metadata: metadata.optional(),
});

export const EventTypeIn = z.object({
  name: ident(256),
  description: z.string().max(4096),
  archived: z.boolean().optional(),
  deprecated: z.boolean().optional(),
  featureFlag: ident(256).nullish(),
  schemas: z.record(z.string(), z.record(z.string(), z.unknown())).nullish(),
});
export const EventTypeUpdate = EventTypeIn.omit({ name: true });
export const EventTypePatch = EventTypeUpdate.partial();

const channels = (max: number) => z.array(ident(128)).min(1).max(max);
const eventTypes = z.array(ident(256)).min(1);

export const EndpointIn = z.object({
  url: z.string().min(1).max(65536),
  description: z.string().max(4096).optional(),
  uid: ident(256).nullish(),
  version: z.number().int().min(1).optional(),
  throttleRate: z.number().int().min(1).max(65535).nullish(),
  // The Svix OSS contract calls the filter `eventTypes`; the official SDKs send `filterTypes`.
  filterTypes: eventTypes.nullish(),
  eventTypes: eventTypes.nullish(),
  channels: channels(10).nullish(),
  metadata: metadata.optional(),
  disabled: z.boolean().optional(),
  secret: z.string().regex(SECRET, 'expected whsec_ followed by 32 to 100 base64 characters').nullish(),
  rateLimit: z.number().int().min(1).max(65535).nullish(),
});
export type EndpointIn = z.infer<typeof EndpointIn>;
export const EndpointUpdate = EndpointIn.omit({ secret: true });
export const EndpointPatch = z.object({
  url: z.string().min(1).max(65536).optional(),
  description: z.string().max(4096).optional(),
  uid: ident(256).nullish(),
  version: z.number().int().min(1).optional(),
  throttleRate: z.number().int().min(0).max(65535).nullish(),
  filterTypes: z.array(ident(256)).nullish(),
  eventTypes: z.array(ident(256)).nullish(),
  channels: z.array(ident(128)).max(10).nullish(),
  metadata: metadata.optional(),
  disabled: z.boolean().optional(),
  rateLimit: z.number().int().min(1).max(65535).nullish(),
});

export const EndpointSecretRotateIn = z.object({
  key: z.string().regex(SECRET, 'expected whsec_ followed by 32 to 100 base64 characters').nullish(),
  gracePeriodSeconds: z.number().int().min(0).max(604800).nullish(),
});

export const EndpointHeadersIn = z.object({ headers: z.record(z.string(), z.string()) });
export const EndpointHeadersPatchIn = z.object({ headers: z.record(z.string(), z.string().nullable()) });

export const RecoverIn = z.object({
  since: z.iso.datetime({ offset: true }),
  until: z.iso.datetime({ offset: true }).nullish(),
});

export const MessageIn = z.object({
  eventType: ident(256),
  eventId: ident(256).nullish(),
  payload: z.record(z.string(), z.unknown()),
  channels: channels(5).nullish(),
  payloadRetentionPeriod: z.number().int().min(1).max(90).optional(),
  tags: z.array(ident(128)).max(5).nullish(),
  application: ApplicationIn.nullish(),
});
export type MessageIn = z.infer<typeof MessageIn>;

export const ApiKeyIn = z.object({
  name: z.string().min(1).max(256),
  scopes: z.array(z.enum(['admin', 'publish', 'read'])).min(1),
  apps: z.array(z.string().min(1)).min(1).nullish(),
});
