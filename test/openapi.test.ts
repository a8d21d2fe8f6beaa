// herald's OpenAPI document: it lists exactly the routes fastify serves, the committed
// openapi.json is what the route table generates, every answer herald gives matches the schema
// documented for its status, and the document keeps the Svix OSS contract
// (../shared/reference/svix-oss-openapi.json) except for the known gaps listed below.

import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Webhook } from 'standardwebhooks';
import type { z } from 'zod';
import { renderOpenApiDocument } from '../src/api/openapi/document.ts';
import { OPERATIONS, type Operation, UNDOCUMENTED_ROUTES } from '../src/api/openapi/operations.ts';
import { HTTPValidationError, HttpErrorOut } from '../src/api/openapi/responses.ts';
import { ADMIN_KEY, startTestHerald, type TestHerald } from './support/herald.ts';
import { type Receiver, startReceiver } from './support/receiver.ts';
import { waitFor } from './support/wait.ts';

// biome-ignore lint/suspicious/noExplicitAny: OpenAPI documents are walked as loose JSON
type Any = any;

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const SVIX_REFERENCE = `${ROOT}../shared/reference/svix-oss-openapi.json`;
const METHODS = ['get', 'head', 'post', 'put', 'patch', 'delete', 'options', 'trace'];

const doc: Any = JSON.parse(renderOpenApiDocument());

// --- Known gaps against the Svix OSS contract ---------------------------------------------------
// Keep this short and true: the contract test fails for a gap not listed here, and for an entry
// that is no longer a gap. `*` stands for every operation.

/** Svix operations herald does not serve (each answers 404). */
const MISSING_OPERATIONS: Record<string, string> = {
  // There is no consumer application portal in herald to hand out links to.
  'POST /api/v1/auth/app-portal-access/{app_id}': 'no application portal',
  // Logs out an app-portal token; herald issues none. API keys are revoked with DELETE /api/v1/api-key/{id}.
  'POST /api/v1/auth/logout': 'no app-portal tokens',
};

/** Request parts Svix defines that herald does not read: `<op> <in>.<name>`. */
const REQUEST_GAPS: Record<string, string> = {};

/** Svix operations whose document declares no success answer: what herald answers instead. */
const SVIX_WITHOUT_SUCCESS: Record<string, number> = {
  'DELETE /api/v1/app/{app_id}/msg/{msg_id}/attempt/{attempt_id}/content': 204,
  'DELETE /api/v1/app/{app_id}/msg/{msg_id}/content': 204,
  'HEAD /api/v1/health': 204,
};

// --- JSON Schema helpers ----------------------------------------------------------------------

function deref(document: Any, schema: Any): Any {
  let s = schema ?? {};
  for (let i = 0; s.$ref && i < 20; i++) {
    const { $ref, ...siblings } = s;
    s = { ...document.components.schemas[$ref.split('/').pop()], ...siblings };
  }
  return s;
}

/** The JSON types a schema admits ('integer' for integral enums and consts). */
function typesOf(document: Any, schema: Any): Set<string> {
  const s = deref(document, schema);
  const types = new Set<string>();
  const valueType = (v: unknown) =>
    v === null ? 'null' : Number.isInteger(v) ? 'integer' : Array.isArray(v) ? 'array' : typeof v;
  if (s.anyOf || s.oneOf || s.allOf) {
    for (const branch of s.anyOf ?? s.oneOf ?? s.allOf)
      for (const t of typesOf(document, branch)) types.add(t);
  } else if (s.const !== undefined) types.add(valueType(s.const));
  else if (s.enum) for (const v of s.enum) types.add(valueType(v));
  else if (s.type) for (const t of [s.type].flat()) types.add(t);
  else types.add('any');
  if (s.nullable) types.add('null');
  return types;
}

/** Whether every value of types `a` is of types `b` (an integer is a number). */
function within(a: Set<string>, b: Set<string>): boolean {
  if (b.has('any')) return true;
  return [...a].every((t) => b.has(t) || (t === 'integer' && b.has('number')));
}

const objectOf = (document: Any, schema: Any): Any => {
  const s = deref(document, schema);
  if (s.properties) return s;
  for (const branch of s.anyOf ?? s.oneOf ?? []) {
    const inner = objectOf(document, branch);
    if (inner) return inner;
  }
  return null;
};

