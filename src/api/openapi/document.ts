// Builds herald's OpenAPI 3.1 document from the route table (operations.ts): request schemas in
// their input form (what a client may send), answers in their output form, every named schema
// once under components. The result is deterministic, with keys sorted, so openapi.json can be
// committed and compared (scripts/openapi.ts, test/openapi.test.ts).

import { readFileSync } from 'node:fs';
import { z } from 'zod';
import { type Answer, OPERATIONS, type Operation, REQUEST_SCHEMAS, RESPONSE_SCHEMAS } from './operations.ts';

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type JsonObject = { [key: string]: Json };

const REF = '#/components/schemas/';

const TAGS: [string, string][] = [
  ['Application', 'Tenants: one per customer of your product. `{app_id}` is the id or the uid.'],
  ['Event Type', 'The kinds of message, shared by every application.'],
  ['Endpoint', 'Where an application’s messages are delivered, signed as Standard Webhooks.'],
  ['Message', 'Publishing, and what was published.'],
  ['Message Attempt', 'Deliveries and the history of every attempt.'],
  ['Health', 'Liveness and readiness.'],
  ['API Key', 'herald: bearer keys with scopes `admin`, `publish`, `read`, optionally restricted to apps.'],
  [
    'Source',
    'herald: inbound sources — how deliveries pushed to `/ingest/{source}` are verified and relayed.',
  ],
  ['Ingest', 'herald: the public inbound face, authenticated by each source’s signature scheme.'],
  ['Documentation', 'This document and its reference page.'],
];

const PATH_PARAMS: Record<string, string> = {
  app_id: 'The application’s id (`app_…`) or uid',
  endpoint_id: 'The endpoint’s id (`ep_…`) or uid',
  msg_id: 'The message id (`msg_…`)',
  attempt_id: 'The attempt id (`atmpt_…`)',
  event_type_name: 'The event type’s name',
  key_id: 'The API key id (`key_…`)',
  source_id: 'The source’s id or uid',
  source: 'The source’s id or uid',
};

const QUERY_PARAMS: Record<string, string> = {
  limit: 'How many items per page',
  iterator: 'The `iterator` (or `prevIterator`) of the previous page',
  order: 'The listing order',
  before: 'Only items created before this time (ignored with an `iterator`)',
  after:
    'Only items created after this time (ignored with an `iterator`); alone, the first page holds the oldest items after it, and `prevIterator` walks on towards newer ones',
  with_content: '`false`: leave payloads out',
  include_archived: 'Include archived event types',
  channel: 'Only messages on this channel (of the attempt’s message, on attempt lists)',
  tag: 'Only messages with this tag (of the attempt’s message, on attempt lists)',
  endpoint_id: 'Only attempts to this endpoint (id)',
  status: 'Only this status (0 success, 1 pending, 2 fail, 3 sending)',
  event_types: 'Only these event types (repeat the parameter, or separate with commas)',
  status_code_class: 'Only responses of this class (0 no status code, 100, 200, 300, 400, 500)',
  since: 'Count the deliveries of the messages published from this time (default: 28 days before `until`)',
  until: 'Count the deliveries of the messages published before this time (default: now)',
};

const STATUS_TEXT: Record<number, string> = {
  400: 'Bad Request: the body is not JSON, or a required part of the request is missing',
  401: 'Unauthorized',
  403: 'Forbidden: the key lacks the scope for this operation',
  404: 'Not Found (an application beyond a restricted key reads as not found too)',
  409: 'Conflict',
  413: 'Payload Too Large (`HERALD_MAX_BODY_BYTES`; on `/ingest`, `HERALD_INGEST_MAX_BODY_BYTES`)',
  415: 'Unsupported Media Type: JSON only',
  422: 'Validation Error',
  429: 'Too Many Requests (`HERALD_API_RATE_LIMIT`, or `HERALD_AUTH_FAILURE_LIMIT` failed authentications from this address), with `Retry-After`',
  503: 'Service Unavailable: the database cannot be reached (`store_unavailable`), or more writes (or reads of history: stats, lists of messages and attempts) wait for it than herald holds (`overloaded`), or a secret is sealed under a master key this process does not hold (`secret_unavailable`); retry later (`Retry-After`)',
};

