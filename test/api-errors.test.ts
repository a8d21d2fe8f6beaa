// Bad input gets a clear error and loses nothing: every rejection answers with a stable `code` and
// a `detail` naming what was wrong (never a stack trace), and leaves every table as it was.

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import { SERVER_URL } from './support/database.ts';
import { ADMIN_KEY, startTestHerald, type TestHerald } from './support/herald.ts';

const MAX_BODY = 2048;
const TABLES = [
  'app',
  'event_type',
  'endpoint',
  'endpoint_secret',
  'message',
  'delivery',
  'attempt',
  'api_key',
  'audit_entry',
] as const;

const EP_URL = 'http://127.0.0.1:9/hook';
const SECRET = `whsec_${randomBytes(24).toString('base64')}`;

interface Answer {
  status: number;
  contentType: string | null;
  text: string;
  // biome-ignore lint/suspicious/noExplicitAny: error bodies are inspected loosely
  body: any;
}

let t: TestHerald;
let readKey: string;
let appId: string;
let endpointId: string;
let messageId: string;

/** A request with full control over body bytes and headers (admin bearer unless overridden). */
async function send(
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string | undefined> = {},
): Promise<Answer> {
  const all: Record<string, string> = {};
  const merged: Record<string, string | undefined> = {
    authorization: `Bearer ${ADMIN_KEY}`,
    ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    ...headers,
  };
  for (const [k, v] of Object.entries(merged)) if (v !== undefined) all[k] = v;
  const response = await fetch(t.url + path, {
    method,
    headers: all,
    body: body === undefined ? null : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await response.text();
  let parsed: unknown = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = undefined;
  }
  return { status: response.status, contentType: response.headers.get('content-type'), text, body: parsed };
}

async function counts(): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const table of TABLES) {
    const result = await t.database.db.query<{ n: number }>(`select count(*)::int as n from ${table}`);
    out[table] = result.rows[0]!.n;
  }
  return out;
}