/** The item schema of an array schema, possibly nullable. */
const itemsOf = (document: Any, schema: Any): Any => {
  const s = deref(document, schema);
  if (s.items) return s.items;
  for (const branch of s.anyOf ?? s.oneOf ?? []) {
    const items = itemsOf(document, branch);
    if (items) return items;
  }
  return null;
};

const keyOf = (method: string, path: string) => `${method.toUpperCase()} ${path}`;
const paramsOf = (op: Any, where: string): string[] =>
  (op.parameters ?? []).filter((p: Any) => p.in === where).map((p: Any) => p.name);
const successes = (op: Any) => Object.keys(op.responses ?? {}).filter((s) => s.startsWith('2'));
const jsonSchemaOf = (r: Any) => r?.content?.['application/json']?.schema;

// --- Fastify's routes ---------------------------------------------------------------------------

/** `METHOD /openapi/{path}` for each route in fastify's printRoutes({ commonPrefix: false }) tree. */
function servedRoutes(tree: string): Set<string> {
  const routes = new Set<string>();
  const stack: string[] = [];
  for (const line of tree.split('\n')) {
    const match = line.match(/^((?:│ {3}| {4})*)(?:├── |└── )(\S+?)(?: \(([^)]*)\))?$/);
    if (!match) {
      assert.equal(line.trim(), '', `unparsed line of printRoutes: ${line}`);
      continue;
    }
    const depth = match[1]!.length / 4;
    stack.length = depth;
    const path = (stack[depth - 1] ?? '') + match[2]!;
    stack.push(path);
    for (const method of match[3]?.split(', ') ?? []) {
      routes.add(keyOf(method, path.replace(/:(\w+)/g, '{$1}')));
    }
  }
  return routes;
}

let t: TestHerald;
let receiver: Receiver;

before(async () => {
  t = await startTestHerald('openapi');
  receiver = await startReceiver(() => ({ status: 200, body: '{"ok":true}' }));
});
after(async () => {
  await t?.close();
  await receiver?.close();
});

describe('the route table is the list of routes', () => {
  test('every route fastify serves is documented, and every documented operation is served', () => {
    const served = servedRoutes(t.api.printRoutes({ commonPrefix: false }));
    assert.ok(served.size > 40, `printRoutes parsed to only ${served.size} routes`);
    const documented = new Set(OPERATIONS.map((op) => keyOf(op.method, op.path)));
    // fastify answers HEAD for every GET route by itself; the table lists HEAD only where Svix does.
    const implicitHead = (route: string) =>
      route.startsWith('HEAD ') && served.has(route.replace(/^HEAD /, 'GET ')) && !documented.has(route);
    const undocumented = [...served].filter(
      (route) => !documented.has(route) && !implicitHead(route) && !(route in UNDOCUMENTED_ROUTES),
    );
    assert.deepEqual(
      undocumented,
      [],
      'fastify serves routes that src/api/openapi/operations.ts does not list',
    );
    const notServed = [...documented].filter((route) => !served.has(route));
    assert.deepEqual(notServed, [], 'operations.ts lists routes that fastify does not serve');
    const staleExclusions = Object.keys(UNDOCUMENTED_ROUTES).filter((route) => !served.has(route));
    assert.deepEqual(staleExclusions, [], 'UNDOCUMENTED_ROUTES names routes that no longer exist');
  });

  test('the document is well formed: unique operationIds, declared path parameters, resolvable refs', () => {
    assert.equal(doc.openapi, '3.1.0');
    const ids = OPERATIONS.map((op) => op.operationId);
    assert.equal(new Set(ids).size, ids.length, 'operationIds must be unique');
    for (const [path, item] of Object.entries<Any>(doc.paths)) {
      const inPath = [...path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]);
      for (const [method, op] of Object.entries<Any>(item)) {
        assert.deepEqual(paramsOf(op, 'path'), inPath, `${method} ${path}: path parameters`);
        assert.ok(successes(op).length > 0, `${method} ${path} documents no success answer`);
      }
    }
    const refs = [...JSON.stringify(doc).matchAll(/"\$ref":"#\/components\/schemas\/([^"]+)"/g)].map(
      (m) => m[1]!,
    );
    for (const ref of new Set(refs)) assert.ok(doc.components.schemas[ref], `unresolved $ref ${ref}`);
  });
});

