// The route table: every operation herald serves, with the zod schemas its handler validates
// against (src/schemas, src/api/query.ts) and the shapes it answers with (./responses.ts).
// document.ts turns it into the OpenAPI document; test/openapi.test.ts fails when fastify serves
// a route this table does not list, or the other way round. operationIds are Svix's wherever
// the Svix OSS contract has the operation.

import { z } from 'zod';
import { MAX_IDEMPOTENCY_KEY_LENGTH } from '../../errors.ts';
import { ReplayIn } from '../../ops/replay.ts';
import { SourceIn, SourcePatch } from '../../schemas/sources.ts';
import {
  ApiKeyIn,
  ApplicationIn,
  ApplicationPatch,
  EndpointHeadersIn,
  EndpointHeadersPatchIn,
  EndpointIn,
  EndpointPatch,
  EndpointSecretRotateIn,
  EndpointUpdate,
  EventExampleIn,
  EventTypeIn,
  EventTypePatch,
  EventTypeUpdate,
  MessageIn,
  RecoverIn,
  ReplayMissingIn,
} from '../../schemas/svix.ts';
import { ListQuery, StatsQuery } from '../query.ts';
import * as out from './responses.ts';

export type Method = 'GET' | 'HEAD' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

export interface Answer {
  description: string;
  /** A zod schema named in SCHEMAS below; absent for an empty answer. */
  schema?: z.ZodType;
  /** application/json unless said; without a schema, a body of this type that is not described. */
  contentType?: string;
}

export interface Operation {
  method: Method;
  /** OpenAPI form: `/api/v1/app/{app_id}`. */
  path: string;
  operationId: string;
  tag: string;
  summary: string;
  description?: string;
  /** bearer: an API key (the default); public: nothing; signature: the source's own scheme. */
  auth?: 'bearer' | 'public' | 'signature';
  /** A JSON body validated by this schema (named in SCHEMAS below). */
  body?: z.ZodType;
  /** The body may be left out (the handler reads `{}` then). */
  bodyOptional?: boolean;
  /** Raw bytes of any content type (ingest). */
  rawBody?: boolean;
  query?: z.ZodObject;
  /** Request headers the handler reads. */
  headers?: Record<string, { description: string; schema: z.ZodType }>;
  /** Success answers only; errors are added by document.ts from what the operation takes. */
  responses: Record<number, Answer>;
  /** Error statuses beyond those every operation of its kind can answer. */
  errors?: number[];
}

/** Every named schema of the document: request bodies (input form) and answers (output form). */
export const REQUEST_SCHEMAS = {
  ApplicationIn,
  ApplicationPatch,
  EventTypeIn,
  EventTypeUpdate,
  EventTypePatch,
  EndpointIn,
  EndpointUpdate,
  EndpointPatch,
  EndpointSecretRotateIn,
  EndpointHeadersIn,
  EndpointHeadersPatchIn,
  RecoverIn,
  ReplayMissingIn,
  EventExampleIn,
  MessageIn,
  ApiKeyIn,
  SourceIn,
  SourcePatch,
  ReplayIn,
} satisfies Record<string, z.ZodType>;