/** Every error: the status, a stable code, a detail, JSON, and nothing of herald's insides. */
function assertError(answer: Answer, status: number, code: string): void {
  const seen = `${answer.status} ${answer.text}`;
  assert.equal(answer.status, status, seen);
  assert.match(answer.contentType ?? '', /^application\/json/, seen);
  assert.ok(answer.body && typeof answer.body === 'object', `a JSON object body: ${seen}`);
  assert.equal(answer.body.code, code, seen);
  const detail = answer.body.detail;
  assert.ok(
    (typeof detail === 'string' && detail.length > 0) || (Array.isArray(detail) && detail.length > 0),
    `a detail: ${seen}`,
  );
  assert.doesNotMatch(answer.text, /\bat .+\(|\n\s+at /, `no stack lines: ${seen}`);
  assert.doesNotMatch(answer.text, /node_modules|\/src\/|\.ts:\d+|stack/i, `no internals: ${seen}`);
}

/** A validation error that names the offending field, both in `detail[].loc` and in words. */
function assertNames(answer: Answer, loc: string[]): void {
  assertError(answer, 422, 'validation');
  const issues = answer.body.detail as { loc: unknown[]; msg: string; type: string }[];
  assert.ok(Array.isArray(issues), `detail lists the issues: ${answer.text}`);
  assert.ok(
    issues.some((i) => JSON.stringify(i.loc) === JSON.stringify(loc)),
    `an issue at ${JSON.stringify(loc)}: ${answer.text}`,
  );
  for (const issue of issues) {
    assert.ok(
      issue.loc.every((part) => typeof part === 'string'),
      `Svix's loc is a list of strings: ${answer.text}`,
    );
    assert.equal(typeof issue.msg, 'string');
    assert.ok(issue.msg.length > 0);
    assert.equal(typeof issue.type, 'string');
  }
}

/** Runs a rejected request and proves that no table changed. */
async function rejected(request: () => Promise<Answer>): Promise<Answer> {
  const before = await counts();
  const answer = await request();
  assert.deepEqual(await counts(), before, `nothing stored after ${answer.status} ${answer.text}`);
  return answer;
}

before(async () => {
  t = await startTestHerald('api_errors', {
    worker: false,
    env: { HERALD_MAX_BODY_BYTES: String(MAX_BODY) },
  });
  const app = await send('POST', '/api/v1/app', { name: 'Acme', uid: 'acme', metadata: { plan: 'pro' } });
  assert.equal(app.status, 201, app.text);
  appId = app.body.id;
  const other = await send('POST', '/api/v1/app', { name: 'Other', uid: 'other' });
  assert.equal(other.status, 201, other.text);
  const endpoint = await send('POST', '/api/v1/app/acme/endpoint', {
    url: EP_URL,
    uid: 'ep-1',
    secret: SECRET,
  });
  assert.equal(endpoint.status, 201, endpoint.text);
  endpointId = endpoint.body.id;
  const eventType = await send('POST', '/api/v1/event-type', { name: 'invoice.paid', description: 'Paid' });
  assert.equal(eventType.status, 201, eventType.text);
  const message = await send(
    'POST',
    '/api/v1/app/acme/msg',
    { eventType: 'invoice.paid', payload: { n: 1 } },
    { 'idempotency-key': 'invoice-1' },
  );
  assert.equal(message.status, 202, message.text);
  messageId = message.body.id;
  const key = await send('POST', '/api/v1/api-key', { name: 'reader', scopes: ['read'] });
  assert.equal(key.status, 201, key.text);
  readKey = key.body.key;
});

after(async () => {
  await t?.close();
});

describe('validation failures: 422 naming the field, nothing stored', () => {
  const cases: { name: string; method: string; path: string; body: unknown; loc: string[] }[] = [
    { name: 'app without name', method: 'POST', path: '/api/v1/app', body: {}, loc: ['body', 'name'] },
    // Fields of the official SDKs that herald does not do: refused, not dropped.
    {
      name: 'a scheduled message (deliverAt)',
      method: 'POST',
      path: '/api/v1/app/acme/msg',
      body: { eventType: 'invoice.paid', payload: {}, deliverAt: '2030-01-01T00:00:00Z' },
      loc: ['body', 'deliverAt'],
    },
    {
      name: 'a retention in hours',
      method: 'POST',
      path: '/api/v1/app/acme/msg',
      body: { eventType: 'invoice.paid', payload: {}, payloadRetentionHours: 1 },
      loc: ['body', 'payloadRetentionHours'],
    },
    {
      name: "a raw payload (the SDKs' messageInRaw)",
      method: 'POST',
      path: '/api/v1/app/acme/msg',
      body: { eventType: 'invoice.paid', payload: {}, transformationsParams: { rawPayload: 'a,b' } },
      loc: ['body', 'transformationsParams'],
    },
    {
      name: 'a secret set by PATCH',
      method: 'PATCH',
      path: '/api/v1/app/acme/endpoint/ep-1',
      body: { secret: `whsec_${'A'.repeat(32)}` },
      loc: ['body', 'secret'],
    },
    {
      name: 'app with empty name',
      method: 'POST',
      path: '/api/v1/app',
      body: { name: '' },
      loc: ['body', 'name'],
    },
    {
      name: 'app uid with a space',
      method: 'POST',
      path: '/api/v1/app',
      body: { name: 'x', uid: 'has space' },
      loc: ['body', 'uid'],
    },
    {
      name: 'app name with NUL',
      method: 'POST',
      path: '/api/v1/app',
      body: { name: 'a\u0000b' },
      loc: ['body', 'name'],
    },
    {
      name: 'app metadata value not a string',
      method: 'POST',
      path: '/api/v1/app',
      body: { name: 'x', metadata: { plan: 3 } },
      loc: ['body', 'metadata', 'plan'],
    },
    {
      name: 'app metadata value with NUL',
      method: 'POST',
      path: '/api/v1/app',
      body: { name: 'x', metadata: { plan: 'a\u0000' } },
      loc: ['body', 'metadata', 'plan'],
    },
    {
      name: 'app metadata value with a lone UTF-16 surrogate (jsonb refuses it)',
      method: 'POST',
      path: '/api/v1/app',
      body: { name: 'x', metadata: { plan: 'a\ud800' } },
      loc: ['body', 'metadata', 'plan'],
    },
    {
      name: 'app name with a lone UTF-16 surrogate (text would keep U+FFFD instead)',
      method: 'POST',
      path: '/api/v1/app',
      body: { name: '\udfff' },
      loc: ['body', 'name'],
    },
    {
      name: 'endpoint metadata key with a lone UTF-16 surrogate',
      method: 'POST',
      path: '/api/v1/app/acme/endpoint',
      body: { url: EP_URL, metadata: { '\ud800': 'v' } },
      loc: ['body', 'metadata', '\ud800'],
    },
    {
      name: 'event type schema with a lone UTF-16 surrogate',
      method: 'POST',
      path: '/api/v1/event-type',
      body: { name: 'surrogate.schema', description: 'x', schemas: { '1': { title: '\ud800' } } },
      loc: ['body', 'schemas'],
    },
    {
      name: 'app throttleRate out of range',
      method: 'POST',
      path: '/api/v1/app',
      body: { name: 'x', throttleRate: 70_000 },
      loc: ['body', 'throttleRate'],
    },
    {
      name: 'PUT creating an app under a path that is no uid',
      method: 'PUT',
      path: '/api/v1/app/has%20space',
      body: { name: 'x' },
      loc: ['path', 'app_id'],
    },
    {
      name: 'endpoint with ftp url',
      method: 'POST',
      path: '/api/v1/app/acme/endpoint',
      body: { url: 'ftp://x' },
      loc: ['body', 'url'],
    },
    {
      name: 'endpoint url that is no url',
      method: 'POST',
      path: '/api/v1/app/acme/endpoint',
      body: { url: 'not a url' },
      loc: ['body', 'url'],
    },
    {
      name: 'endpoint url in a private range',
      method: 'POST',
      path: '/api/v1/app/acme/endpoint',
      body: { url: 'http://10.1.2.3/hook' },
      loc: ['body', 'url'],
    },
    {
      name: 'endpoint url at the cloud metadata address',
      method: 'POST',
      path: '/api/v1/app/acme/endpoint',
      body: { url: 'http://169.254.169.254/latest/meta-data' },
      loc: ['body', 'url'],
    },
    {
      name: 'endpoint missing url',
      method: 'POST',
      path: '/api/v1/app/acme/endpoint',
      body: { description: 'x' },
      loc: ['body', 'url'],
    },
    {
      name: 'endpoint channel with bad characters',
      method: 'POST',
      path: '/api/v1/app/acme/endpoint',
      body: { url: EP_URL, channels: ['ok', 'not ok!'] },
      loc: ['body', 'channels', '1'],
    },
    {
      name: 'endpoint with eleven channels',
      method: 'POST',
      path: '/api/v1/app/acme/endpoint',
      body: { url: EP_URL, channels: Array.from({ length: 11 }, (_, i) => `c${i}`) },
      loc: ['body', 'channels'],
    },
    {
      name: 'endpoint with empty filterTypes',
      method: 'POST',
      path: '/api/v1/app/acme/endpoint',
      body: { url: EP_URL, filterTypes: [] },
      loc: ['body', 'filterTypes'],
    },
    {
      name: 'endpoint secret too short',
      method: 'POST',
      path: '/api/v1/app/acme/endpoint',
      body: { url: EP_URL, secret: 'whsec_abc' },
      loc: ['body', 'secret'],
    },
    {
      // Matches Svix's pattern, but is not canonical base64: no worker could sign with it.
      name: 'endpoint secret that is not canonical base64',
      method: 'POST',
      path: '/api/v1/app/acme/endpoint',
      body: { url: EP_URL, secret: `whsec_${'A'.repeat(33)}` },
      loc: ['body', 'secret'],
    },
    {
      name: 'endpoint version beyond a PostgreSQL int',
      method: 'POST',
      path: '/api/v1/app/acme/endpoint',
      body: { url: EP_URL, version: 3_000_000_000 },
      loc: ['body', 'version'],
    },
    {
      name: 'endpoint description with NUL',
      method: 'POST',
      path: '/api/v1/app/acme/endpoint',
      body: { url: EP_URL, description: 'a\u0000' },
      loc: ['body', 'description'],
    },
    {
      name: 'endpoint created with a webhook-id header',
      method: 'POST',
      path: '/api/v1/app/acme/endpoint',
      body: { url: EP_URL, headers: { 'webhook-id': 'forged' } },
      loc: ['body', 'headers', 'webhook-id'],
    },
    {
      name: 'endpoint created with a CRLF in a header value',
      method: 'POST',
      path: '/api/v1/app/acme/endpoint',
      body: { url: EP_URL, headers: { 'x-tenant': 'a\r\nx-injected: 1' } },
      loc: ['body', 'headers', 'x-tenant'],
    },
    {
      name: 'endpoint created with a header value the HTTP client cannot send (beyond Latin-1)',
      method: 'POST',
      path: '/api/v1/app/acme/endpoint',
      body: { url: EP_URL, headers: { 'x-note': 'costs 5€' } },
      loc: ['body', 'headers', 'x-note'],
    },
    {
      name: 'endpoint headers patched with a control character in a value',
      method: 'PATCH',
      path: '/api/v1/app/acme/endpoint/ep-1/headers',
      body: { headers: { 'x-note': 'a\u0007b' } },
      loc: ['body', 'headers', 'x-note'],
    },
    {
      name: 'endpoint update with ftp url',
      method: 'PUT',
      path: '/api/v1/app/acme/endpoint/ep-1',
      body: { url: 'ftp://x' },
      loc: ['body', 'url'],
    },
    {
      name: 'endpoint patch with bad channel',
      method: 'PATCH',
      path: '/api/v1/app/acme/endpoint/ep-1',
      body: { channels: ['a/b'] },
      loc: ['body', 'channels', '0'],
    },
    {
      // An empty filter would match nothing and leave the endpoint deaf; null removes a filter.
      name: 'endpoint patch with empty filterTypes',
      method: 'PATCH',
      path: '/api/v1/app/acme/endpoint/ep-1',
      body: { filterTypes: [] },
      loc: ['body', 'filterTypes'],
    },
    {
      name: 'endpoint patch with empty channels',
      method: 'PATCH',
      path: '/api/v1/app/acme/endpoint/ep-1',
      body: { channels: [] },
      loc: ['body', 'channels'],
    },
    {
      name: 'message without eventType',
      method: 'POST',
      path: '/api/v1/app/acme/msg',
      body: { payload: { a: 1 } },
      loc: ['body', 'eventType'],
    },
    {
      name: 'message eventType with bad characters',
      method: 'POST',
      path: '/api/v1/app/acme/msg',
      body: { eventType: 'invoice paid', payload: {} },
      loc: ['body', 'eventType'],
    },
    {
      name: 'message without payload',
      method: 'POST',
      path: '/api/v1/app/acme/msg',
      body: { eventType: 'invoice.paid' },
      loc: ['body', 'payload'],
    },
    {
      name: 'message payload that is an array',
      method: 'POST',
      path: '/api/v1/app/acme/msg',
      body: { eventType: 'invoice.paid', payload: [1, 2] },
      loc: ['body', 'payload'],
    },
    {
      name: 'message channel with bad characters',
      method: 'POST',
      path: '/api/v1/app/acme/msg',
      body: { eventType: 'invoice.paid', payload: {}, channels: ['eu/west'] },
      loc: ['body', 'channels', '0'],
    },
    {
      name: 'message with six channels',
      method: 'POST',
      path: '/api/v1/app/acme/msg',
      body: { eventType: 'invoice.paid', payload: {}, channels: ['a', 'b', 'c', 'd', 'e', 'f'] },
      loc: ['body', 'channels'],
    },
    {
      name: 'message retention beyond 90 days',
      method: 'POST',
      path: '/api/v1/app/acme/msg',
      body: { eventType: 'invoice.paid', payload: {}, payloadRetentionPeriod: 365 },
      loc: ['body', 'payloadRetentionPeriod'],
    },
    {
      name: 'message retention under 5 days (the contract’s minimum)',
      method: 'POST',
      path: '/api/v1/app/acme/msg',
      body: { eventType: 'invoice.paid', payload: {}, payloadRetentionPeriod: 4 },
      loc: ['body', 'payloadRetentionPeriod'],
    },
    {
      name: 'event type name with a space',
      method: 'POST',
      path: '/api/v1/event-type',
      body: { name: 'invoice voided', description: 'x' },
      loc: ['body', 'name'],
    },
    {
      name: 'event type without description',
      method: 'POST',
      path: '/api/v1/event-type',
      body: { name: 'invoice.voided' },
      loc: ['body', 'description'],
    },
    {
      name: 'event type schema with NUL',
      method: 'POST',
      path: '/api/v1/event-type',
      body: { name: 'invoice.voided', description: 'x', schemas: { '1': { title: 'a\u0000' } } },
      loc: ['body', 'schemas'],
    },
    {
      name: 'source business key with NUL',
      method: 'POST',
      path: '/api/v1/source',
      body: {
        scheme: 'github',
        secret: 'gh-secret-1',
        app: 'acme',
        eventType: 'push',
        businessKey: 'a\u0000',
      },
      loc: ['body', 'businessKey'],
    },
    {
      name: 'source settings with NUL',
      method: 'POST',
      path: '/api/v1/source',
      body: { scheme: 'gcp-pubsub', settings: { audience: 'a\u0000' }, app: 'acme', eventType: 'push' },
      loc: ['body', 'settings'],
    },
    {
      name: 'endpoint with filterTypes and eventTypes that differ',
      method: 'POST',
      path: '/api/v1/app/acme/endpoint',
      body: { url: EP_URL, eventTypes: ['a.b'], filterTypes: ['a.c'] },
      loc: ['body', 'eventTypes'],
    },
    {
      name: 'endpoint PATCH with filterTypes and eventTypes that differ',
      method: 'PATCH',
      path: '/api/v1/app/acme/endpoint/ep-1',
      body: { eventTypes: ['a.b'], filterTypes: null },
      loc: ['body', 'eventTypes'],
    },
    // A uid that begins as the kind's ids do could name another object: refused, as Svix does.
    ...(
      [
        ['an app uid that begins as app ids do', 'POST', '/api/v1/app', { name: 'x', uid: 'app_2a' }, 'uid'],
        ['an app renamed to such a uid', 'PATCH', '/api/v1/app/acme', { uid: 'app_2a' }, 'uid'],
        [
          'an endpoint uid that begins as endpoint ids do',
          'POST',
          '/api/v1/app/acme/endpoint',
          { url: EP_URL, uid: 'ep_2a' },
          'uid',
        ],
        [
          'an event id that begins as message ids do',
          'POST',
          '/api/v1/app/acme/msg',
          { eventType: 'invoice.paid', payload: {}, eventId: 'msg_2a' },
          'eventId',
        ],
        [
          'a source uid that begins as source ids do',
          'POST',
          '/api/v1/source',
          { uid: 'src_2a', scheme: 'github', secret: 'gh-secret-1', app: 'acme', eventType: 'push' },
          'uid',
        ],
        // throttleRate under both its names, two rates: which one was meant is not said.
        [
          'an app with two rates',
          'POST',
          '/api/v1/app',
          { name: 'x', rateLimit: 3, throttleRate: 4 },
          'rateLimit',
        ],
        [
          'an app PUT with two rates',
          'PUT',
          '/api/v1/app/acme',
          { name: 'x', rateLimit: 3, throttleRate: 4 },
          'rateLimit',
        ],
        [
          'an endpoint with two rates',
          'POST',
          '/api/v1/app/acme/endpoint',
          { url: EP_URL, rateLimit: 8, throttleRate: 9 },
          'rateLimit',
        ],
        [
          'an endpoint PATCH with two rates',
          'PATCH',
          '/api/v1/app/acme/endpoint/ep-1',
          { rateLimit: 0, throttleRate: 9 },
          'rateLimit',
        ],
        // A PUT creates under the path's uid: one in the body that differs would put the object
        // elsewhere, and the same PUT again would try to create it again.
        [
          'PUT creating an app with another uid in the body',
          'PUT',
          '/api/v1/app/putx',
          { name: 'x', uid: 'puty' },
          'uid',
        ],
        [
          'PUT creating an endpoint with another uid in the body',
          'PUT',
          '/api/v1/app/acme/endpoint/epx',
          { url: EP_URL, uid: 'epy' },
          'uid',
        ],
      ] as const
    ).map(([name, method, path, body, field]) => ({ name, method, path, body, loc: ['body', field] })),
    {
      name: 'endpoint stats until before since',
      method: 'GET',
      path: '/api/v1/app/acme/endpoint/ep-1/stats?since=2030-01-01T00:00:00Z&until=2020-01-01T00:00:00Z',
      body: undefined,
      loc: ['query', 'until'],
    },
    {
      name: 'source overlap without a new secret (it would revoke nothing)',
      method: 'PATCH',
      path: '/api/v1/source/billing',
      body: { secretOverlapSeconds: 0 },
      loc: ['body', 'secretOverlapSeconds'],
    },
    {
      name: 'headers: webhook-id is herald’s',
      method: 'PUT',
      path: '/api/v1/app/acme/endpoint/ep-1/headers',
      body: { headers: { 'webhook-id': 'forged' } },
      loc: ['body', 'headers', 'webhook-id'],
    },
    {
      name: 'headers: Webhook-Signature in any case',
      method: 'PUT',
      path: '/api/v1/app/acme/endpoint/ep-1/headers',
      body: { headers: { 'Webhook-Signature': 'v1,forged' } },
      loc: ['body', 'headers', 'Webhook-Signature'],
    },
    {
      name: 'headers: CRLF in a value',
      method: 'PUT',
      path: '/api/v1/app/acme/endpoint/ep-1/headers',
      body: { headers: { 'x-tenant': 'acme\r\nx-injected: 1' } },
      loc: ['body', 'headers', 'x-tenant'],
    },
    {
      name: 'headers: more than 64',
      method: 'PUT',
      path: '/api/v1/app/acme/endpoint/ep-1/headers',
      body: { headers: Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`x-h${i}`, 'v'])) },
      loc: ['body', 'headers'],
    },
    {
      name: 'headers: CRLF in a patched value',
      method: 'PATCH',
      path: '/api/v1/app/acme/endpoint/ep-1/headers',
      body: { headers: { 'x-tenant': 'acme\nx-injected: 1' } },
      loc: ['body', 'headers', 'x-tenant'],
    },
    {
      name: 'headers: a name that is no token',
      method: 'PUT',
      path: '/api/v1/app/acme/endpoint/ep-1/headers',
      body: { headers: { 'x tenant': 'acme' } },
      loc: ['body', 'headers', 'x tenant'],
    },
    {
      name: 'headers: host is reserved',
      method: 'PATCH',
      path: '/api/v1/app/acme/endpoint/ep-1/headers',
      body: { headers: { host: 'evil.example' } },
      loc: ['body', 'headers', 'host'],
    },
    {
      name: 'recover since that is no date',
      method: 'POST',
      path: '/api/v1/app/acme/endpoint/ep-1/recover',
      body: { since: 'yesterday' },
      loc: ['body', 'since'],
    },
    {
      name: 'recover until before since',
      method: 'POST',
      path: '/api/v1/app/acme/endpoint/ep-1/recover',
      body: { since: '2026-11-02T00:00:00Z', until: '2026-11-01T00:00:00Z' },
      loc: ['body', 'until'],
    },
    {
      name: 'replay until before since',
      method: 'POST',
      path: '/api/v1/replay',
      body: { status: 'failed', cap: 10, since: '2026-11-02T00:00:00Z', until: '2026-11-01T00:00:00Z' },
      loc: ['body', 'until'],
    },
    {
      name: 'replay-missing until where since is (an empty window)',
      method: 'POST',
      path: '/api/v1/app/acme/endpoint/ep-1/replay-missing',
      body: { since: '2026-11-01T00:00:00+01:00', until: '2026-10-31T23:00:00Z' },
      loc: ['body', 'until'],
    },
    {
      name: 'rotate to a key that is no secret',
      method: 'POST',
      path: '/api/v1/app/acme/endpoint/ep-1/secret/rotate',
      body: { key: 'not-a-secret' },
      loc: ['body', 'key'],
    },
    {
      name: 'api key with an unknown scope',
      method: 'POST',
      path: '/api/v1/api-key',
      body: { name: 'k', scopes: ['root'] },
      loc: ['body', 'scopes', '0'],
    },
    { name: 'limit=0', method: 'GET', path: '/api/v1/app?limit=0', body: undefined, loc: ['query', 'limit'] },
    {
      name: 'limit above 250',
      method: 'GET',
      path: '/api/v1/app/acme/msg?limit=251',
      body: undefined,
      loc: ['query', 'limit'],
    },
    {
      name: 'limit that is no number',
      method: 'GET',
      path: '/api/v1/event-type?limit=ten',
      body: undefined,
      loc: ['query', 'limit'],
    },
    {
      name: 'order that is no order',
      method: 'GET',
      path: '/api/v1/app?order=sideways',
      body: undefined,
      loc: ['query', 'order'],
    },
    {
      name: 'before that is no date',
      method: 'GET',
      path: '/api/v1/app/acme/msg?before=yesterday',
      body: undefined,
      loc: ['query', 'before'],
    },
    {
      name: 'with_content that is no boolean, on a publish',
      method: 'POST',
      path: '/api/v1/app/acme/msg?with_content=maybe',
      body: { eventType: 'not.published', payload: {} },
      loc: ['query', 'with_content'],
    },
    {
      name: 'with_content that is no boolean, on a message',
      method: 'GET',
      path: '/api/v1/app/acme/msg/msg_00000000000000000000000000?with_content=0',
      body: undefined,
      loc: ['query', 'with_content'],
    },
    {
      name: 'get_if_exists that is no boolean',
      method: 'POST',
      path: '/api/v1/app?get_if_exists=yes',
      body: { name: 'not created' },
      loc: ['query', 'get_if_exists'],
    },
    {
      name: 'expunge that is no boolean (it must not archive instead)',
      method: 'DELETE',
      path: '/api/v1/event-type/invoice.paid?expunge=1',
      body: undefined,
      loc: ['query', 'expunge'],
    },
    {
      name: 'attempt status out of range',
      method: 'GET',
      path: '/api/v1/app/acme/attempt/endpoint/ep-1?status=9',
      body: undefined,
      loc: ['query', 'status'],
    },
    // Filters no message can match, and iterators no page gave: mistakes, not empty pages.
    ...(
      [
        ['a channel no message can carry', '/api/v1/app/acme/msg?channel=a%20b', 'channel'],
        ['an empty channel', '/api/v1/app/acme/msg?channel=', 'channel'],
        ['a tag no message can carry', '/api/v1/app/acme/attempt/endpoint/ep-1?tag=a%2Fb', 'tag'],
        [
          'an event type no event type can be named',
          '/api/v1/app/acme/msg?event_types=ok,a%20b',
          'event_types.1',
        ],
        ['an event type in a list', '/api/v1/app/acme/endpoint/ep-1/msg?event_types[]=a!', 'event_types.0'],
        ['a garbage iterator', '/api/v1/app?iterator=garbage!!', 'iterator'],
        [
          'an iterator of another list',
          '/api/v1/app/acme/msg?iterator=app_0190abcdef0123456789abcdef012345',
          'iterator',
        ],
        ['an iterator of its kind, mangled', '/api/v1/app/acme/endpoint?iterator=ep_garbage', 'iterator'],
        [
          'an attempt iterator with a stray prefix',
          '/api/v1/app/acme/attempt/endpoint/ep-1?iterator=~atmpt_0190abcdef01',
          'iterator',
        ],
        ['an event type iterator past 256', `/api/v1/event-type?iterator=${'a'.repeat(257)}`, 'iterator'],
      ] as const
    ).map(([name, path, field]) => ({
      name,
      method: 'GET',
      path,
      body: undefined,
      loc: ['query', ...field.split('.')],
    })),
  ];

  for (const c of cases) {
    test(c.name, async () => {
      const answer = await rejected(() => send(c.method, c.path, c.body));
      assertNames(answer, c.loc);
    });
  }

  test('the detail says in words which field is wrong', async () => {
    const answer = await rejected(() => send('POST', '/api/v1/app', {}));
    assertNames(answer, ['body', 'name']);
    assert.deepEqual(answer.body.detail[0].loc, ['body', 'name']);
    const url = await rejected(() => send('POST', '/api/v1/app/acme/endpoint', { url: 'ftp://x' }));
    assert.match(url.body.detail[0].msg, /scheme/i);
  });

  test('the iterators pages give are taken back: forward, back (`-`), and a name walked forward (`~`)', async () => {
    const apps = await send('GET', '/api/v1/app?limit=1');
    assert.equal(apps.status, 200);
    for (const iterator of [apps.body.iterator, apps.body.prevIterator, '']) {
      const page = await send('GET', `/api/v1/app?limit=1&iterator=${encodeURIComponent(iterator)}`);
      assert.equal(page.status, 200, `iterator ${iterator}: ${page.text}`);
    }
    const messages = await send('GET', '/api/v1/app/acme/msg?limit=1');
    assert.equal(
      (await send('GET', `/api/v1/app/acme/msg?iterator=${messages.body.prevIterator}`)).status,
      200,
    );
    for (const iterator of ['~-starts-with-a-dash', '-invoice.paid', 'invoice.paid', `-${'a'.repeat(256)}`]) {
      const page = await send('GET', `/api/v1/event-type?iterator=${encodeURIComponent(iterator)}`);
      assert.equal(page.status, 200, `iterator ${iterator}: ${page.text}`);
    }
  });

  test('a NUL in a query or path value is a 422 naming it, not a database error', async () => {
    assertNames(await rejected(() => send('GET', '/api/v1/app?iterator=%00')), ['query', 'iterator']);
    assertNames(await rejected(() => send('GET', '/api/v1/app/a%00b')), ['path', 'app_id']);
  });

  test('a rejected update leaves the object as it was', async () => {
    const before = await send('GET', '/api/v1/app/acme');
    assertNames(await rejected(() => send('PATCH', '/api/v1/app/acme', { name: '' })), ['body', 'name']);
    assertNames(await rejected(() => send('PUT', '/api/v1/app/acme', { uid: 'acme' })), ['body', 'name']);
    const afterwards = await send('GET', '/api/v1/app/acme');
    assert.deepEqual(afterwards.body, before.body);

    const endpointBefore = await send('GET', '/api/v1/app/acme/endpoint/ep-1');
    const headersBefore = await send('GET', '/api/v1/app/acme/endpoint/ep-1/headers');
    await rejected(() => send('PATCH', '/api/v1/app/acme/endpoint/ep-1', { url: 'http://10.0.0.1/' }));
    await rejected(() =>
      send('PUT', '/api/v1/app/acme/endpoint/ep-1/headers', { headers: { ok: 'fine', 'webhook-id': 'x' } }),
    );
    assert.deepEqual((await send('GET', '/api/v1/app/acme/endpoint/ep-1')).body, endpointBefore.body);
    assert.deepEqual((await send('GET', '/api/v1/app/acme/endpoint/ep-1/headers')).body, headersBefore.body);

    await rejected(() =>
      send('POST', '/api/v1/app/acme/endpoint/ep-1/secret/rotate', { key: `whsec_${'A'.repeat(33)}` }),
    );
    assert.deepEqual((await send('GET', '/api/v1/app/acme/endpoint/ep-1/secret')).body, { key: SECRET });
  });
});

