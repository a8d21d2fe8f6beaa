// A restart keeps everything, in both storage modes. `herald serve` runs as a child process; the
// test creates an app, an endpoint and a message over HTTP while the receiver answers 500 (so the
// delivery stays pending), stops herald with SIGTERM (which must exit 0), starts it again, finds
// everything where it was, and then sees the delivery succeed once the receiver recovers.
// Embedded mode (PGlite) adds the data directory's single-owner rule: while `serve` runs, a second
// process that needs the same directory refuses to open it; once stopped, `keys create` works.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { startMarkOf } from '../src/db/pglite.ts';
import { freshDatabase, type TestDatabase } from './support/database.ts';
import { ADMIN_KEY, testEnv } from './support/herald.ts';
import { freePort, type HeraldProcess, killAll, runHerald, startHerald } from './support/processes.ts';
import { type Receiver, startReceiver } from './support/receiver.ts';
import { waitFor } from './support/wait.ts';

// One attempt a second, more than enough of them: the delivery stays pending across the restart
// (failures never exhaust the cycle nor disable the endpoint), and is retried soon after the
// receiver recovers.
const SCHEDULE = Array.from({ length: 40 }, () => '1').join(',');
const RESTART_ENV = {
  HERALD_RETRY_SCHEDULE: SCHEDULE,
  HERALD_DISABLE_AFTER_FAILURES: '1000',
  LOG_LEVEL: 'info',
};
// PGlite's first start (initdb in WebAssembly) is slow, more so on a loaded machine.
const EMBEDDED_START_MS = 90_000;

let database: TestDatabase;
let dataDir: string;
let receiver: Receiver;
let healthy = false;

before(async () => {
  database = await freshDatabase('restart');
  dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'herald-restart-'));
  receiver = await startReceiver(() => ({ status: healthy ? 204 : 500 }));
});

after(async () => {
  await killAll();
  await receiver?.close();
  await database?.drop();
  if (dataDir) fs.rmSync(dataDir, { recursive: true, force: true });
});

// biome-ignore lint/suspicious/noExplicitAny: tests inspect JSON responses loosely
type Json = any;

