// Logs carry no credentials: no admin key, no API key token, no endpoint secret, no custom header
// value and no webhook signature, at the most verbose level, through refused requests (401, 403,
// 422), failed ones (500, 503) and real deliveries. Checked twice: in process, where every log
// record is captured before any redaction (so herald must not log these values at all), and in a
// `herald serve` process with its real logger.

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Writable } from 'node:stream';
import { after, before, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { buildApi } from '../src/api/server.ts';
import { loadConfig } from '../src/config.ts';
import { generateApiKey } from '../src/crypto/api-key-token.ts';
import type { Db } from '../src/db/port.ts';
import { createHerald, type Herald } from '../src/herald.ts';
import { freshDatabase, type TestDatabase } from './support/database.ts';
import { ADMIN_KEY, testEnv } from './support/herald.ts';
import { killAll, startHerald } from './support/processes.ts';
import { type Receiver, startReceiver } from './support/receiver.ts';
import { waitFor } from './support/wait.ts';

const SECRET = `whsec_${randomBytes(24).toString('base64')}`;
const ROTATED = `whsec_${randomBytes(32).toString('base64')}`;
const HEADER_VALUE = `Bearer header-${randomBytes(12).toString('hex')}`;
const UNKNOWN_TOKEN = generateApiKey().token;

let receiver: Receiver;
const databases: TestDatabase[] = [];

before(async () => {
  receiver = await startReceiver((request) => ({ status: request.path === '/failing' ? 500 : 204 }));
});
after(async () => {
  await killAll();
  await receiver.close();
  await Promise.all(databases.map((d) => d.drop()));
});

async function newDatabase(label: string): Promise<TestDatabase> {
  const database = await freshDatabase(label);
  databases.push(database);
  return database;
}

/** A JSON request; `key` null sends no Authorization header. */
async function request(
  base: string,
  key: string | null,
  method: string,
  path: string,
  body?: unknown,
  // biome-ignore lint/suspicious/noExplicitAny: tests inspect JSON responses loosely
): Promise<{ status: number; body: any }> {
  const response = await fetch(base + path, {
    method,
    headers: {
      ...(key === null ? {} : { authorization: `Bearer ${key}` }),
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    body: body === undefined ? null : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}

/**
 * Drives one herald through everything that could log a credential, and returns the values that
 * must never appear in its logs: the keys used, the secrets set and the signatures it sent.
 */
async function exercise(base: string, label: string): Promise<string[]> {
  const call = (method: string, path: string, body?: unknown, key: string | null = ADMIN_KEY) =>
    request(base, key, method, path, body);
  const expect = async (
    status: number,
    method: string,
    path: string,
    body?: unknown,
    key?: string | null,
  ) => {
    const answer = await call(method, path, body, key);
    assert.equal(answer.status, status, `${method} ${path}: ${JSON.stringify(answer.body)}`);
    return answer.body;
  };

  const reader = await expect(201, 'POST', '/api/v1/api-key', { name: 'reader', scopes: ['read'] });
  const revoked = await expect(201, 'POST', '/api/v1/api-key', { name: 'revoked', scopes: ['admin'] });
  await expect(204, 'DELETE', `/api/v1/api-key/${revoked.id}`);

  // Refusals: unknown, revoked and malformed credentials, a missing scope, invalid input that
  // itself carries a secret and a header value.
  await expect(401, 'GET', '/api/v1/app', undefined, UNKNOWN_TOKEN);
  await expect(401, 'GET', '/api/v1/app', undefined, revoked.key);
  await expect(401, 'GET', '/api/v1/app', undefined, null);
  await expect(403, 'POST', '/api/v1/app', { name: 'nope' }, reader.key);
  await expect(403, 'GET', '/api/v1/app/nope/endpoint/nope/secret', undefined, reader.key);
  const app = (await expect(201, 'POST', '/api/v1/app', { name: label, uid: label })).id;
  await expect(422, 'POST', `/api/v1/app/${app}/endpoint`, {
    url: 'not a url',
    secret: SECRET,
    headers: { authorization: HEADER_VALUE },
  });
  await expect(422, 'POST', `/api/v1/app/${app}/endpoint`, {
    url: `${receiver.url}/x`,
    secret: 'whsec_short',
  });

  // Deliveries signed with a secret, carrying a credential header, to a receiver that answers
  // 2xx and to one that fails; then a rotation, so two secrets sign at once.
  const path = `/${label}`;
  const ep = await expect(201, 'POST', `/api/v1/app/${app}/endpoint`, {
    url: `${receiver.url}${path}`,
    secret: SECRET,
    headers: { authorization: HEADER_VALUE },
  });
  await expect(201, 'POST', `/api/v1/app/${app}/endpoint`, {
    url: `${receiver.url}/failing`,
    secret: SECRET,
  });
  assert.equal((await expect(200, 'GET', `/api/v1/app/${app}/endpoint/${ep.id}/secret`)).key, SECRET);
  await expect(202, 'POST', `/api/v1/app/${app}/msg`, { eventType: 'e', payload: { n: 1 } });
  await expect(204, 'POST', `/api/v1/app/${app}/endpoint/${ep.id}/secret/rotate`, { key: ROTATED });
  await expect(202, 'POST', `/api/v1/app/${app}/msg`, { eventType: 'e', payload: { n: 2 } });
  const received = await waitFor('both messages to be delivered', () => {
    const got = receiver.requests.filter((r) => r.path === path);
    return got.length >= 2 ? got : null;
  });
  await waitFor('a failed attempt', () => receiver.requests.some((r) => r.path === '/failing'));

  const signatures = received.flatMap((r) =>
    String(r.headers['webhook-signature'])
      .split(' ')
      .map((s) => s.slice('v1,'.length)),
  );
  assert.ok(signatures.length >= 3, 'the rotated secret and its predecessor both signed');
  assert.equal(received[0]!.headers.authorization, HEADER_VALUE, 'the custom header was sent');
  return [
    ADMIN_KEY,
    reader.key,
    revoked.key,
    UNKNOWN_TOKEN,
    SECRET,
    SECRET.slice('whsec_'.length),
    ROTATED,
    ROTATED.slice('whsec_'.length),
    HEADER_VALUE,
    ...signatures,
  ];
}

function assertAbsent(logs: string, values: string[]): void {
  for (const value of values) {
    const at = logs.indexOf(value);
    assert.equal(at, -1, `the logs hold ${value}: …${logs.slice(Math.max(0, at - 200), at + 200)}…`);
  }
}

test('in process, at trace level and before any redaction, no log record holds a credential', async () => {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(chunk.toString('utf8'));
      done();
    },
  });
  // Deliberately without createLogger's redaction: herald must not hand these values to a
  // logger in the first place; redaction is only the second line of defence.
  const logger = pino({ level: 'trace' }, stream);
  const database = await newDatabase('log_redaction');
  const config = loadConfig(testEnv(database.url, { LOG_LEVEL: 'trace' }));
  let herald: Herald | null = null;
  const apis: FastifyInstance[] = [];
  try {
    herald = await createHerald({ config, logger, migrate: false });
    const api = await buildApi(herald.core);
    apis.push(api);
    await api.listen({ port: 0, host: '127.0.0.1' });
    await herald.startWorker();
    const base = `http://127.0.0.1:${(api.server.address() as { port: number }).port}`;
    const forbidden = await exercise(base, 'inproc');

    // 500 and 503: the same API over a database that fails every transaction, once with an
    // unexpected error and once as if the server were unreachable.
    for (const [code, status] of [
      ['XX000', 500],
      ['ECONNREFUSED', 503],
    ] as const) {
      const failing: Db = {
        ...herald.core.db,
        transaction: () => Promise.reject(Object.assign(new Error(`simulated ${code}`), { code })),
      };
      const broken = await buildApi({ ...herald.core, db: failing });
      apis.push(broken);
      await broken.listen({ port: 0, host: '127.0.0.1' });
      const brokenBase = `http://127.0.0.1:${(broken.server.address() as { port: number }).port}`;
      const answer = await request(brokenBase, ADMIN_KEY, 'POST', '/api/v1/api-key', {
        name: `fails with ${code}`,
        scopes: ['admin'],
      });
      assert.equal(answer.status, status, JSON.stringify(answer.body));
    }

    const logs = lines.join('');
    // The capture works, and covers errors and the worker's trace-level records.
    assert.match(logs, /simulated XX000/);
    assert.match(logs, /simulated ECONNREFUSED/);
    assert.match(logs, /attempt finished/);
    assertAbsent(logs, forbidden);
  } finally {
    await Promise.all(apis.map((a) => a.close()));
    await herald?.close();
  }
});

test('`herald serve` at trace level logs no credential', async () => {
  const database = await newDatabase('log_redaction_serve');
  const { proc, apiUrl } = await startHerald('serve', testEnv(database.url, { LOG_LEVEL: 'trace' }));
  assert.ok(apiUrl);
  const forbidden = await exercise(apiUrl, 'served');
  await waitFor('the worker to log a finished attempt', () => /attempt finished/.test(proc.stdout));
  await proc.kill('SIGTERM');
  assert.match(proc.stdout, /herald started/);
  assertAbsent(proc.stdout + proc.stderr, forbidden);
});