describe('malformed requests', () => {
  test('a path that is not valid percent-encoded UTF-8 → 400 in the catalogue’s shape', async () => {
    assertError(await rejected(() => send('GET', '/api/v1/app/%E0%A4%A')), 400, 'bad_request');
  });

  test('a 256-character uid, as bodies accept, addresses its object', async () => {
    const uid = `u${'x'.repeat(255)}`;
    const created = await send('POST', '/api/v1/app', { name: 'long uid', uid });
    assert.equal(created.status, 201);
    const found = await send('GET', `/api/v1/app/${uid}`);
    assert.equal(found.status, 200);
    assert.equal(found.body.id, created.body.id);
    assert.equal((await send('DELETE', `/api/v1/app/${uid}`)).status, 204);
  });

  test('an id, uid or name no object can have is refused by name on every route, not looked up', async () => {
    const long = 'x'.repeat(257);
    const cases: [string, string, string][] = [
      ['GET', '/api/v1/app/bad%20id', 'app_id'],
      ['DELETE', `/api/v1/app/${long}`, 'app_id'],
      ['POST', `/api/v1/app/${long}/msg`, 'app_id'],
      ['GET', `/api/v1/app/acme/endpoint/${long}`, 'endpoint_id'],
      ['PATCH', '/api/v1/app/acme/endpoint/ep%2F1', 'endpoint_id'],
      ['GET', '/api/v1/app/acme/msg/caf%C3%A9', 'msg_id'],
      ['GET', `/api/v1/app/acme/msg/${messageId}/attempt/a%20b`, 'attempt_id'],
      ['GET', '/api/v1/event-type/bad%20name', 'event_type_name'],
      ['DELETE', '/api/v1/api-key/k%3B1', 'key_id'],
      ['GET', '/api/v1/source/s%20rc', 'source_id'],
    ];
    for (const [method, path, param] of cases) {
      const body = method === 'POST' ? { eventType: 'a', payload: {} } : method === 'PATCH' ? {} : undefined;
      assertNames(await rejected(() => send(method, path, body)), ['path', param]);
    }
    // Inbound paths are the sender's to choose: an unknown one is not found, as before.
    const ingest = await fetch(`${t.url}/ingest/bad%20id`, { method: 'POST', body: '{}' });
    assert.equal(ingest.status, 404);
  });

  test('a payload nested past 128 levels is refused naming it, a body past 256 before it is parsed; 128 is taken', async () => {
    const nested = (depth: number) => `${'['.repeat(depth - 1)}${']'.repeat(depth - 1)}`;
    // The payload object is one level: 127 arrays inside it make 128.
    const deepest = await send(
      'POST',
      '/api/v1/app/acme/msg',
      `{"eventType":"deep","payload":{"a":${nested(128)}}}`,
    );
    assert.equal(deepest.status, 202, deepest.text);
    assertNames(
      await rejected(() =>
        send('POST', '/api/v1/app/acme/msg', `{"eventType":"deep","payload":{"a":${nested(129)}}}`),
      ),
      ['body', 'payload'],
    );
    // Past 256: refused before any parser or check walks it (those recurse as deep as it nests).
    assertNames(
      await rejected(() =>
        send('POST', '/api/v1/app/acme/msg', `{"eventType":"deep","payload":{"a":${nested(600)}}}`),
      ),
      ['body'],
    );
    assertNames(
      await rejected(() =>
        send(
          'POST',
          '/api/v1/event-type',
          `{"name":"deep","description":"x","schemas":{"1":${nested(800)}}}`,
        ),
      ),
      ['body'],
    );
    // The app's message list still reads.
    const list = await send('GET', '/api/v1/app/acme/msg?limit=5');
    assert.equal(list.status, 200, list.text);
  });

  test('malformed JSON → 400', async () => {
    assertError(await rejected(() => send('POST', '/api/v1/app', '{"name": "x"')), 400, 'bad_request');
    assertError(
      await rejected(() => send('POST', '/api/v1/app/acme/msg', '{"eventType": "a", payload: {}}')),
      400,
      'bad_request',
    );
  });

  test('an empty body sent as JSON is no body: 422 naming it where one is needed, fine where none is', async () => {
    assertNames(await rejected(() => send('POST', '/api/v1/app', '')), ['body']);
    // Blank is not empty: that is malformed JSON.
    assertError(await rejected(() => send('POST', '/api/v1/app', ' ')), 400, 'bad_request');
    // Some clients send the header on every request, a DELETE's too.
    const created = await send('POST', '/api/v1/event-type', { name: 'empty.body', description: 'x' });
    assert.equal(created.status, 201, created.text);
    const deleted = await send('DELETE', '/api/v1/event-type/empty.body', '');
    assert.equal(deleted.status, 204, deleted.text);
  });

  test('a body with __proto__ or constructor.prototype is refused, and said so: it is no malformed JSON', async () => {
    for (const [path, body] of [
      ['/api/v1/app', '{"name":"x","__proto__":{"admin":true}}'],
      ['/api/v1/app/acme/msg', '{"eventType":"a","payload":{"order":{"constructor":{"prototype":{"x":1}}}}}'],
    ] as const) {
      const answer = await rejected(() => send('POST', path, body));
      assertError(answer, 400, 'bad_request');
      assert.match(answer.body.detail, /holds a "__proto__" or "constructor"/, body);
    }
  });

  test('wrong content-type → 415', async () => {
    const json = JSON.stringify({ name: 'x' });
    for (const type of ['text/plain', 'application/x-www-form-urlencoded', 'application/xml']) {
      const answer = await rejected(() => send('POST', '/api/v1/app', json, { 'content-type': type }));
      assertError(answer, 415, 'unsupported_media_type');
    }
    const msg = JSON.stringify({ eventType: 'invoice.paid', payload: {} });
    assertError(
      await rejected(() => send('POST', '/api/v1/app/acme/msg', msg, { 'content-type': 'text/plain' })),
      415,
      'unsupported_media_type',
    );
  });

  test('JSON with a charset is fine', async () => {
    const answer = await send('GET', '/api/v1/app/acme');
    assert.equal(answer.status, 200);
    const created = await send(
      'POST',
      '/api/v1/event-type',
      JSON.stringify({ name: 'cs.ok', description: 'x' }),
      {
        'content-type': 'application/json; charset=utf-8',
      },
    );
    assert.equal(created.status, 201, created.text);
  });

  test(`a body over HERALD_MAX_BODY_BYTES (${MAX_BODY}) → 413`, async () => {
    const big = { eventType: 'invoice.paid', payload: { blob: 'x'.repeat(MAX_BODY + 1) } };
    assert.ok(JSON.stringify(big).length > MAX_BODY);
    assertError(await rejected(() => send('POST', '/api/v1/app/acme/msg', big)), 413, 'payload_too_large');
    assertError(
      await rejected(() => send('POST', '/api/v1/app', { name: 'y'.repeat(MAX_BODY * 4) })),
      413,
      'payload_too_large',
    );
    // Just under the limit is accepted.
    const fits = { eventType: 'invoice.paid', payload: { blob: 'x'.repeat(MAX_BODY - 100) } };
    assert.ok(JSON.stringify(fits).length <= MAX_BODY);
    const accepted = await send('POST', '/api/v1/app/other/msg', fits);
    assert.equal(accepted.status, 202, accepted.text);
  });
});