async function call(
  base: string,
  key: string,
  method: string,
  urlPath: string,
  body?: unknown,
): Promise<{ status: number; body: Json }> {
  const response = await fetch(base + urlPath, {
    method,
    headers: {
      authorization: `Bearer ${key}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    body: body === undefined ? null : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}

async function expectStatus(
  what: string,
  pending: Promise<{ status: number; body: Json }>,
  status: number,
): Promise<Json> {
  const response = await pending;
  assert.equal(response.status, status, `${what}: ${JSON.stringify(response.body)}`);
  return response.body;
}

async function serve(env: Record<string, string>, port: number, name: string, timeoutMs?: number) {
  const { proc, apiUrl } = await startHerald('serve', { ...env, PORT: String(port) }, { name, timeoutMs });
  assert.equal(apiUrl, `http://127.0.0.1:${port}`, proc.describe());
  return { proc, base: apiUrl! };
}

async function stop(proc: HeraldProcess): Promise<void> {
  const exit = await proc.kill('SIGTERM');
  assert.deepEqual(exit, { code: 0, signal: null }, `SIGTERM must stop herald cleanly\n${proc.describe()}`);
  assert.ok(
    proc.logs.some((r) => r.msg?.startsWith('stopping')),
    proc.describe(),
  );
}

interface Created {
  app: Json;
  endpoint: Json;
  message: Json;
  secret: string;
}

/** App, endpoint and message over HTTP; returns once the first attempt has failed (500). */
async function createEverything(base: string, key: string, uid: string): Promise<Created> {
  const app = await expectStatus(
    'create app',
    call(base, key, 'POST', '/api/v1/app', { name: uid, uid }),
    201,
  );
  const endpoint = await expectStatus(
    'create endpoint',
    call(base, key, 'POST', `/api/v1/app/${app.id}/endpoint`, { url: `${receiver.url}/${uid}` }),
    201,
  );
  const { key: secret } = await expectStatus(
    'read secret',
    call(base, key, 'GET', `/api/v1/app/${app.id}/endpoint/${endpoint.id}/secret`),
    200,
  );
  const message = await expectStatus(
    'publish',
    call(base, key, 'POST', `/api/v1/app/${app.id}/msg`, { eventType: 'user.signup', payload: { uid } }),
    202,
  );
  await waitFor('a failed attempt', async () => {
    const attempts = await listAttempts(base, key, app.id, message.id);
    return attempts.some((a: Json) => a.outcome === 'failure' && a.responseStatusCode === 500);
  });
  return { app, endpoint, message, secret };
}

async function listAttempts(base: string, key: string, appId: string, msgId: string): Promise<Json[]> {
  const page = await expectStatus(
    'list attempts',
    call(base, key, 'GET', `/api/v1/app/${appId}/attempt/msg/${msgId}?limit=250`),
    200,
  );
  return page.data;
}

async function deliveryStatus(base: string, key: string, created: Created): Promise<Json> {
  const page = await expectStatus(
    'message destinations',
    call(base, key, 'GET', `/api/v1/app/${created.app.id}/msg/${created.message.id}/endpoint`),
    200,
  );
  assert.equal(page.data.length, 1);
  return page.data[0];
}

/** What a command printed besides its JSON log lines (which pino also writes to stdout). */
function printed(stdout: string): string[] {
  return stdout.split('\n').filter((line) => line.trim() !== '' && !line.startsWith('{'));
}

/** After a restart: the same app, endpoint, secret, message and attempt history, still pending. */
async function assertKept(
  base: string,
  key: string,
  created: Created,
  attemptsBefore: Json[],
): Promise<void> {
  const app = await expectStatus('get app', call(base, key, 'GET', `/api/v1/app/${created.app.uid}`), 200);
  assert.equal(app.id, created.app.id);
  assert.equal(app.name, created.app.name);
  const endpoint = await expectStatus(
    'get endpoint',
    call(base, key, 'GET', `/api/v1/app/${app.id}/endpoint/${created.endpoint.id}`),
    200,
  );
  assert.equal(endpoint.url, created.endpoint.url);
  const { key: secret } = await expectStatus(
    'read secret',
    call(base, key, 'GET', `/api/v1/app/${app.id}/endpoint/${endpoint.id}/secret`),
    200,
  );
  assert.equal(secret, created.secret, 'the sealed secret opens with the same master key');
  const message = await expectStatus(
    'get message',
    call(base, key, 'GET', `/api/v1/app/${app.id}/msg/${created.message.id}`),
    200,
  );
  assert.deepEqual(message.payload, created.message.payload);
  assert.equal(message.eventType, 'user.signup');

  const attempts = await listAttempts(base, key, app.id, message.id);
  const byId = new Map(attempts.map((a: Json) => [a.id, a]));
  for (const before of attemptsBefore) {
    const now = byId.get(before.id);
    assert.ok(now, `attempt ${before.id} survived the restart`);
    if (before.outcome !== null) assert.equal(now.outcome, before.outcome);
  }
  // Still failing (the receiver still answers 500): the delivery waits for its next attempt.
  const destination = await deliveryStatus(base, key, created);
  assert.ok([1, 3].includes(destination.status), `pending or sending, got ${JSON.stringify(destination)}`);
}

/** The receiver recovers; the next scheduled attempt delivers, signed with the kept secret. */
async function assertDelivered(base: string, key: string, created: Created): Promise<void> {
  healthy = true;
  await waitFor(
    'the delivery to succeed',
    async () => (await deliveryStatus(base, key, created)).status === 0,
  );
  const attempts = await listAttempts(base, key, created.app.id, created.message.id);
  assert.equal(attempts.filter((a: Json) => a.outcome === 'success').length, 1);
  const delivered = receiver.requests.filter((r) => r.path === `/${created.app.uid}`);
  const last = delivered.at(-1)!;
  assert.equal(last.headers['webhook-id'], created.message.id);
  assert.ok(delivered.every((r) => r.headers['webhook-id'] === created.message.id));
  const headers = Object.fromEntries(
    ['webhook-id', 'webhook-timestamp', 'webhook-signature'].map((h) => [h, String(last.headers[h])]),
  );
  assert.deepEqual(
    new Webhook(created.secret.replace(/^whsec_/, '')).verify(last.body, headers),
    created.message.payload,
  );
}

test('server mode: SIGTERM, start again, everything is kept and the delivery completes', async () => {
  healthy = false;
  const env = testEnv(database.url, RESTART_ENV);
  const port = await freePort();

  const first = await serve(env, port, 'serve-pg-1');
  const created = await createEverything(first.base, ADMIN_KEY, 'server_mode');
  await stop(first.proc);

  // A clean stop leaves no lease behind: nothing is sending, every attempt has its outcome.
  const open = await database.db.query(
    `select (select count(*) from attempt where outcome is null)::int as attempts,
            (select count(*) from delivery where state = 'sending')::int as sending`,
  );
  assert.deepEqual(open.rows[0], { attempts: 0, sending: 0 });
  const before = await database.db.query<{ id: string; outcome: string }>(
    'select id, outcome from attempt where message_id = $1',
    [created.message.id],
  );
  assert.ok(before.rows.length >= 1);

  const second = await serve(env, port, 'serve-pg-2');
  await assertKept(second.base, ADMIN_KEY, created, before.rows);
  await assertDelivered(second.base, ADMIN_KEY, created);
  await stop(second.proc);
});

// Five processes and three PGlite opens (one of them initdb): give it room beyond the default.
test('embedded mode: the data dir survives a restart and is never opened twice', {
  timeout: 240_000,
}, async () => {
  healthy = false;
  const env: Record<string, string> = { ...testEnv('unused', RESTART_ENV), HERALD_DATA_DIR: dataDir };
  // No server, no configured keys: herald generates the master key and an admin key file.
  delete env['DATABASE_URL'];
  delete env['HERALD_MASTER_KEY'];
  delete env['HERALD_ADMIN_KEY'];
  const port = await freePort();

  // Migrated first, as a deploy step would: the database holds no secret yet, and the key the
  // first start makes is the one.
  const migrated = await runHerald(['migrate'], env);
  assert.equal(migrated.code, 0, `${migrated.stdout}\n${migrated.stderr}`);
  const first = await serve(env, port, 'serve-embedded-1', EMBEDDED_START_MS);
  const adminKey = fs.readFileSync(path.join(dataDir, 'admin.key'), 'utf8').trim();
  const masterKey = fs.readFileSync(path.join(dataDir, 'master.key'), 'utf8');
  assert.ok(adminKey.length > 20);
  const created = await createEverything(first.base, adminKey, 'embedded_mode');

  // A second process on the same data dir must refuse, naming who holds it, and touch nothing.
  const busy = await runHerald(['keys', 'create', '--scope', 'read'], env);
  assert.notEqual(busy.code, 0, `keys create must fail while serve runs\n${busy.stdout}\n${busy.stderr}`);
  assert.match(busy.stderr, /in use by another herald process/);
  assert.match(busy.stderr, new RegExp(`pid ${first.proc.pid}\\b`));
  assert.deepEqual(printed(busy.stdout), [], 'no key was printed');
  assert.equal(
    fs.readFileSync(path.join(dataDir, 'herald.lock'), 'utf8'),
    `${first.proc.pid} ${os.hostname()} ${startMarkOf(first.proc.pid!)}`,
  );
  assert.equal(fs.readFileSync(path.join(dataDir, 'master.key'), 'utf8'), masterKey);
  // The running server is unharmed.
  await expectStatus('list apps while busy', call(first.base, adminKey, 'GET', '/api/v1/app'), 200);
  const attemptsBefore = await listAttempts(first.base, adminKey, created.app.id, created.message.id);

  await stop(first.proc);
  assert.equal(fs.existsSync(path.join(dataDir, 'herald.lock')), false, 'the lock is released on stop');

  // Stopped: the CLI may open the data dir now, and the key it prints works on the next start.
  const made = await runHerald(['keys', 'create', '--scope', 'read', '--name', 'restart-test'], env);
  assert.equal(made.code, 0, `${made.stdout}\n${made.stderr}`);
  const keys = printed(made.stdout);
  assert.equal(keys.length, 1, made.stdout);
  const readKey = keys[0]!;
  assert.match(readKey, /^\S{20,}$/);
  assert.match(made.stderr, /\(read\)/);
  assert.equal(fs.existsSync(path.join(dataDir, 'herald.lock')), false);

  const second = await serve(env, port, 'serve-embedded-2', EMBEDDED_START_MS);
  assert.equal(
    fs.readFileSync(path.join(dataDir, 'admin.key'), 'utf8').trim(),
    adminKey,
    'the admin key file is created once',
  );
  assert.equal(fs.readFileSync(path.join(dataDir, 'master.key'), 'utf8'), masterKey);
  const apps = await expectStatus(
    'list apps with the read key',
    call(second.base, readKey, 'GET', '/api/v1/app'),
    200,
  );
  assert.ok(apps.data.some((a: Json) => a.id === created.app.id));
  await expectStatus(
    'the read key cannot create',
    call(second.base, readKey, 'POST', '/api/v1/app', { name: 'nope' }),
    403,
  );
  await expectStatus('a made-up key', call(second.base, `${readKey}x`, 'GET', '/api/v1/app'), 401);

  await assertKept(second.base, adminKey, created, attemptsBefore);
  await assertDelivered(second.base, adminKey, created);
  await stop(second.proc);
  assert.ok(
    second.proc.logs.some((r) => r.msg === 'stopped'),
    second.proc.describe(),
  );
  assert.equal(fs.existsSync(path.join(dataDir, 'herald.lock')), false);

  // Killed outright (SIGKILL: no close, the lock and PGlite's postmaster.pid left behind), it
  // starts again with everything it had.
  const third = await serve(env, port, 'serve-embedded-3', EMBEDDED_START_MS);
  assert.deepEqual(await third.proc.kill('SIGKILL'), { code: null, signal: 'SIGKILL' });
  assert.ok(fs.existsSync(path.join(dataDir, 'herald.lock')), 'a killed process leaves its lock');
  const fourth = await serve(env, port, 'serve-embedded-4', EMBEDDED_START_MS);
  const kept = await expectStatus(
    'the message after a kill',
    call(fourth.base, adminKey, 'GET', `/api/v1/app/${created.app.id}/msg/${created.message.id}`),
    200,
  );
  assert.equal(kept.id, created.message.id);
  await stop(fourth.proc);

  // Without its master key file (a backup of pgdata alone), the database is refused: the new key
  // opens none of the secrets, and every attempt would fail unsigned.
  const keyFile = path.join(dataDir, 'master.key');
  fs.renameSync(keyFile, `${keyFile}.away`);
  try {
    const refused = await runHerald(['serve', '--port', String(port)], env);
    assert.equal(refused.code, 1, `${refused.stdout}\n${refused.stderr}`);
    assert.match(refused.stderr, /HERALD_MASTER_KEY.*master\.key is not it/);
    assert.doesNotMatch(refused.stdout, /herald started/);
  } finally {
    fs.renameSync(`${keyFile}.away`, keyFile);
  }
});
