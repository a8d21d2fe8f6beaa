// The response shapes herald produces (src/api/present.ts and the routes that answer directly),
// as zod schemas: the one place the OpenAPI document takes them from. test/openapi.test.ts
// drives every operation and checks each real answer against these, so they cannot drift
// silently. Component names follow Svix's where Svix has the shape.

import { z } from 'zod';
import { REPLAY_MISSING_CAP } from '../../db/deliveries.ts';

const timestamp = z.iso.datetime({ offset: true });
const nullableTimestamp = timestamp.nullable();
const strings = z.array(z.string());
const metadata = z.record(z.string(), z.string());

/** Svix MessageStatus: 0 success, 1 pending, 2 fail, 3 sending. */
export const MessageStatus = z
  .literal([0, 1, 2, 3])
  .describe('Svix MessageStatus: 0 = success, 1 = pending, 2 = fail, 3 = sending');
const statusText = z.enum(['success', 'pending', 'fail', 'sending']);

export const ApplicationOut = z.object({
  id: z.string().describe('`app_…`'),
  uid: z.string().nullable(),
  name: z.string(),
  throttleRate: z.number().int().nullable(),
  rateLimit: z.number().int().nullable().describe('The official SDKs’ newer name for `throttleRate`'),
  metadata,
  retentionDays: z
    .number()
    .int()
    .nullable()
    .describe('herald: days message payloads are kept when a publisher does not say'),
  createdAt: timestamp,
  updatedAt: timestamp,
});

export const EventTypeOut = z.object({
  name: z.string(),
  description: z.string(),
  schemas: z.record(z.string(), z.unknown()).nullable(),
  archived: z.boolean(),
  deprecated: z.boolean(),
  featureFlag: z.string().nullable(),
  createdAt: timestamp,
  updatedAt: timestamp,
});

const endpointFields = {
  id: z.string().describe('`ep_…`'),
  uid: z.string().nullable(),
  url: z.string(),
  description: z.string(),
  version: z.number().int(),
  throttleRate: z.number().int().nullable(),
  rateLimit: z.number().int().nullable().describe('The official SDKs’ newer name for `throttleRate`'),
  filterTypes: strings.nullable(),
  eventTypes: strings.nullable().describe('The Svix OSS name for `filterTypes`'),
  channels: strings.nullable(),
  metadata,
  disabled: z.boolean(),
  disabledReason: z
    .enum(['operator', 'failures', 'gone'])
    .nullable()
    .describe('herald: who disabled the endpoint — an operator, consecutive failures, or a 410 answer'),
  idempotent: z.boolean().describe('herald: the receiver deduplicates, so unknown outcomes may be retried'),
  clientErrorPolicy: z
    .enum(['retry', 'dead-letter'])
    .describe('herald: what a validation 4xx from the receiver does to the delivery'),
  credentialsRejectedAt: nullableTimestamp.describe('herald: when the receiver last answered 401/403'),
  restingUntil: nullableTimestamp.describe(
    'herald: until when the endpoint rests after failures in a row or a Retry-After — no request starts before; a resend, a recovery or an enable lifts it (null: not resting)',
  ),
  createdAt: timestamp,
  updatedAt: timestamp,
};
export const EndpointOut = z.object(endpointFields);

export const MessageOut = z.object({
  id: z.string().describe('`msg_…`, also the `webhook-id` of every request for it'),
  eventType: z.string(),
  eventId: z.string().nullable(),
  payload: z
    .record(z.string(), z.unknown())
    .describe(
      'An expunged or expired payload reads as `{"expired": true}`; with `with_content=false`, every payload reads as `{}`',
    ),
  channels: strings.nullable(),
  tags: strings.nullable(),
  timestamp,
});

export const MessageAttemptOut = z.object({
  id: z.string().describe('`atmpt_…`'),
  msgId: z.string(),
  endpointId: z.string(),
  url: z.string(),
  response: z
    .string()
    .describe(
      'The response body, truncated; empty when none was received, or on a list with `with_content=false`',
    ),
  responseStatusCode: z.number().int().describe('0 when no status was received'),
  responseDurationMs: z.number().int(),
  status: MessageStatus.describe('An attempt still running is 3 (sending); an `unknown` outcome is 2 (fail)'),
  statusText,
  timestamp,
  triggerType: z.literal([0, 1]).describe('0 = scheduled, 1 = manual'),
  outcome: z
    .enum(['success', 'failure', 'unknown'])
    .nullable()
    .describe('herald: what is really known; null while the attempt runs'),
  responseClass: z.string().nullable().describe('herald: how the outcome was classified'),
  cycle: z.number().int().describe('herald: the replay cycle of the delivery this attempt belongs to'),
  finishedAt: nullableTimestamp,
  msg: MessageOut.optional().describe('With `with_msg=true`: the attempt’s message'),
});

export const MessageEndpointOut = z.object({
  ...endpointFields,
  status: MessageStatus,
  statusText,
  nextAttempt: nullableTimestamp,
});

export const EndpointMessageOut = z.object({
  id: z.string(),
  eventType: z.string(),
  eventId: z.string().nullable(),
  payload: z.record(z.string(), z.unknown()),
  channels: strings.nullable(),
  tags: strings.nullable(),
  timestamp,
  status: MessageStatus.describe('Of its delivery to this endpoint, attempted or not yet'),
  statusText,
  nextAttempt: nullableTimestamp,
});