describe('not found: 404 with code not_found', () => {
  const cases: [string, string, string, unknown?][] = [
    ['unknown app', 'GET', '/api/v1/app/app_doesnotexist'],
    ['unknown app by uid', 'GET', '/api/v1/app/nobody'],
    ['patch of an unknown app', 'PATCH', '/api/v1/app/nobody', { name: 'x' }],
    ['delete of an unknown app', 'DELETE', '/api/v1/app/nobody'],
    [
      'publish to an unknown app',
      'POST',
      '/api/v1/app/nobody/msg',
      { eventType: 'invoice.paid', payload: {} },
    ],
    ['endpoints of an unknown app', 'GET', '/api/v1/app/nobody/endpoint'],
    ['unknown endpoint', 'GET', '/api/v1/app/acme/endpoint/ep_doesnotexist'],
    ['patch of an unknown endpoint', 'PATCH', '/api/v1/app/acme/endpoint/nope', { description: 'x' }],
    ['secret of an unknown endpoint', 'GET', '/api/v1/app/acme/endpoint/nope/secret'],
    ['headers of an unknown endpoint', 'PUT', '/api/v1/app/acme/endpoint/nope/headers', { headers: {} }],
    ['an endpoint of another app', 'GET', '/api/v1/app/other/endpoint/ep-1'],
    ['unknown message', 'GET', '/api/v1/app/acme/msg/msg_doesnotexist'],
    ['attempts of an unknown message', 'GET', '/api/v1/app/acme/attempt/msg/msg_doesnotexist'],
    ['resend of an unknown message', 'POST', '/api/v1/app/acme/msg/msg_doesnotexist/endpoint/ep-1/resend'],
    ['unknown event type', 'GET', '/api/v1/event-type/no.such.type'],
    ['unknown route under /api/v1', 'GET', '/api/v1/nope'],
    ['unknown route elsewhere', 'GET', '/nope'],
    ['a method the route does not have', 'DELETE', '/api/v1/app'],
    ['an identifier longer than any herald accepts', 'GET', `/api/v1/app/${'a'.repeat(4000)}`],
    // An id that names nothing is no uid to create under (no uid may begin as ids do).
    ['PUT to an app id that names nothing', 'PUT', '/api/v1/app/app_2a', { name: 'x' }],
    ['PUT to an endpoint id that names nothing', 'PUT', '/api/v1/app/acme/endpoint/ep_2a', { url: EP_URL }],
    [
      'publish creating its app under an app id that names nothing',
      'POST',
      '/api/v1/app/app_2a/msg',
      { eventType: 'invoice.paid', payload: {}, application: { name: 'x' } },
    ],
  ];
  for (const [name, method, path, body] of cases) {
    test(name, async () => {
      assertError(await rejected(() => send(method, path, body)), 404, 'not_found');
    });
  }

  test('a message of one app is not found through another', async () => {
    assertError(await rejected(() => send('GET', `/api/v1/app/other/msg/${messageId}`)), 404, 'not_found');
    assertError(
      await rejected(() => send('POST', `/api/v1/app/acme/msg/${messageId}/endpoint/ep_nope/resend`)),
      404,
      'not_found',
    );
    assertError(
      await rejected(() => send('GET', `/api/v1/app/acme/msg/${messageId}/attempt/atmpt_nope`)),
      404,
      'not_found',
    );
  });
});

