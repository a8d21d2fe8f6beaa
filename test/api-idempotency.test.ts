// `idempotency-key` on the API's POSTs besides publishing (which keeps its key on the message): an
// SDK that retries after a lost answer must not make a second endpoint, resend or replay. The
// first request with a key runs and its answer is kept with its effect; a repeat replays it; the
// same key with another request at that URL is a 409; a failed request keeps nothing; keys are
// per caller and URL.

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { forgetOldAnswers } from '../src/db/api-idempotency.ts';
import { createApp, publishVia } from './support/fixtures.ts';
import { ADMIN_KEY, MASTER_KEY, startHeraldOn, startTestHerald, type TestHerald } from './support/herald.ts';
import { waitFor } from './support/wait.ts';

const EP_URL = 'https://hooks.example.com/orders';
let t: TestHerald;
let app: string;

before(async () => {
  t = await startTestHerald('api_idempotency', { worker: false });
  app = await createApp(t, 'keyed');
});
after(async () => {
  await t.close();
});

async function post(path: string, body: unknown, key: string, token = ADMIN_KEY, base = t.url) {
  const response = await fetch(base + path, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify(body),
  });
  const text = await response.text();
  return {
    status: response.status,
    body: text ? JSON.parse(text) : null,
    replayed: response.headers.get('idempotent-replayed') === 'true',
  };
}

const endpointsAt = async (url: string) =>
  (await t.database.db.query('select id from endpoint where url = $1', [url])).rowCount;

test('a repeated POST with the same key answers the same and makes one endpoint', async () => {
  const url = `${EP_URL}/once`;
  const first = await post(`/api/v1/app/${app}/endpoint`, { url }, 'create-once');
  assert.equal(first.status, 201, JSON.stringify(first.body));
  assert.equal(first.replayed, false);
  const again = await post(`/api/v1/app/${app}/endpoint`, { url }, 'create-once');
  assert.deepEqual({ status: again.status, body: again.body }, { status: first.status, body: first.body });
  assert.equal(again.replayed, true);
  assert.equal(await endpointsAt(url), 1);
});

test('concurrent POSTs with one key make one endpoint, and all get its answer', async () => {
  const url = `${EP_URL}/concurrent`;
  const answers = await Promise.all(
    Array.from({ length: 12 }, () => post(`/api/v1/app/${app}/endpoint`, { url }, 'create-concurrent')),
  );
  for (const answer of answers) assert.equal(answer.status, 201, JSON.stringify(answer.body));
  assert.equal(new Set(answers.map((a) => a.body.id)).size, 1, 'one endpoint id in every answer');
  assert.equal(answers.filter((a) => !a.replayed).length, 1, 'one request ran, the others replayed it');
  assert.equal(await endpointsAt(url), 1);
});

test('the same key with another request is a 409, and changes nothing', async () => {
  const first = await post(`/api/v1/app/${app}/endpoint`, { url: `${EP_URL}/first` }, 'create-other');
  assert.equal(first.status, 201);
  const other = await post(`/api/v1/app/${app}/endpoint`, { url: `${EP_URL}/other` }, 'create-other');
  assert.equal(other.status, 409, JSON.stringify(other.body));
  assert.equal(other.body.code, 'idempotency_conflict');
  assert.equal(await endpointsAt(`${EP_URL}/other`), 0);
});

test('one key at two URLs is two requests, as in Svix: a business key may create an app and then its endpoint', async () => {
  const created = await post('/api/v1/app', { name: 'Order 42', uid: 'order-42' }, 'order-42');
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const url = `${EP_URL}/order-42`;
  const endpoint = await post('/api/v1/app/order-42/endpoint', { url }, 'order-42');
  assert.equal(endpoint.status, 201, JSON.stringify(endpoint.body));
  assert.equal(endpoint.replayed, false);
  // Each repeats as itself.
  const again = await post('/api/v1/app/order-42/endpoint', { url }, 'order-42');
  assert.deepEqual([again.replayed, again.body.id], [true, endpoint.body.id]);
  assert.equal(await endpointsAt(url), 1);
});