const MIN_SAFE = Number.MIN_SAFE_INTEGER;
const MAX_SAFE = Number.MAX_SAFE_INTEGER;

/** Drops what zod emits that says nothing to a reader: safe-integer bounds, date-time regexes. */
function tidy(node: Json, response: boolean): Json {
  if (Array.isArray(node)) return node.map((item) => tidy(item, response));
  if (node === null || typeof node !== 'object') return node;
  const result: JsonObject = {};
  for (const [key, value] of Object.entries(node)) {
    if (key === '$schema' || key === '$id') continue;
    if (key === 'minimum' && value === MIN_SAFE) continue;
    if (key === 'maximum' && value === MAX_SAFE) continue;
    if (key === 'pattern' && node['format'] === 'date-time') continue;
    if (key === 'propertyNames' && JSON.stringify(value) === '{"type":"string"}') continue;
    // Answers may gain fields: a client must not treat one it does not know as an error.
    if (response && key === 'additionalProperties' && value === false) continue;
    result[key] = tidy(value, response);
  }
  return result;
}

function sortKeys(node: Json): Json {
  if (Array.isArray(node)) return node.map(sortKeys);
  if (node === null || typeof node !== 'object') return node;
  const result: JsonObject = {};
  for (const key of Object.keys(node).sort()) result[key] = sortKeys(node[key]!);
  return result;
}

function components(schemas: Record<string, z.ZodType>, io: 'input' | 'output'): Record<string, Json> {
  const registry = z.registry<{ id: string }>();
  for (const [id, schema] of Object.entries(schemas)) registry.add(schema, { id });
  const generated = z.toJSONSchema(registry, { io, uri: (id) => REF + id, unrepresentable: 'any' });
  const result: Record<string, Json> = {};
  for (const [id, schema] of Object.entries(generated.schemas)) {
    result[id] = tidy(schema as Json, io === 'output');
  }
  return result;
}

function nameOf(schema: z.ZodType, table: Record<string, z.ZodType>): string {
  const name = Object.entries(table).find(([, s]) => s === schema)?.[0];
  if (!name) throw new Error('a schema of the route table is not named in operations.ts');
  return name;
}

function pathParameters(path: string): JsonObject[] {
  return [...path.matchAll(/\{(\w+)\}/g)].map(([, name]) => ({
    name: name!,
    in: 'path',
    required: true,
    description: PATH_PARAMS[name!] ?? name!,
    schema: { type: 'string' },
  }));
}

function queryParameters(query: z.ZodObject): JsonObject[] {
  return Object.entries(query.shape).map(([name, field]) => {
    const schema = tidy(
      z.toJSONSchema(field as z.ZodType, { io: 'input', unrepresentable: 'any' }) as Json,
      false,
    );
    const { description, ...rest } = schema as JsonObject;
    return {
      name,
      in: 'query',
      required: !(field as z.ZodType).safeParse(undefined).success,
      description: (description as string | undefined) ?? QUERY_PARAMS[name] ?? name,
      schema: rest,
    };
  });
}

function answer(a: Answer): JsonObject {
  if (a.schema) {
    const ref = { $ref: REF + nameOf(a.schema, RESPONSE_SCHEMAS) };
    return {
      description: a.description,
      content: { [a.contentType ?? 'application/json']: { schema: ref } },
    };
  }
  if (a.contentType) return { description: a.description, content: { [a.contentType]: {} } };
  return { description: a.description };
}

/** Statuses whose answer carries `Retry-After` (seconds). */
const RETRY_AFTER_STATUSES = new Set([429, 503]);

function errorStatuses(op: Operation): number[] {
  const statuses = new Set(op.errors ?? []);
  // A key is looked up in the database, and every such operation reads or writes there.
  if ((op.auth ?? 'bearer') === 'bearer') for (const s of [401, 403, 429, 503]) statuses.add(s);
  if (op.path.includes('{')) statuses.add(404);
  if (op.body) for (const s of [400, 413, 415, 422]) statuses.add(s);
  if (op.query) statuses.add(422);
  // An idempotency key used again for another request is a 409.
  if (op.headers?.['idempotency-key']) statuses.add(409);
  return [...statuses].sort((a, b) => a - b);
}