describe('authentication and scopes', () => {
  const createApp = { name: 'Sneaky', uid: 'sneaky' };

  test('missing bearer → 401, before anything else is looked at', async () => {
    for (const [method, path, body] of [
      ['POST', '/api/v1/app', createApp],
      ['GET', '/api/v1/app/nobody', undefined],
      ['POST', '/api/v1/app/acme/msg', { eventType: 'invoice.paid', payload: {} }],
      ['GET', '/api/v1/app/acme/endpoint/ep-1/secret', undefined],
    ] as const) {
      const answer = await rejected(() => send(method, path, body, { authorization: undefined }));
      assertError(answer, 401, 'authentication_failed');
    }
  });

  test('wrong bearer → 401', async () => {
    for (const authorization of [
      'Bearer wrong-key',
      `Bearer ${ADMIN_KEY}x`,
      `Basic ${ADMIN_KEY}`,
      'Bearer',
    ]) {
      const answer = await rejected(() => send('POST', '/api/v1/app', createApp, { authorization }));
      assertError(answer, 401, 'authentication_failed');
    }
    assert.doesNotMatch(
      (await send('GET', '/api/v1/app', undefined, { authorization: 'Bearer wrong' })).text,
      new RegExp(ADMIN_KEY),
    );
  });

  test('a read-only key cannot write → 403', async () => {
    const headers = { authorization: `Bearer ${readKey}` };
    assert.equal((await send('GET', '/api/v1/app/acme', undefined, headers)).status, 200);
    assertError(
      await rejected(() => send('POST', '/api/v1/app', createApp, headers)),
      403,
      'insufficient_access',
    );
    assertError(
      await rejected(() =>
        send('POST', '/api/v1/app/acme/msg', { eventType: 'invoice.paid', payload: {} }, headers),
      ),
      403,
      'insufficient_access',
    );
    assertError(
      await rejected(() => send('GET', '/api/v1/app/acme/endpoint/ep-1/secret', undefined, headers)),
      403,
      'insufficient_access',
    );
  });
});