test('an answer kept under the caller alone, before keys were scoped by URL, replays for that very request only', async () => {
  const url = `${EP_URL}/kept-before`;
  const first = await post(`/api/v1/app/${app}/endpoint`, { url }, 'kept-before');
  assert.equal(first.status, 201);
  // As a build that kept answers per caller left it.
  await t.database.db.query(`update api_idempotency set scope = 'env-admin-key' where key = 'kept-before'`);
  const retried = await post(`/api/v1/app/${app}/endpoint`, { url }, 'kept-before');
  assert.deepEqual([retried.status, retried.replayed, retried.body.id], [201, true, first.body.id]);
  assert.equal(await endpointsAt(url), 1);
  // Another request under that key is not this one: it runs.
  const other = await post(`/api/v1/app/${app}/endpoint`, { url: `${url}/other` }, 'kept-before');
  assert.deepEqual([other.status, other.replayed], [201, false]);
});

test('a request that failed keeps nothing: the same key runs again once the cause is gone', async () => {
  const taken = await post(
    `/api/v1/app/${app}/endpoint`,
    { url: `${EP_URL}/taken`, uid: 'taken' },
    'take-uid',
  );
  assert.equal(taken.status, 201);
  const clash = await post(`/api/v1/app/${app}/endpoint`, { url: `${EP_URL}/clash`, uid: 'taken' }, 'clash');
  assert.equal(clash.status, 409, JSON.stringify(clash.body));
  assert.equal((await t.call('DELETE', `/api/v1/app/${app}/endpoint/taken`)).status, 204);
  const retried = await post(
    `/api/v1/app/${app}/endpoint`,
    { url: `${EP_URL}/clash`, uid: 'taken' },
    'clash',
  );
  assert.equal(retried.status, 201, JSON.stringify(retried.body));
  assert.equal(retried.replayed, false);
});

test('keys are per caller: another API key with the same key runs its own request', async () => {
  const created = await t.call('POST', '/api/v1/api-key', { name: 'second caller', scopes: ['admin'] });
  assert.equal(created.status, 201);
  const url = `${EP_URL}/per-caller`;
  const mine = await post(`/api/v1/app/${app}/endpoint`, { url }, 'shared-key');
  const theirs = await post(`/api/v1/app/${app}/endpoint`, { url }, 'shared-key', created.body.key);
  assert.equal(mine.status, 201);
  assert.equal(theirs.status, 201);
  assert.notEqual(mine.body.id, theirs.body.id);
  assert.equal(theirs.replayed, false);
});

test('a resend repeated with its key is made once: one audit entry', async () => {
  const endpoint = await post(`/api/v1/app/${app}/endpoint`, { url: `${EP_URL}/resend` }, 'resend-endpoint');
  const message = await publishVia(t, app, { eventType: 'e', payload: {} });
  const path = `/api/v1/app/${app}/msg/${message}/endpoint/${endpoint.body.id}/resend`;
  const answers = [await post(path, {}, 'resend-1'), await post(path, {}, 'resend-1')];
  assert.deepEqual(
    answers.map((a) => [a.status, a.replayed]),
    [
      [202, false],
      [202, true],
    ],
  );
  const audit = await t.database.db.query(
    `select 1 from audit_entry where action = 'message.resent' and target_id = $1`,
    [message],
  );
  assert.equal(audit.rowCount, 1);
});

test('answers are forgotten after a day, every one of them: the key then runs again', async () => {
  const url = `${EP_URL}/forgotten`;
  assert.equal((await post(`/api/v1/app/${app}/endpoint`, { url }, 'day-old')).status, 201);
  assert.equal((await post(`/api/v1/app/${app}/endpoint`, { url: `${url}/2` }, 'day-old-2')).status, 201);
  await t.database.db.query(
    `update api_idempotency set created_at = now() - interval '25 hours' where key like 'day-old%'`,
  );
  // Batches of one: all the old answers go, not just a first batch.
  assert.deepEqual(await forgetOldAnswers(t.database.db, { until: Number.POSITIVE_INFINITY, batch: 1 }), {
    forgotten: 2,
    behind: false,
  });
  const again = await post(`/api/v1/app/${app}/endpoint`, { url }, 'day-old');
  assert.equal(again.status, 201);
  assert.equal(again.replayed, false);
  assert.equal(await endpointsAt(url), 2);
});