export const RESPONSE_SCHEMAS = {
  ApplicationOut: out.ApplicationOut,
  ListResponse_ApplicationOut_: out.ListResponse_ApplicationOut_,
  EventTypeOut: out.EventTypeOut,
  ListResponse_EventTypeOut_: out.ListResponse_EventTypeOut_,
  EndpointOut: out.EndpointOut,
  ListResponse_EndpointOut_: out.ListResponse_EndpointOut_,
  EndpointHeadersOut: out.EndpointHeadersOut,
  EndpointSecretOut: out.EndpointSecretOut,
  EndpointStats: out.EndpointStats,
  RecoverOut: out.RecoverOut,
  ReplayMissingOut: out.ReplayMissingOut,
  MessageOut: out.MessageOut,
  ListResponse_MessageOut_: out.ListResponse_MessageOut_,
  MessageAttemptOut: out.MessageAttemptOut,
  ListResponse_MessageAttemptOut_: out.ListResponse_MessageAttemptOut_,
  MessageEndpointOut: out.MessageEndpointOut,
  ListResponse_MessageEndpointOut_: out.ListResponse_MessageEndpointOut_,
  EndpointMessageOut: out.EndpointMessageOut,
  ListResponse_EndpointMessageOut_: out.ListResponse_EndpointMessageOut_,
  EmptyResponse: out.EmptyResponse,
  ApiKeyOut: out.ApiKeyOut,
  ApiKeyCreatedOut: out.ApiKeyCreatedOut,
  ListResponse_ApiKeyOut_: out.ListResponse_ApiKeyOut_,
  SourceOut: out.SourceOut,
  ListResponse_SourceOut_: out.ListResponse_SourceOut_,
  ChallengeOut: out.ChallengeOut,
  ReadyOut: out.ReadyOut,
  ReplayOut: out.ReplayOut,
  MessageStatus: out.MessageStatus,
  HttpErrorOut: out.HttpErrorOut,
  ValidationErrorItem: out.ValidationErrorItem,
  HTTPValidationError: out.HTTPValidationError,
} satisfies Record<string, z.ZodType>;

// Query strings, taken from the schema the list routes parse with. Each operation lists only
// what its handler honours.
const page = ListQuery.pick({ limit: true, iterator: true, order: true });
const withContent = ListQuery.pick({ with_content: true });
const range = ListQuery.pick({ before: true, after: true });
const attemptFilters = page.extend({
  ...withContent.shape,
  ...range.shape,
  status: ListQuery.shape.status,
  status_code_class: ListQuery.shape.status_code_class,
  channel: ListQuery.shape.channel,
  tag: ListQuery.shape.tag,
  event_types: ListQuery.shape.event_types,
  with_msg: ListQuery.shape.with_msg.describe('each attempt with its message (`msg`), as the Svix SDKs ask'),
});
/** Read by the handlers directly: `true` means yes, anything else no. */
const yes = z.enum(['true', 'false']).optional();

const one = (what: string, schema: z.ZodType): Answer => ({ description: what, schema });
const none = (what: string): Answer => ({ description: what });

/** An `idempotency-key` header, as every route that reads one bounds it (assertIdempotencyKeyLength). */
const idempotencyKeyHeader = (description: string) => ({
  'idempotency-key': { description, schema: z.string().max(MAX_IDEMPOTENCY_KEY_LENGTH) },
});

const idempotencyKey = idempotencyKeyHeader(
  `Same key + same content → the same message (no second one); same key + different content → 409. At most ${MAX_IDEMPOTENCY_KEY_LENGTH} characters; keys beginning with \`intake:\` are those of relayed inbound messages (422).`,
);

/** The key of the other POSTs (src/api/idempotency.ts). */
const answerOnceKey = idempotencyKeyHeader(
  'Per caller: the first request with a key runs; a repeat gets its answer again (`idempotent-replayed: true`) and has no effect; the same key with another request → 409. Kept at least 24 h.',
);