describe('conflicts: 409', () => {
  test('duplicate app uid', async () => {
    assertError(
      await rejected(() => send('POST', '/api/v1/app', { name: 'Again', uid: 'acme' })),
      409,
      'conflict',
    );
  });

  test('changing an app to a uid that is taken', async () => {
    assertError(await rejected(() => send('PATCH', '/api/v1/app/other', { uid: 'acme' })), 409, 'conflict');
    assertError(
      await rejected(() => send('PUT', '/api/v1/app/other', { name: 'Other', uid: 'acme' })),
      409,
      'conflict',
    );
  });

  test('concurrent PUTs of one new app, or endpoint, answer as if in turn: one creates it, the others update it', async () => {
    for (const path of ['/api/v1/app/raced', '/api/v1/app/acme/endpoint/raced']) {
      const body = path.includes('endpoint') ? { url: EP_URL } : { name: 'Raced' };
      const answers = await Promise.all(Array.from({ length: 10 }, () => send('PUT', path, body)));
      const statuses = answers.map((a) => a.status).sort();
      assert.deepEqual(
        statuses,
        [200, 200, 200, 200, 200, 200, 200, 200, 200, 201],
        answers.map((a) => a.text).join(),
      );
      assert.equal(new Set(answers.map((a) => a.body.id)).size, 1, 'one object, the same for every caller');
      assert.equal(answers[0]!.body.uid, 'raced');
      assert.equal((await send('PUT', path, body)).status, 200, 'and the same PUT again updates it');
    }
  });

  test('the operator app’s uid is herald’s to give: 422 by a publish that would create it, or a PUT', async () => {
    const answer = await rejected(() =>
      send('POST', '/api/v1/app/herald-operator/msg', {
        eventType: 'invoice.paid',
        payload: {},
        application: { name: 'Mine', uid: 'herald-operator' },
      }),
    );
    assertNames(answer, ['body', 'uid']);
    assertNames(await rejected(() => send('PUT', '/api/v1/app/herald-operator', { name: 'Mine' })), [
      'body',
      'uid',
    ]);
  });

  test('publishing with `application` whose uid is not the one the path names: 422, no app made', async () => {
    const answer = await rejected(() =>
      send('POST', '/api/v1/app/brand-new/msg', {
        eventType: 'invoice.paid',
        payload: {},
        application: { name: 'New', uid: 'elsewhere' },
      }),
    );
    assertError(answer, 422, 'validation');
    assert.deepEqual(answer.body.detail[0].loc, ['body', 'application', 'uid']);
    for (const uid of ['brand-new', 'elsewhere'])
      assert.equal((await send('GET', `/api/v1/app/${uid}`)).status, 404, `no app ${uid}`);
  });

  test('publishing with `application` and no uid to a path that is no uid: 422 naming the path, no app made', async () => {
    const answer = await rejected(() =>
      send('POST', '/api/v1/app/has%20space/msg', {
        eventType: 'invoice.paid',
        payload: {},
        application: { name: 'x' },
      }),
    );
    assertError(answer, 422, 'validation');
    assert.deepEqual(answer.body.detail[0].loc, ['path', 'app_id']);
    const { rowCount } = await t.database.db.query(`select 1 from app where uid = 'has space'`);
    assert.equal(rowCount, 0);
  });

  test('duplicate endpoint uid in one app', async () => {
    assertError(
      await rejected(() => send('POST', '/api/v1/app/acme/endpoint', { url: EP_URL, uid: 'ep-1' })),
      409,
      'conflict',
    );
  });

  test('duplicate event type', async () => {
    assertError(
      await rejected(() =>
        send('POST', '/api/v1/event-type', { name: 'invoice.paid', description: 'again' }),
      ),
      409,
      'conflict',
    );
  });

  test('an idempotency key reused with other content', async () => {
    const answer = await rejected(() =>
      send(
        'POST',
        '/api/v1/app/acme/msg',
        { eventType: 'invoice.paid', payload: { n: 2 } },
        { 'idempotency-key': 'invoice-1' },
      ),
    );
    assertError(answer, 409, 'idempotency_conflict');
    const original = await send('GET', `/api/v1/app/acme/msg/${messageId}`);
    assert.deepEqual(original.body.payload, { n: 1 });
  });
});