test('the kept digest of a request that carries a secret cannot be recomputed without the master key', async () => {
  const body = {
    uid: 'keyed-source',
    scheme: 'github',
    secret: 'gh-secret-8',
    app: 'keyed',
    eventType: 'push',
  };
  const created = await post('/api/v1/source', body, 'source-once');
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const { rows } = await t.database.db.query<{ digest: Buffer }>(
    `select request_sha256 as digest from api_idempotency where key = 'source-once'`,
  );
  // A plain hash of the request, which a reader of the table could test secrets against.
  const plain = createHash('sha256')
    .update(`POST /api/v1/source\n${JSON.stringify(body)}`)
    .digest();
  assert.equal(rows.length, 1);
  assert.ok(!rows[0]!.digest.equals(plain), 'the kept digest is keyed');
  // It still tells a repeat from another request.
  assert.equal((await post('/api/v1/source', body, 'source-once')).replayed, true);
  const other = await post('/api/v1/source', { ...body, secret: 'gh-secret-9' }, 'source-once');
  assert.equal(other.status, 409);
});

test('a repeat after the master key was rotated still replays: the kept digest is checked under the previous keys too', async () => {
  const url = `${EP_URL}/rotated`;
  const first = await post(`/api/v1/app/${app}/endpoint`, { url }, 'across-rotation');
  assert.equal(first.status, 201, JSON.stringify(first.body));
  // Another process on the same database, with a new master key and the old one listed.
  const rotated = await startHeraldOn(t.database, {
    worker: false,
    env: {
      HERALD_MASTER_KEY: Buffer.alloc(32, 9).toString('base64'),
      HERALD_PREVIOUS_MASTER_KEYS: MASTER_KEY,
    },
  });
  try {
    const again = await post(
      `/api/v1/app/${app}/endpoint`,
      { url },
      'across-rotation',
      ADMIN_KEY,
      rotated.url,
    );
    assert.deepEqual({ status: again.status, body: again.body }, { status: 201, body: first.body });
    assert.equal(again.replayed, true);
    assert.equal(await endpointsAt(url), 1);
    // Another request under the key is still told apart.
    const other = await post(
      `/api/v1/app/${app}/endpoint`,
      { url: `${url}/2` },
      'across-rotation',
      ADMIN_KEY,
      rotated.url,
    );
    assert.equal(other.status, 409, JSON.stringify(other.body));
  } finally {
    await rotated.close();
  }
});

test("old answers are forgotten by the worker even while retention fails: retention's failure does not skip them", async () => {
  const other = await startTestHerald('api_idempotency_forget', {
    worker: false,
    env: { HERALD_DB_QUERY_TIMEOUT_MS: '1000' },
  });
  const locker = new pg.Client({ connectionString: other.database.url });
  await locker.connect();
  try {
    await other.database.db.query(
      `insert into api_idempotency (scope, key, request_sha256, created_at)
       values ('someone POST /x', 'day-old', '\\x00', now() - interval '25 hours')`,
    );
    // Payload expiry, retention's first step, waits on this lock past the query deadline and fails.
    await locker.query('begin');
    await locker.query('lock table message in access exclusive mode');
    await other.herald.startWorker();
    await waitFor(
      'the day-old answer forgotten',
      async () =>
        (await other.database.db.query(`select 1 from api_idempotency where key = 'day-old'`)).rowCount === 0,
      15_000,
    );
  } finally {
    await locker.query('rollback').catch(() => {});
    await locker.end();
    await other.close();
  }
});