describe('what every operation may answer', () => {
  test('an operation that takes an API key documents 503 (the database away, or too many writes waiting) with Retry-After', () => {
    for (const op of OPERATIONS.filter((o) => (o.auth ?? 'bearer') === 'bearer')) {
      const responses = doc.paths[op.path][op.method.toLowerCase()].responses;
      assert.ok(responses['503'], `${op.operationId} does not document 503`);
      assert.ok(responses['503'].headers?.['Retry-After'], `${op.operationId}: 503 without Retry-After`);
      if (responses['429']) assert.ok(responses['429'].headers?.['Retry-After'], `${op.operationId}: 429`);
    }
  });
});

describe('openapi.json', () => {
  test('the committed openapi.json is what the route table generates (else: npm run openapi)', () => {
    const committed = readFileSync(`${ROOT}openapi.json`, 'utf8');
    assert.ok(
      committed === renderOpenApiDocument(),
      'openapi.json is stale: run `npm run openapi` and commit it',
    );
  });

  test('GET /openapi.json serves the document without an API key', async () => {
    const response = await fetch(`${t.url}/openapi.json`);
    assert.equal(response.status, 200);
    assert.match(response.headers.get('content-type') ?? '', /^application\/json/);
    assert.deepEqual(await response.json(), doc);
  });

  test('GET /docs is a self-contained page: nothing loaded from elsewhere, and the CSP says so', async () => {
    const response = await fetch(`${t.url}/docs`);
    assert.equal(response.status, 200);
    assert.match(response.headers.get('content-type') ?? '', /^text\/html/);
    const html = await response.text();
    assert.match(html, /openapi\.json/);
    assert.doesNotMatch(
      html,
      /\b(?:src|href)\s*=\s*["']?(?:https?:)?\/\//i,
      'no external script, style or link',
    );
    assert.doesNotMatch(html, /@import|url\(\s*["']?(?:https?:)?\/\//i, 'no external stylesheet or font');
    const csp = response.headers.get('content-security-policy') ?? '';
    assert.match(csp, /default-src 'none'/);
    assert.match(csp, /connect-src 'self'/);
    assert.match(csp, /script-src 'sha256-[A-Za-z0-9+/=]+'/);
  });
});

describe('every answer matches the schema documented for its status', () => {
  const exercised = new Set<string>();
  const byId = new Map(OPERATIONS.map((op) => [op.operationId, op]));

  /** Keys of `value` that the schema does not document, as paths. */
  function undocumentedKeys(value: unknown, schema: Any, at: string): string[] {
    if (value === null || typeof value !== 'object') return [];
    if (Array.isArray(value)) {
      const items = itemsOf(doc, schema);
      return value.flatMap((item, i) => undocumentedKeys(item, items, `${at}[${i}]`));
    }
    const s = objectOf(doc, schema);
    if (!s) return [];
    return Object.entries(value).flatMap(([key, v]) =>
      key in s.properties ? undocumentedKeys(v, s.properties[key], `${at}.${key}`) : [`${at}.${key}`],
    );
  }

  async function call(
    operationId: string,
    options: {
      params?: Record<string, string>;
      query?: Record<string, string>;
      body?: unknown;
      raw?: string;
      headers?: Record<string, string>;
      key?: string | null;
    } = {},
  ): Promise<{ status: number; body: Any }> {
    const op = byId.get(operationId);
    assert.ok(op, `no operation ${operationId}`);
    const path = op.path.replace(/\{(\w+)\}/g, (_, name: string) => {
      const value = options.params?.[name];
      assert.ok(value !== undefined, `${operationId}: no value for {${name}}`);
      return encodeURIComponent(value);
    });
    const query = options.query ? `?${new URLSearchParams(options.query)}` : '';
    const headers: Record<string, string> = { ...options.headers };
    const key = options.key === undefined ? ADMIN_KEY : options.key;
    if (key !== null) headers['authorization'] = `Bearer ${key}`;
    if (options.body !== undefined) headers['content-type'] = 'application/json';
    const response = await fetch(t.url + path + query, {
      method: op.method,
      headers,
      body: options.raw ?? (options.body === undefined ? null : JSON.stringify(options.body)),
    });
    const text = await response.text();
    const documented = doc.paths[op.path][op.method.toLowerCase()].responses[String(response.status)];
    assert.ok(documented, `${operationId} answered ${response.status}, which is not documented: ${text}`);
    const answer = op.responses[response.status];
    const schema: z.ZodType | undefined =
      answer?.schema ??
      (response.status === 422 ? HTTPValidationError : response.status >= 400 ? HttpErrorOut : undefined);
    const contentType = response.headers.get('content-type') ?? '';
    let body: Any = null;
    if (schema) {
      assert.match(contentType, /^application\/json/, `${operationId} ${response.status}: content type`);
      body = JSON.parse(text);
      const parsed = schema.safeParse(body);
      assert.ok(
        parsed.success,
        `${operationId} ${response.status}: the answer does not match its schema: ${parsed.error?.message}\n${text}`,
      );
      const extra = undocumentedKeys(body, jsonSchemaOf(documented), 'body');
      assert.deepEqual(extra, [], `${operationId} ${response.status}: fields the document does not describe`);
    } else if (answer?.contentType) {
      assert.ok(contentType.startsWith(answer.contentType), `${operationId}: content type ${contentType}`);
    } else {
      assert.equal(text, '', `${operationId} ${response.status}: documented as empty, got ${text}`);
    }
    if (response.status < 300) exercised.add(operationId);
    return { status: response.status, body };
  }

  test('a walk through every operation', async () => {
    // Health and documentation, without a key.
    assert.equal((await call('v1.health.get', { key: null })).status, 204);
    assert.equal((await call('v1.health.head', { key: null })).status, 204);
    assert.equal((await call('v1.health.ping', { key: null })).status, 204);
    assert.equal((await call('v1.health.ping-head', { key: null })).status, 204);
    assert.equal((await call('v1.health.ready')).status, 200);
    assert.equal((await call('openapi.get', { key: null })).status, 200);
    assert.equal((await call('docs.get', { key: null })).status, 200);

    // Errors have their documented shapes too.
    assert.equal((await call('v1.application.list', { key: null })).status, 401);
    assert.equal((await call('v1.application.get', { params: { app_id: 'nope' } })).status, 404);
    assert.equal((await call('v1.application.create', { body: { uid: 'x' } })).status, 422);

    // Applications.
    const app = await call('v1.application.create', { body: { name: 'Docs', uid: 'docs' } });
    assert.equal(app.status, 201);
    const again = await call('v1.application.create', {
      body: { name: 'Docs', uid: 'docs' },
      query: { get_if_exists: 'true' },
    });
    assert.equal(again.status, 200);
    assert.equal((await call('v1.application.list', { query: { limit: '10' } })).status, 200);
    assert.equal((await call('v1.application.get', { params: { app_id: 'docs' } })).status, 200);
    assert.equal(
      (
        await call('v1.application.update', {
          params: { app_id: 'docs' },
          body: { name: 'Docs', uid: 'docs' },
        })
      ).status,
      200,
    );
    assert.equal(
      (await call('v1.application.update', { params: { app_id: 'spare' }, body: { name: 'Spare' } })).status,
      201,
    );
    assert.equal(
      (await call('patch_application', { params: { app_id: 'docs' }, body: { metadata: { a: 'b' } } }))
        .status,
      200,
    );
    assert.equal((await call('v1.application.delete', { params: { app_id: 'spare' } })).status, 204);

    // Event types.
    const eventType = { name: 'invoice.paid', description: 'An invoice was paid' };
    assert.equal((await call('v1.event-type.create', { body: eventType })).status, 201);
    assert.equal((await call('v1.event-type.list', { query: { include_archived: 'true' } })).status, 200);
    const typeParams = { event_type_name: 'invoice.paid' };
    assert.equal((await call('v1.event-type.get', { params: typeParams })).status, 200);
    assert.equal(
      (await call('v1.event-type.update', { params: typeParams, body: { description: 'Paid' } })).status,
      200,
    );
    const spareType = { event_type_name: 'spare.type' };
    assert.equal(
      (await call('v1.event-type.update', { params: spareType, body: { description: 'Spare' } })).status,
      201,
    );
    assert.equal(
      (await call('patch_event_type', { params: typeParams, body: { deprecated: false } })).status,
      200,
    );
    assert.equal((await call('v1.event-type.delete', { params: spareType })).status, 204);

    // Endpoints.
    const created = await call('v1.endpoint.create', {
      params: { app_id: 'docs' },
      body: { url: `${receiver.url}/hook`, uid: 'main', headers: { 'x-tenant': 'docs' } },
    });
    assert.equal(created.status, 201);
    const ep = { app_id: 'docs', endpoint_id: 'main' };
    const spareEp = { app_id: 'docs', endpoint_id: 'spare' };
    assert.equal((await call('v1.endpoint.list', { params: { app_id: 'docs' } })).status, 200);
    assert.equal((await call('v1.endpoint.get', { params: ep })).status, 200);
    const url = `${receiver.url}/hook`;
    assert.equal((await call('v1.endpoint.update', { params: ep, body: { url, uid: 'main' } })).status, 200);
    assert.equal((await call('v1.endpoint.update', { params: spareEp, body: { url } })).status, 201);
    assert.equal((await call('patch_endpoint', { params: ep, body: { description: 'main' } })).status, 200);
    assert.equal((await call('v1.endpoint.get-secret', { params: ep })).status, 200);
    assert.equal((await call('v1.endpoint.rotate-secret', { params: ep })).status, 204);
    assert.equal((await call('v1.endpoint.get-headers', { params: ep })).status, 200);
    const headers = { headers: { 'x-tenant': 'docs', authorization: 'Basic eDp5' } };
    assert.equal((await call('v1.endpoint.update-headers', { params: ep, body: headers })).status, 204);
    const patchHeaders = { headers: { 'x-extra': '1' }, deleteHeaders: ['x-tenant'] };
    assert.equal((await call('v1.endpoint.patch-headers', { params: ep, body: patchHeaders })).status, 204);
    assert.equal((await call('v1.endpoint.delete', { params: spareEp })).status, 204);

    // Messages, their deliveries and attempts.
    const published = await call('v1.message.create', {
      params: { app_id: 'docs' },
      body: { eventType: 'invoice.paid', payload: { invoice: 42 }, channels: ['billing'], tags: ['t'] },
      headers: { 'idempotency-key': 'docs-1' },
    });
    assert.equal(published.status, 202);
    const msg = { app_id: 'docs', msg_id: published.body.id as string };
    const attempts = await waitFor('a finished attempt', async () => {
      const page = await call('v1.message-attempt.list-by-msg', { params: msg, query: { limit: '5' } });
      return page.body.data.find((a: Any) => a.finishedAt !== null);
    });
    const attempt = { ...msg, attempt_id: attempts.id as string };
    assert.equal(
      (await call('v1.message.list', { params: { app_id: 'docs' }, query: { channel: 'billing' } })).status,
      200,
    );
    assert.equal((await call('v1.message.get', { params: msg })).status, 200);
    assert.equal((await call('v1.message-attempt.get', { params: attempt })).status, 200);
    const byEndpoint = { app_id: 'docs', endpoint_id: created.body.id as string };
    assert.equal((await call('v1.message-attempt.list-by-endpoint', { params: byEndpoint })).status, 200);
    assert.equal((await call('v1.message-attempt.list-attempted-messages', { params: ep })).status, 200);
    assert.equal((await call('v1.message-attempt.list-attempted-destinations', { params: msg })).status, 200);
    assert.equal((await call('v1.endpoint.get-stats', { params: ep })).status, 200);
    const resend = { ...msg, endpoint_id: 'main' };
    assert.equal((await call('v1.message-attempt.resend', { params: resend })).status, 202);
    const since = new Date(Date.now() - 3600_000).toISOString();
    assert.equal((await call('v1.endpoint.recover', { params: ep, body: { since } })).status, 202);
    assert.equal((await call('v1.endpoint.replay-missing', { params: ep, body: { since } })).status, 202);
    const exampleType = {
      name: 'example.sent',
      description: 'An example',
      schemas: { '1': { type: 'object', examples: [{ hello: 'world' }] } },
    };
    assert.equal((await call('v1.event-type.create', { body: exampleType })).status, 201);
    const example = await call('v1.endpoint.send-example', {
      params: ep,
      body: { eventType: 'example.sent' },
    });
    assert.equal(example.status, 200);
    assert.deepEqual(example.body.payload, { hello: 'world' });
    const replay = { status: 'succeeded', cap: 10, app: 'docs', messageIds: [msg.msg_id] };
    await waitFor('the resent and recovered delivery to finish', async () => {
      const page = await call('v1.message-attempt.list-attempted-destinations', { params: msg });
      return page.body.data[0].status === 0;
    });
    assert.equal((await call('v1.replay.create', { body: { ...replay, dryRun: true } })).status, 200);
    assert.equal((await call('v1.replay.create', { body: replay })).status, 202);
    assert.equal((await call('metrics.get', { key: null })).status, 200);
    assert.equal((await call('v1.message-attempt.expunge-content', { params: attempt })).status, 204);
    assert.equal((await call('v1.message.expunge-content', { params: msg })).status, 204);

    // API keys.
    const key = await call('v1.api-key.create', {
      body: { name: 'reader', scopes: ['read'], apps: ['docs'] },
    });
    assert.equal(key.status, 201);
    assert.equal((await call('v1.api-key.list')).status, 200);
    assert.equal((await call('v1.api-key.delete', { params: { key_id: key.body.id } })).status, 204);

    // Inbound: a source, a signed delivery to it.
    const secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
    const source = await call('v1.source.create', {
      body: {
        uid: 'helpdesk',
        scheme: 'standard-webhooks',
        secret,
        app: 'docs',
        eventType: 'ticket.changed',
      },
    });
    assert.equal(source.status, 201);
    const src = { source_id: 'helpdesk' };
    assert.equal((await call('v1.source.list')).status, 200);
    assert.equal((await call('v1.source.get', { params: src })).status, 200);
    assert.equal((await call('v1.source.patch', { params: src, body: { retentionDays: 7 } })).status, 200);
    const raw = '{"ticket":1}';
    const now = new Date();
    const signature = new Webhook(secret.slice('whsec_'.length)).sign('evt_1', now, raw);
    const signed = {
      'content-type': 'application/json',
      'webhook-id': 'evt_1',
      'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
      'webhook-signature': signature,
    };
    const ingest = await call('ingest.receive', {
      params: { source: 'helpdesk' },
      raw,
      headers: signed,
      key: null,
    });
    assert.equal(ingest.status, 204);
    assert.equal((await call('v1.source.delete', { params: src })).status, 204);

    assert.equal((await call('v1.application.delete', { params: { app_id: 'docs' } })).status, 204);
  });

  test('the walk answered every operation with a success', () => {
    const missed = OPERATIONS.map((op: Operation) => op.operationId).filter((id) => !exercised.has(id));
    assert.deepEqual(missed, [], 'operations never exercised with a successful answer');
  });
});

describe('the Svix OSS contract', () => {
  assert.ok(existsSync(SVIX_REFERENCE), `the Svix reference is missing: ${SVIX_REFERENCE}`);
  const svix: Any = JSON.parse(readFileSync(SVIX_REFERENCE, 'utf8'));
  const svixOps: [string, string, Any][] = [];
  for (const [path, item] of Object.entries<Any>(svix.paths)) {
    for (const [method, op] of Object.entries<Any>(item)) {
      assert.ok(METHODS.includes(method), `${path}: unexpected key ${method} (not an operation)`);
      svixOps.push([method, path, op]);
    }
  }
  const idCount = new Map<string, number>();
  for (const [, , op] of svixOps) idCount.set(op.operationId, (idCount.get(op.operationId) ?? 0) + 1);
  const gapsUsed = new Set<string>();
  const requestGap = (key: string, part: string) => {
    for (const entry of [`${key} ${part}`, `* ${part}`]) {
      if (entry in REQUEST_GAPS) {
        gapsUsed.add(entry);
        return true;
      }
    }
    return false;
  };

  test('the reference is the 26-path Svix OSS document', () => {
    assert.equal(Object.keys(svix.paths).length, 26);
    assert.equal(svixOps.length, 43);
  });

  for (const [method, path, svixOp] of svixOps) {
    const key = keyOf(method, path);
    test(key, () => {
      const ours = doc.paths[path]?.[method];
      if (key in MISSING_OPERATIONS) {
        assert.equal(ours, undefined, `${key} is served now: take it off MISSING_OPERATIONS`);
        return;
      }
      assert.ok(ours, `herald does not document ${key}`);

      if (svixOp.operationId && idCount.get(svixOp.operationId) === 1) {
        assert.equal(ours.operationId, svixOp.operationId, 'operationId');
      }

      // The same success answers.
      const svixSuccess = successes(svixOp);
      if (svixSuccess.length === 0) {
        assert.ok(key in SVIX_WITHOUT_SUCCESS, `Svix declares no success for ${key}: list herald's`);
        assert.deepEqual(successes(ours), [String(SVIX_WITHOUT_SUCCESS[key])]);
      } else {
        assert.deepEqual(successes(ours), svixSuccess, 'success status codes');
      }

      // A request Svix's clients send is one herald takes.
      const svixBody = jsonSchemaOf(svixOp.requestBody);
      const ourBody = jsonSchemaOf(ours.requestBody);
      if (ours.requestBody?.required)
        assert.ok(svixOp.requestBody?.required, 'herald requires a body Svix does not');
      if (svixBody) {
        assert.ok(ourBody || requestGap(key, 'body'), 'herald takes no JSON body here');
        const theirs = deref(svix, svixBody);
        const mine = deref(doc, ourBody);
        for (const name of mine.required ?? []) {
          assert.ok(
            (theirs.required ?? []).includes(name),
            `body.${name} is required by herald, not by Svix`,
          );
        }
        for (const [name, prop] of Object.entries<Any>(theirs.properties ?? {})) {
          if (!(name in (mine.properties ?? {}))) {
            assert.ok(requestGap(key, `body.${name}`), `body.${name}: Svix sends it, herald ignores it`);
            continue;
          }
          const want = typesOf(svix, prop);
          const take = typesOf(doc, mine.properties[name]);
          assert.ok(within(want, take), `body.${name}: Svix sends ${[...want]}, herald takes ${[...take]}`);
        }
      }
      for (const where of ['query', 'header', 'path']) {
        const ourNames = paramsOf(ours, where);
        for (const name of paramsOf(svixOp, where)) {
          if (!ourNames.includes(name)) {
            assert.ok(
              requestGap(key, `${where}.${name}`),
              `${where}.${name}: Svix sends it, herald ignores it`,
            );
          }
        }
      }

      // What Svix's clients require of an answer is there.
      for (const status of svixSuccess) {
        const theirs = jsonSchemaOf(svixOp.responses[status]);
        if (!theirs) continue;
        const mine = jsonSchemaOf(ours.responses[status]);
        assert.ok(mine, `${status}: herald documents no JSON answer`);
        const problems = coverRequired(theirs, mine, `${status}`);
        assert.deepEqual(problems, [], `${status}: the answer lacks what Svix requires`);
      }
    });
  }

  /** Svix's required answer fields, present and required in herald's, with compatible types. */
  function coverRequired(theirs: Any, mine: Any, at: string): string[] {
    const t = deref(svix, theirs);
    const m = deref(doc, mine);
    const problems: string[] = [];
    const svixTypes = typesOf(svix, t);
    const ourTypes = typesOf(doc, m);
    if (!within(ourTypes, svixTypes))
      problems.push(`${at}: herald answers ${[...ourTypes]}, Svix expects ${[...svixTypes]}`);
    if (t.type === 'array' && t.items) {
      const items = itemsOf(doc, m);
      if (!items) problems.push(`${at}: not an array in herald's document`);
      else problems.push(...coverRequired(t.items, items, `${at}[]`));
    }
    if (t.properties) {
      const ours = objectOf(doc, m);
      for (const name of t.required ?? []) {
        if (!ours?.properties?.[name]) problems.push(`${at}.${name}: missing`);
        else if (!(ours.required ?? []).includes(name))
          problems.push(`${at}.${name}: not required in herald's`);
      }
      for (const name of Object.keys(t.properties)) {
        if (ours?.properties?.[name])
          problems.push(...coverRequired(t.properties[name], ours.properties[name], `${at}.${name}`));
      }
    }
    return problems;
  }

  test('every listed gap is still a gap', () => {
    const stale = Object.keys(REQUEST_GAPS).filter((entry) => !gapsUsed.has(entry));
    assert.deepEqual(stale, [], 'REQUEST_GAPS lists entries that are no longer gaps: remove them');
  });
});