describe('the database rolled the transaction back: 503, retry', () => {
  for (const [errcode, what] of [
    ['40P01', 'a deadlock'],
    ['40001', 'a serialization failure'],
  ] as const) {
    test(`${what} (${errcode}) → 503 store_unavailable`, async () => {
      await t.database.db.query(`create function refuse_app() returns trigger language plpgsql as $$
        begin raise exception 'rolled back' using errcode = '${errcode}'; end $$`);
      await t.database.db.query(
        'create trigger refuse_app before insert on app for each row execute function refuse_app()',
      );
      try {
        const answer = await rejected(() =>
          send('POST', '/api/v1/app', { name: 'Rolled back', uid: 'rolled-back' }),
        );
        assertError(answer, 503, 'store_unavailable');
      } finally {
        await t.database.db.query('drop trigger refuse_app on app');
        await t.database.db.query('drop function refuse_app()');
      }
    });
  }
});

test('a database that takes no writes, or no connections, now (a failover to a standby, an operator) is a 503 to retry, not a 500', async () => {
  const cut = await startTestHerald('api_errors_cut_off');
  const name = cut.database.name;
  const admin = new pg.Client({ connectionString: SERVER_URL });
  await admin.connect();
  // herald's connections end; the next ones start under the database's new setting.
  const reconnectAll = () =>
    admin.query('select pg_terminate_backend(pid) from pg_stat_activity where datname = $1', [name]);
  try {
    await admin.query(`alter database ${name} set default_transaction_read_only = on`);
    await reconnectAll();
    const readOnly = await cut.call('POST', '/api/v1/app', { name: 'Read only', uid: 'read-only' });
    assert.equal(readOnly.status, 503, JSON.stringify(readOnly.body));
    assert.equal(readOnly.body.code, 'store_unavailable');
    await admin.query(`alter database ${name} reset default_transaction_read_only`);
    await admin.query(`alter database ${name} allow_connections false`);
    await reconnectAll();
    const refused = await cut.call('GET', '/api/v1/app');
    assert.equal(refused.status, 503, JSON.stringify(refused.body));
    assert.equal(refused.body.code, 'store_unavailable');
  } finally {
    await admin.query(`alter database ${name} allow_connections true`);
    await admin.query(`alter database ${name} reset default_transaction_read_only`);
    await admin.end();
    await cut.close();
  }
});