function operation(op: Operation): JsonObject {
  const parameters: JsonObject[] = [...pathParameters(op.path)];
  if (op.query) parameters.push(...queryParameters(op.query));
  for (const [name, header] of Object.entries(op.headers ?? {})) {
    const schema = tidy(z.toJSONSchema(header.schema, { io: 'input' }) as Json, false);
    parameters.push({ name, in: 'header', required: false, description: header.description, schema });
  }
  const responses: JsonObject = {};
  for (const [status, a] of Object.entries(op.responses)) responses[status] = answer(a);
  for (const status of errorStatuses(op)) {
    const schema = status === 422 ? 'HTTPValidationError' : 'HttpErrorOut';
    responses[String(status)] = {
      description: STATUS_TEXT[status] ?? String(status),
      content: { 'application/json': { schema: { $ref: REF + schema } } },
      ...(RETRY_AFTER_STATUSES.has(status)
        ? {
            headers: {
              'Retry-After': { description: 'Seconds to wait before retrying', schema: { type: 'integer' } },
            },
          }
        : {}),
    };
  }
  const result: JsonObject = {
    operationId: op.operationId,
    tags: [op.tag],
    summary: op.summary,
    parameters,
    responses,
  };
  if (op.description) result['description'] = op.description;
  if ((op.auth ?? 'bearer') !== 'bearer') result['security'] = [];
  if (op.body) {
    result['requestBody'] = {
      required: !op.bodyOptional,
      content: { 'application/json': { schema: { $ref: REF + nameOf(op.body, REQUEST_SCHEMAS) } } },
    };
  } else if (op.rawBody) {
    result['requestBody'] = {
      required: false,
      description: 'Whatever the provider sends, byte for byte: the signature covers these bytes.',
      content: { '*/*': { schema: {} } },
    };
  }
  return result;
}

const DESCRIPTION = `A webhook gateway on PostgreSQL with a Svix-compatible API: the official \`svix\` SDKs work against herald for applications, event types, endpoints, messages and attempts. Not served: the app portal's \`/api/v1/auth/*\` operations. Refused by name (422), where herald does not do what they ask: \`deliverAt\`, \`payloadRetentionHours\`, \`featureFlags\`, \`groupName\`, \`exclude_apps_with_disabled_endpoints=true\`, and a \`limit\` outside 1–250.

Authenticate with \`Authorization: Bearer <key>\`. Scopes: \`admin\` may do everything; \`publish\` may only create messages; \`read\` may only GET (but not list API keys or read endpoint secrets). A key may be restricted to some applications.

Errors are \`{"code": …, "detail": …}\`; validation errors (422) name every offending field in \`detail\`. Lists use Svix's pagination: \`limit\`, \`iterator\`, and \`iterator\`/\`prevIterator\`/\`done\` in the answer.`;

function version(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8'));
  return pkg.version as string;
}

/** herald's OpenAPI document, keys sorted. */
export function buildOpenApiDocument(): JsonObject {
  const paths: Record<string, JsonObject> = {};
  for (const op of OPERATIONS) {
    paths[op.path] ??= {};
    const item = paths[op.path]!;
    const method = op.method.toLowerCase();
    if (item[method]) throw new Error(`${op.method} ${op.path} is listed twice`);
    item[method] = operation(op);
  }
  const schemas = {
    ...components(REQUEST_SCHEMAS, 'input'),
    ...components(RESPONSE_SCHEMAS, 'output'),
  };
  const document: JsonObject = {
    openapi: '3.1.0',
    info: {
      title: 'herald',
      version: version(),
      description: DESCRIPTION,
      license: { name: 'MIT', identifier: 'MIT' },
    },
    tags: TAGS.map(([name, description]) => ({ name, description })),
    security: [{ HTTPBearer: [] }],
    paths,
    components: {
      schemas,
      securitySchemes: {
        HTTPBearer: {
          type: 'http',
          scheme: 'bearer',
          description: 'An API key (`herald keys create`, `POST /api/v1/api-key`) or `HERALD_ADMIN_KEY`',
        },
      },
    },
  };
  return sortKeys(document) as JsonObject;
}

/** The document as committed in openapi.json: 2-space JSON and a final newline. */
export const renderOpenApiDocument = (): string => `${JSON.stringify(buildOpenApiDocument(), null, 2)}\n`;