export const OPERATIONS: Operation[] = [
  // --- Health -----------------------------------------------------------------------------------
  {
    method: 'GET',
    path: '/api/v1/health',
    operationId: 'v1.health.get',
    tag: 'Health',
    summary: 'Health',
    description: 'The API process is up. Does not look at the database (see `/api/v1/health/ready`).',
    auth: 'public',
    responses: { 204: none('Up') },
  },
  {
    method: 'HEAD',
    path: '/api/v1/health',
    // Svix names this operation `v1.health.get` too; operationIds must be unique.
    operationId: 'v1.health.head',
    tag: 'Health',
    summary: 'Health (HEAD)',
    auth: 'public',
    responses: { 204: none('Up') },
  },
  {
    method: 'GET',
    path: '/api/v1/health/ping',
    operationId: 'v1.health.ping',
    tag: 'Health',
    summary: 'Ping',
    auth: 'public',
    responses: { 204: none('Up') },
  },
  {
    method: 'HEAD',
    path: '/api/v1/health/ping',
    operationId: 'v1.health.ping-head',
    tag: 'Health',
    summary: 'Ping (HEAD)',
    auth: 'public',
    responses: { 204: none('Up') },
  },
  {
    method: 'GET',
    path: '/api/v1/health/ready',
    operationId: 'v1.health.ready',
    tag: 'Health',
    summary: 'Readiness',
    description:
      'herald: the database answers and every migration this build knows is applied; 503 otherwise.',
    responses: { 200: one('Ready', out.ReadyOut) },
    errors: [503],
  },

  // --- Application ------------------------------------------------------------------------------
  {
    method: 'GET',
    path: '/api/v1/app',
    operationId: 'v1.application.list',
    tag: 'Application',
    summary: 'List Applications',
    description: 'A key restricted to some applications sees only those.',
    query: page.extend({
      exclude_apps_with_no_endpoints: yes.describe('only applications that have an endpoint'),
      exclude_apps_with_disabled_endpoints: yes.describe('not supported: `true` is refused (422)'),
    }),
    responses: { 200: one('A page of applications', out.ListResponse_ApplicationOut_) },
  },
  {
    method: 'POST',
    path: '/api/v1/app',
    operationId: 'v1.application.create',
    tag: 'Application',
    summary: 'Create Application',
    body: ApplicationIn,
    query: z.object({
      get_if_exists: yes.describe('`true`: answer 200 with the app of this `uid` if it exists'),
    }),
    headers: answerOnceKey,
    responses: {
      200: one('The existing application (`get_if_exists=true`)', out.ApplicationOut),
      201: one('Created', out.ApplicationOut),
    },
    errors: [409],
  },
  {
    method: 'GET',
    path: '/api/v1/app/{app_id}',
    operationId: 'v1.application.get',
    tag: 'Application',
    summary: 'Get Application',
    responses: { 200: one('The application', out.ApplicationOut) },
  },
  {
    method: 'PUT',
    path: '/api/v1/app/{app_id}',
    operationId: 'v1.application.update',
    tag: 'Application',
    summary: 'Update Application',
    description: 'Creates the application, with the path as its uid, when it does not exist.',
    body: ApplicationIn,
    responses: {
      200: one('Updated', out.ApplicationOut),
      201: one('Created', out.ApplicationOut),
    },
    errors: [409],
  },
  {
    method: 'PATCH',
    path: '/api/v1/app/{app_id}',
    operationId: 'patch_application',
    tag: 'Application',
    summary: 'Patch Application',
    body: ApplicationPatch,
    responses: { 200: one('Updated', out.ApplicationOut) },
    errors: [409],
  },
  {
    method: 'DELETE',
    path: '/api/v1/app/{app_id}',
    operationId: 'v1.application.delete',
    tag: 'Application',
    summary: 'Delete Application',
    responses: { 204: none('Deleted') },
  },

  // --- Event Type -------------------------------------------------------------------------------
  {
    method: 'GET',
    path: '/api/v1/event-type',
    operationId: 'v1.event-type.list',
    tag: 'Event Type',
    summary: 'List Event Types',
    query: page.extend({
      include_archived: ListQuery.shape.include_archived,
      with_content: ListQuery.shape.with_content.describe(
        '`true`: each type with its schemas (null otherwise, as in Svix)',
      ),
    }),
    responses: { 200: one('A page of event types', out.ListResponse_EventTypeOut_) },
  },
  {
    method: 'POST',
    path: '/api/v1/event-type',
    operationId: 'v1.event-type.create',
    tag: 'Event Type',
    summary: 'Create Event Type',
    body: EventTypeIn,
    headers: answerOnceKey,
    responses: { 201: one('Created', out.EventTypeOut) },
    errors: [409],
  },
  {
    method: 'GET',
    path: '/api/v1/event-type/{event_type_name}',
    operationId: 'v1.event-type.get',
    tag: 'Event Type',
    summary: 'Get Event Type',
    responses: { 200: one('The event type', out.EventTypeOut) },
  },
  {
    method: 'PUT',
    path: '/api/v1/event-type/{event_type_name}',
    operationId: 'v1.event-type.update',
    tag: 'Event Type',
    summary: 'Update Event Type',
    description: 'Creates the event type when it does not exist.',
    body: EventTypeUpdate,
    responses: {
      200: one('Updated', out.EventTypeOut),
      201: one('Created', out.EventTypeOut),
    },
  },
  {
    method: 'PATCH',
    path: '/api/v1/event-type/{event_type_name}',
    operationId: 'patch_event_type',
    tag: 'Event Type',
    summary: 'Patch Event Type',
    body: EventTypePatch,
    responses: { 200: one('Updated', out.EventTypeOut) },
  },
  {
    method: 'DELETE',
    path: '/api/v1/event-type/{event_type_name}',
    operationId: 'v1.event-type.delete',
    tag: 'Event Type',
    summary: 'Delete Event Type',
    description: 'Archives the event type; with `expunge=true`, deletes it.',
    query: z.object({ expunge: yes.describe('`true`: delete instead of archiving') }),
    responses: { 204: none('Archived or deleted') },
  },

  // --- Endpoint ---------------------------------------------------------------------------------
  {
    method: 'GET',
    path: '/api/v1/app/{app_id}/endpoint',
    operationId: 'v1.endpoint.list',
    tag: 'Endpoint',
    summary: 'List Endpoints',
    query: page,
    responses: {
      200: one(
        'A page of endpoints, newest first unless `order` says otherwise, as in Svix',
        out.ListResponse_EndpointOut_,
      ),
    },
  },
  {
    method: 'POST',
    path: '/api/v1/app/{app_id}/endpoint',
    operationId: 'v1.endpoint.create',
    tag: 'Endpoint',
    summary: 'Create Endpoint',
    description:
      'The URL and every address it resolves to are checked against the SSRF guard. Without `secret`, one is generated.',
    body: EndpointIn,
    headers: answerOnceKey,
    responses: { 201: one('Created', out.EndpointOut) },
    errors: [409],
  },
  {
    method: 'GET',
    path: '/api/v1/app/{app_id}/endpoint/{endpoint_id}',
    operationId: 'v1.endpoint.get',
    tag: 'Endpoint',
    summary: 'Get Endpoint',
    responses: { 200: one('The endpoint', out.EndpointOut) },
  },
  {
    method: 'PUT',
    path: '/api/v1/app/{app_id}/endpoint/{endpoint_id}',
    operationId: 'v1.endpoint.update',
    tag: 'Endpoint',
    summary: 'Update Endpoint',
    description: 'Creates the endpoint, with the path as its uid, when it does not exist.',
    body: EndpointUpdate,
    responses: {
      200: one('Updated', out.EndpointOut),
      201: one('Created', out.EndpointOut),
    },
    errors: [409],
  },
  {
    method: 'PATCH',
    path: '/api/v1/app/{app_id}/endpoint/{endpoint_id}',
    operationId: 'patch_endpoint',
    tag: 'Endpoint',
    summary: 'Patch Endpoint',
    description: '`{"disabled": false}` re-enables the endpoint and releases its waiting deliveries.',
    body: EndpointPatch,
    responses: { 200: one('Updated', out.EndpointOut) },
    errors: [409],
  },
  {
    method: 'DELETE',
    path: '/api/v1/app/{app_id}/endpoint/{endpoint_id}',
    operationId: 'v1.endpoint.delete',
    tag: 'Endpoint',
    summary: 'Delete Endpoint',
    responses: { 204: none('Deleted') },
  },
  {
    method: 'GET',
    path: '/api/v1/app/{app_id}/endpoint/{endpoint_id}/secret',
    operationId: 'v1.endpoint.get-secret',
    tag: 'Endpoint',
    summary: 'Get Endpoint Secret',
    description: 'Needs the `admin` scope, although it is a GET.',
    responses: { 200: one('The current signing secret', out.EndpointSecretOut) },
  },
  {
    method: 'POST',
    path: '/api/v1/app/{app_id}/endpoint/{endpoint_id}/secret/rotate',
    operationId: 'v1.endpoint.rotate-secret',
    tag: 'Endpoint',
    summary: 'Rotate Endpoint Secret',
    description: 'The previous secret keeps signing for 24 hours, or `gracePeriodSeconds`.',
    body: EndpointSecretRotateIn,
    bodyOptional: true,
    headers: answerOnceKey,
    responses: { 204: none('Rotated') },
  },
  {
    method: 'GET',
    path: '/api/v1/app/{app_id}/endpoint/{endpoint_id}/headers',
    operationId: 'v1.endpoint.get-headers',
    tag: 'Endpoint',
    summary: 'Get Endpoint Headers',
    responses: { 200: one('The custom headers', out.EndpointHeadersOut) },
  },
  {
    method: 'PUT',
    path: '/api/v1/app/{app_id}/endpoint/{endpoint_id}/headers',
    operationId: 'v1.endpoint.update-headers',
    tag: 'Endpoint',
    summary: 'Update Endpoint Headers',
    body: EndpointHeadersIn,
    responses: { 204: none('Replaced') },
  },
  {
    method: 'PATCH',
    path: '/api/v1/app/{app_id}/endpoint/{endpoint_id}/headers',
    operationId: 'v1.endpoint.patch-headers',
    tag: 'Endpoint',
    summary: 'Patch Endpoint Headers',
    description: 'A `null` value, or a name in `deleteHeaders`, removes a header.',
    body: EndpointHeadersPatchIn,
    responses: { 204: none('Merged') },
  },
  {
    method: 'POST',
    path: '/api/v1/app/{app_id}/endpoint/{endpoint_id}/recover',
    operationId: 'v1.endpoint.recover',
    tag: 'Endpoint',
    summary: 'Recover Failed Webhooks',
    description:
      'Starts a new cycle for every failed delivery of the endpoint since `since` (until `until`) whose payload is still kept: same message id, lifetime history kept.',
    body: RecoverIn,
    headers: answerOnceKey,
    responses: { 202: one('Done by the time of the answer', out.RecoverOut) },
  },
  {
    method: 'POST',
    path: '/api/v1/app/{app_id}/endpoint/{endpoint_id}/replay-missing',
    operationId: 'v1.endpoint.replay-missing',
    tag: 'Endpoint',
    summary: 'Replay Missing Webhooks',
    description:
      'A delivery, due now, for every message of the app created since `since` (until `until`) that the endpoint matches today (event types, channels) and was never routed to — published before the endpoint existed, or while its filters left it out. Messages routed to it already are not sent again (see recover and resend), nor examples sent to another endpoint, nor those whose payload is gone.',
    body: ReplayMissingIn,
    headers: answerOnceKey,
    responses: { 202: one('Done by the time of the answer', out.ReplayMissingOut) },
  },
  {
    method: 'POST',
    path: '/api/v1/app/{app_id}/endpoint/{endpoint_id}/send-example',
    operationId: 'v1.endpoint.send-example',
    tag: 'Endpoint',
    summary: 'Send Event Type Example Message',
    description:
      'Publishes a message of the event type — example `exampleIndex` (0: the first) of its newest schema, or `{}` — delivered to this endpoint only, whatever its filters. `svix.ping`, the test event, needs no event type: its payload is `{"success": true}`.',
    body: EventExampleIn,
    headers: answerOnceKey,
    responses: { 200: one('The example message', out.MessageOut) },
  },
  {
    method: 'GET',
    path: '/api/v1/app/{app_id}/endpoint/{endpoint_id}/stats',
    operationId: 'v1.endpoint.get-stats',
    tag: 'Endpoint',
    summary: 'Endpoint Stats',
    description:
      'Deliveries of the endpoint by state, of the messages published from `since` (inclusive, default 28 days before `until`) until `until` (exclusive, default now).',
    query: StatsQuery,
    responses: { 200: one('Counts', out.EndpointStats) },
  },
  {
    method: 'GET',
    path: '/api/v1/app/{app_id}/endpoint/{endpoint_id}/msg',
    operationId: 'v1.message-attempt.list-attempted-messages',
    tag: 'Message Attempt',
    summary: 'List Attempted Messages',
    description:
      'The messages routed to the endpoint, newest first — those still waiting for their first attempt too — with the delivery’s current state; `status` filters by that state, the others by the message.',
    query: page.extend({
      ...withContent.shape,
      ...range.shape,
      status: ListQuery.shape.status,
      channel: ListQuery.shape.channel,
      tag: ListQuery.shape.tag,
      event_types: ListQuery.shape.event_types,
    }),
    responses: { 200: one('A page of messages', out.ListResponse_EndpointMessageOut_) },
  },

  // --- Message ----------------------------------------------------------------------------------
  {
    method: 'GET',
    path: '/api/v1/app/{app_id}/msg',
    operationId: 'v1.message.list',
    tag: 'Message',
    summary: 'List Messages',
    query: page.extend({
      ...range.shape,
      ...withContent.shape,
      channel: ListQuery.shape.channel,
      tag: ListQuery.shape.tag,
      event_types: ListQuery.shape.event_types,
    }),
    responses: { 200: one('A page of messages, newest first', out.ListResponse_MessageOut_) },
  },
  {
    method: 'POST',
    path: '/api/v1/app/{app_id}/msg',
    operationId: 'v1.message.create',
    tag: 'Message',
    summary: 'Create Message',
    description:
      'Stores the message and one delivery per endpoint subscribed now, in one transaction; 202 only after it commits. An `eventId` names one message of its app: another publish with it is a 409. Needs the `publish` scope (or `admin`).',
    body: MessageIn,
    query: z.object({ with_content: yes.describe('`false`: leave the payload out of the answer') }),
    headers: idempotencyKey,
    responses: { 202: one('Accepted: durably stored', out.MessageOut) },
    errors: [409],
  },
  {
    method: 'GET',
    path: '/api/v1/app/{app_id}/msg/{msg_id}',
    operationId: 'v1.message.get',
    tag: 'Message',
    summary: 'Get Message',
    query: z.object({ with_content: yes.describe('`false`: leave the payload out') }),
    responses: { 200: one('The message', out.MessageOut) },
  },
  {
    method: 'DELETE',
    path: '/api/v1/app/{app_id}/msg/{msg_id}/content',
    operationId: 'v1.message.expunge-content',
    tag: 'Message',
    summary: 'Expunge Message Content',
    responses: { 204: none('The payload is gone') },
  },
  {
    method: 'GET',
    path: '/api/v1/app/{app_id}/msg/{msg_id}/endpoint',
    operationId: 'v1.message-attempt.list-attempted-destinations',
    tag: 'Message Attempt',
    summary: 'List Attempted Destinations',
    query: page,
    responses: {
      200: one('A page of endpoints with their delivery state', out.ListResponse_MessageEndpointOut_),
    },
  },
  {
    method: 'POST',
    path: '/api/v1/app/{app_id}/msg/{msg_id}/endpoint/{endpoint_id}/resend',
    operationId: 'v1.message-attempt.resend',
    tag: 'Message Attempt',
    summary: 'Resend Webhook',
    description:
      'Starts a new cycle of the same delivery: same message id, lifetime history kept. While a request of the message to the endpoint is in flight, the new cycle is queued behind it: it starts once that attempt has ended (one request in flight per endpoint). `409 payload_expired` when the payload is gone (retention, or a delete of the content).',
    headers: answerOnceKey,
    responses: { 202: one('Scheduled', out.EmptyResponse) },
    errors: [409],
  },

  // --- Message Attempt --------------------------------------------------------------------------
  {
    method: 'GET',
    path: '/api/v1/app/{app_id}/attempt/msg/{msg_id}',
    operationId: 'v1.message-attempt.list-by-msg',
    tag: 'Message Attempt',
    summary: 'List Attempts By Msg',
    query: attemptFilters.extend({ endpoint_id: ListQuery.shape.endpoint_id }),
    responses: { 200: one('A page of attempts, newest first', out.ListResponse_MessageAttemptOut_) },
  },
  {
    method: 'GET',
    path: '/api/v1/app/{app_id}/attempt/endpoint/{endpoint_id}',
    operationId: 'v1.message-attempt.list-by-endpoint',
    tag: 'Message Attempt',
    summary: 'List Attempts By Endpoint',
    query: attemptFilters,
    responses: { 200: one('A page of attempts, newest first', out.ListResponse_MessageAttemptOut_) },
  },
  {
    method: 'GET',
    path: '/api/v1/app/{app_id}/msg/{msg_id}/attempt/{attempt_id}',
    operationId: 'v1.message-attempt.get',
    tag: 'Message Attempt',
    summary: 'Get Message Attempt',
    responses: { 200: one('The attempt', out.MessageAttemptOut) },
  },
  {
    method: 'DELETE',
    path: '/api/v1/app/{app_id}/msg/{msg_id}/attempt/{attempt_id}/content',
    operationId: 'v1.message-attempt.expunge-content',
    tag: 'Message Attempt',
    summary: 'Expunge Attempt Content',
    description:
      'herald: an attempt still in flight has no response yet, and answers 409 until it has finished.',
    responses: { 204: none('The response body is gone') },
    errors: [409],
  },

  // --- herald: replay and metrics --------------------------------------------------------------
  {
    method: 'POST',
    path: '/api/v1/replay',
    operationId: 'v1.replay.create',
    tag: 'Message Attempt',
    summary: 'Replay Deliveries',
    description:
      'herald: a new cycle for every finished delivery the filters select (same message id and `webhook-id`, history kept); deliveries waiting or in flight are never selected. More than `cap` deliveries is refused (422). `dryRun` only shows the selection. Unknown fields are refused.',
    body: ReplayIn,
    headers: answerOnceKey,
    responses: {
      200: one('Dry run: what a real run would restart', out.ReplayOut),
      202: one('Restarted; the workers send them', out.ReplayOut),
    },
  },
  {
    method: 'GET',
    path: '/metrics',
    operationId: 'metrics.get',
    tag: 'Health',
    summary: 'Prometheus metrics',
    description:
      'herald: the Prometheus text exposition; counts only (no ids, payloads or URLs). Served on `HERALD_METRICS_PORT` instead, when it is set (this path then answers 404).',
    auth: 'public',
    responses: { 200: { description: 'Prometheus text format', contentType: 'text/plain' } },
  },

  // --- herald: API keys ------------------------------------------------------------------------
  {
    method: 'GET',
    path: '/api/v1/api-key',
    operationId: 'v1.api-key.list',
    tag: 'API Key',
    summary: 'List API Keys',
    description: 'Every key, revoked ones included; never the tokens. Admin keys restricted to no app only.',
    responses: { 200: one('All keys, in one page', out.ListResponse_ApiKeyOut_) },
  },
  {
    method: 'POST',
    path: '/api/v1/api-key',
    operationId: 'v1.api-key.create',
    tag: 'API Key',
    summary: 'Create API Key',
    description: 'The token is in this answer and nowhere else; herald keeps only its SHA-256 hash.',
    body: ApiKeyIn,
    headers: idempotencyKeyHeader(
      'Per caller: the first request with a key creates the API key; a repeat creates none and is answered 409 naming the key it made (the token is not kept to be shown again). Kept at least 24 h.',
    ),
    responses: { 201: one('Created', out.ApiKeyCreatedOut) },
  },
  {
    method: 'DELETE',
    path: '/api/v1/api-key/{key_id}',
    operationId: 'v1.api-key.delete',
    tag: 'API Key',
    summary: 'Revoke API Key',
    responses: { 204: none('Revoked') },
  },

  // --- herald: inbound sources and ingest --------------------------------------------------------
  {
    method: 'GET',
    path: '/api/v1/source',
    operationId: 'v1.source.list',
    tag: 'Source',
    summary: 'List Sources',
    responses: { 200: one('All sources the key may see, in one page', out.ListResponse_SourceOut_) },
  },
  {
    method: 'POST',
    path: '/api/v1/source',
    operationId: 'v1.source.create',
    tag: 'Source',
    summary: 'Create Source',
    description: 'Secrets are write-only: no answer ever contains them.',
    body: SourceIn,
    headers: answerOnceKey,
    responses: { 201: one('Created', out.SourceOut) },
    errors: [409],
  },
  {
    method: 'GET',
    path: '/api/v1/source/{source_id}',
    operationId: 'v1.source.get',
    tag: 'Source',
    summary: 'Get Source',
    responses: { 200: one('The source', out.SourceOut) },
  },
  {
    method: 'PATCH',
    path: '/api/v1/source/{source_id}',
    operationId: 'v1.source.patch',
    tag: 'Source',
    summary: 'Patch Source',
    description: 'A new `secret` replaces the old one, which keeps verifying for `secretOverlapSeconds`.',
    body: SourcePatch,
    responses: { 200: one('Updated', out.SourceOut) },
    errors: [409],
  },
  {
    method: 'DELETE',
    path: '/api/v1/source/{source_id}',
    operationId: 'v1.source.delete',
    tag: 'Source',
    summary: 'Delete Source',
    responses: { 204: none('Deleted') },
  },
  {
    method: 'POST',
    path: '/ingest/{source}',
    operationId: 'ingest.receive',
    tag: 'Ingest',
    summary: 'Receive a signed delivery',
    description:
      'The provider’s request, verified on its raw bytes by the source’s scheme. 204 only after the delivery claim, the relayed message and the observation are committed; a duplicate delivery id is recorded and answered 204 again. A Slack `url_verification` handshake is answered 200 with its challenge, and stores nothing. Other methods answer 405 with `Allow: POST`.',
    auth: 'signature',
    rawBody: true,
    responses: {
      200: one('A handshake answered (Slack `url_verification`); nothing stored', out.ChallengeOut),
      204: none('Recorded (or already recorded)'),
    },
    errors: [400, 401, 404, 413, 503],
  },

  // --- This document ----------------------------------------------------------------------------
  {
    method: 'GET',
    path: '/openapi.json',
    operationId: 'openapi.get',
    tag: 'Documentation',
    summary: 'This OpenAPI document',
    auth: 'public',
    responses: { 200: { description: 'OpenAPI 3.1', contentType: 'application/json' } },
  },
  {
    method: 'GET',
    path: '/docs',
    operationId: 'docs.get',
    tag: 'Documentation',
    summary: 'Interactive API reference',
    description: 'A self-contained page (no external resources) that renders `/openapi.json`.',
    auth: 'public',
    responses: { 200: { description: 'HTML', contentType: 'text/html' } },
  },
];

/**
 * Routes fastify serves that are deliberately not operations: `METHOD /openapi/path`. The HEAD
 * twin fastify adds to every GET route is not listed (documented only where Svix has it).
 */
export const UNDOCUMENTED_ROUTES: Record<string, string> = {
  'GET /ingest/{source}': 'answers 405 with Allow: POST',
  'PUT /ingest/{source}': 'answers 405 with Allow: POST',
  'PATCH /ingest/{source}': 'answers 405 with Allow: POST',
  'DELETE /ingest/{source}': 'answers 405 with Allow: POST',
  'OPTIONS /ingest/{source}': 'answers 405 with Allow: POST',
};