test('a statement past the pool’s query deadline, its commit unknown, is a 503 to retry, not a 500', async () => {
  const slow = await startTestHerald('api_errors_deadline', { env: { HERALD_DB_QUERY_TIMEOUT_MS: '1000' } });
  try {
    await slow.database.db.query(`create function slow_app() returns trigger language plpgsql as $$
      begin perform pg_sleep(1.5); return new; end $$`);
    await slow.database.db.query(
      'create trigger slow_app before insert on app for each row execute function slow_app()',
    );
    const answer = await slow.call('POST', '/api/v1/app', { name: 'Slow', uid: 'slow' });
    assert.equal(answer.status, 503, JSON.stringify(answer.body));
    assert.equal(answer.body.code, 'store_unavailable');
  } finally {
    await slow.close();
  }
});

test('a source whose app the database could not look up is a 503 to retry, not a 422 naming the app', async () => {
  const slow = await startTestHerald('api_errors_source_app', {
    env: { HERALD_DB_QUERY_TIMEOUT_MS: '3000' },
  });
  const holder = new pg.Client({ connectionString: slow.database.url });
  await holder.connect();
  try {
    assert.equal((await slow.call('POST', '/api/v1/app', { name: 'Shop', uid: 'shop' })).status, 201);
    // The app table locked past the pool's query deadline: the lookup fails, the app is there.
    await holder.query('begin');
    await holder.query('lock table app in access exclusive mode');
    const answer = await slow.call('POST', '/api/v1/source', {
      uid: 'payments',
      scheme: 'standard-webhooks',
      secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
      app: 'shop',
      eventType: 'payment.settled',
    });
    assert.equal(answer.status, 503, JSON.stringify(answer.body));
    assert.equal(answer.body.code, 'store_unavailable');
  } finally {
    await holder.query('rollback').catch(() => {});
    await holder.end();
    await slow.close();
  }
});

test('the fixtures themselves are intact after every rejection', async () => {
  const app = await send('GET', '/api/v1/app/acme');
  assert.equal(app.body.id, appId);
  assert.equal(app.body.name, 'Acme');
  assert.deepEqual(app.body.metadata, { plan: 'pro' });
  const endpoint = await send('GET', '/api/v1/app/acme/endpoint/ep-1');
  assert.equal(endpoint.body.id, endpointId);
  assert.equal(endpoint.body.url, EP_URL);
  const headers = await send('GET', '/api/v1/app/acme/endpoint/ep-1/headers');
  assert.deepEqual(headers.body, { headers: {}, sensitive: [] });
});