export const EndpointHeadersOut = z.object({
  headers: metadata,
  sensitive: strings.describe('Headers whose values are credentials: named, value withheld'),
});

export const EndpointSecretOut = z.object({ key: z.string().describe('`whsec_…`') });

export const EndpointStats = z.object({
  pending: z.number().int(),
  sending: z.number().int(),
  success: z.number().int(),
  fail: z.number().int(),
  canceled: z.number().int().describe('Always 0: herald never cancels a delivery'),
});

export const RecoverOut = z.object({
  id: z.string(),
  status: z.enum(['finished']).describe('Recovery is done when herald answers'),
  task: z.enum(['endpoint.recover']),
  updatedAt: timestamp,
  deliveries: z.number().int().describe('herald: deliveries given a new cycle (recovery is done on answer)'),
});

export const ReplayMissingOut = z.object({
  id: z.string(),
  status: z.enum(['finished']).describe('The replay is done when herald answers'),
  task: z.enum(['endpoint.replay']),
  updatedAt: timestamp,
  deliveries: z.number().int().describe('herald: deliveries made for the messages the endpoint missed'),
  more: z
    .boolean()
    .describe(
      `herald: the call made its most (${REPLAY_MISSING_CAP}), the oldest first, and more are missing: call again`,
    ),
});

export const EmptyResponse = z.object({});

export const ApiKeyOut = z.object({
  id: z.string().describe('`key_…`'),
  name: z.string(),
  prefix: z.string().describe('The public start of the key, to recognise it'),
  scopes: z.array(z.enum(['admin', 'publish', 'read'])),
  appIds: strings.nullable().describe('The apps the key is restricted to; null for all'),
  createdAt: timestamp,
  revokedAt: nullableTimestamp,
});

export const ApiKeyCreatedOut = ApiKeyOut.extend({
  key: z.string().describe('The bearer token: shown in this response only, never again'),
});

export const SourceOut = z.object({
  id: z.string(),
  uid: z.string().nullable(),
  scheme: z.string(),
  settings: z.record(z.string(), z.unknown()),
  app: z.string().describe('The target application id'),
  eventType: z.string(),
  businessKey: z.string(),
  retentionDays: z.number().int().nullable(),
  ingestPath: z.string().describe('Where the provider sends: `/ingest/{uid or id}`'),
  createdAt: timestamp,
  updatedAt: timestamp,
});

export const ChallengeOut = z.object({
  challenge: z.string().describe('The challenge of the handshake, echoed'),
});

export const ReadyOut = z.object({
  database: z.literal('ok'),
  migrations: z.array(z.number().int()).describe('The migration versions applied'),
});

export const ReplayOut = z.object({
  id: z.string().describe('`rpl_…`: the audit entry of this replay'),
  dryRun: z.boolean(),
  count: z.number().int().describe('Deliveries selected (dry run) or restarted'),
  payloadGone: z
    .number()
    .int()
    .describe(
      'Deliveries the filters match but replay leaves: their payload is gone (its retention passed, or its content was deleted)',
    ),
  unreviewed: z
    .number()
    .int()
    .describe(
      'Failed deliveries the filters match whose unknown outcomes await review (`herald reconcile`), to endpoints that are not idempotent: left, or with `includeUnreviewed` among those replayed',
    ),
  cap: z.number().int(),
  exceedsCap: z.boolean().describe('Dry run: whether the real run would refuse this selection'),
  deliveries: z
    .array(
      z.object({ deliveryId: z.string(), appId: z.string(), messageId: z.string(), endpointId: z.string() }),
    )
    .describe('At most 1000 of them, by message then endpoint'),
  truncated: z.boolean(),
});

/** Svix's list envelope: `iterator` continues forwards, `prevIterator` backwards. */
export const listOf = <T extends z.ZodType>(item: T) =>
  z.object({
    data: z.array(item),
    done: z.boolean(),
    iterator: z.string().nullable(),
    prevIterator: z.string().nullable(),
  });

export const ListResponse_ApplicationOut_ = listOf(ApplicationOut);
export const ListResponse_EventTypeOut_ = listOf(EventTypeOut);
export const ListResponse_EndpointOut_ = listOf(EndpointOut);
export const ListResponse_MessageOut_ = listOf(MessageOut);
export const ListResponse_MessageAttemptOut_ = listOf(MessageAttemptOut);
export const ListResponse_MessageEndpointOut_ = listOf(MessageEndpointOut);
export const ListResponse_EndpointMessageOut_ = listOf(EndpointMessageOut);
export const ListResponse_ApiKeyOut_ = listOf(ApiKeyOut);
export const ListResponse_SourceOut_ = listOf(SourceOut);

export const HttpErrorOut = z.object({
  code: z.string().describe('A stable error code from herald’s catalogue (src/errors.ts)'),
  detail: z.string(),
});

export const ValidationErrorItem = z.object({
  loc: z.array(z.string()).describe('Where: `body`, `query`, `path` or `header`, then the field'),
  msg: z.string(),
  type: z.string(),
});

export const HTTPValidationError = z.object({
  code: z.literal('validation'),
  detail: z
    .array(ValidationErrorItem)
    .describe(
      'Each offending field (`["body"]` alone when the database refused a value the schemas let through)',
    ),
});
