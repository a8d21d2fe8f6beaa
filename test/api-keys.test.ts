// API keys through the HTTP API and the CLI: a token is shown once and stored only as a hash;
// scopes and app restrictions hold on every route; revoked, unknown and malformed credentials are
// refused; and one key's burst is rate-limited without touching another key or storing anything.

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import { generateApiKey } from '../src/crypto/api-key-token.ts';
import { createApp, createEndpoint } from './support/fixtures.ts';
import { startTestHerald, type TestHerald, testEnv } from './support/herald.ts';
import { killAll, runHerald } from './support/processes.ts';
import { waitFor } from './support/wait.ts';

const EP_URL = 'http://127.0.0.1:9/hook';
const MESSAGE = { eventType: 'invoice.paid', payload: { invoice: 1 } };

const bearer = (key: string) => ({ authorization: `Bearer ${key}` });

async function createKey(
  t: TestHerald,
  body: { name: string; scopes: string[]; apps?: string[] },
): Promise<{ id: string; key: string }> {
  const created = await t.call('POST', '/api/v1/api-key', body);
  assert.equal(created.status, 201, JSON.stringify(created.body));
  assert.match(created.body.key, /^hk_[0-9a-f]{8}_/);
  assert.match(created.body.id, /^key_/);
  return { id: created.body.id, key: created.body.key };
}

describe('scopes, app restrictions and revocation', () => {
  let t: TestHerald;
  let appA: string;
  let appB: string;
  let endpointA: string;
  let messageA: string;

  before(async () => {
    t = await startTestHerald('api_keys', { worker: false });
    appA = await createApp(t, 'keys-a');
    appB = await createApp(t, 'keys-b');
    endpointA = await createEndpoint(t, appA, { url: EP_URL });
    const published = await t.call('POST', `/api/v1/app/${appA}/msg`, MESSAGE);
    assert.equal(published.status, 202);
    messageA = published.body.id;
  });
  after(async () => {
    await t.close();
    await killAll();
  });

  /** A request that must be refused with `status` and the catalogue's code. */
  async function refused(
    key: string,
    method: string,
    path: string,
    status: 401 | 403 | 404,
    body?: unknown,
  ): Promise<void> {
    const answer = await t.call(method, path, body, bearer(key));
    const what = `${method} ${path}: ${answer.status} ${JSON.stringify(answer.body)}`;
    assert.equal(answer.status, status, what);
    const code = { 401: 'authentication_failed', 403: 'insufficient_access', 404: 'not_found' }[status];
    assert.equal(answer.body.code, code, what);
    assert.equal(typeof answer.body.detail, 'string', what);
  }

  test('the token is in the creation response only; the database keeps its hash', async () => {
    const { id, key } = await createKey(t, { name: 'shown once', scopes: ['read'] });

    const listed = await t.call('GET', '/api/v1/api-key');
    assert.equal(listed.status, 200);
    const row = listed.body.data.find((k: { id: string }) => k.id === id);
    assert.ok(row, 'the new key is listed');
    assert.equal(row.key, undefined);
    assert.equal(row.prefix, key.split('_')[1]);
    assert.ok(!JSON.stringify(listed.body).includes(key), 'the list never carries a token');
    const one = await t.call('GET', '/api/v1/api-key', undefined, bearer(key));
    assert.equal(one.status, 403, 'a read key cannot list keys');

    // Every column of every key row, and every audit entry, as text: no token, only its hash.
    const dump = await t.database.db.query<{ row: string }>(
      `select row_to_json(k)::text as row from api_key k union all
       select row_to_json(a)::text from audit_entry a`,
    );
    // The secret is everything after `hk_<prefix>_`: base64url may put '_' inside it too.
    const secretPart = key.slice(`hk_${row.prefix}_`.length);
    assert.equal(secretPart.length, 43, 'the secret part of the token');
    for (const { row: text } of dump.rows) {
      assert.ok(!text.includes(key), `no token in ${text}`);
      assert.ok(!text.includes(secretPart), `no secret part of a token in ${text}`);
    }
    const stored = await t.database.db.query<{ hash: Buffer }>('select hash from api_key where id = $1', [
      id,
    ]);
    assert.deepEqual(stored.rows[0]!.hash, createHash('sha256').update(key).digest());
  });

  test('a creation repeated with its idempotency-key makes no second key and is told which one it made; the token is kept nowhere', async () => {
    const headers = { 'idempotency-key': 'create-key-once' };
    const body = { name: 'created once', scopes: ['read'] };
    const first = await t.call('POST', '/api/v1/api-key', body, headers);
    assert.equal(first.status, 201, JSON.stringify(first.body));
    const again = await t.call('POST', '/api/v1/api-key', body, headers);
    assert.equal(again.status, 409, JSON.stringify(again.body));
    assert.equal(again.body.code, 'idempotency_conflict');
    assert.match(again.body.detail, new RegExp(first.body.id));
    assert.ok(!JSON.stringify(again.body).includes(first.body.key), 'the token is not shown again');
    const named = await t.database.db.query("select id from api_key where name = 'created once'");
    assert.equal(named.rowCount, 1, 'one key made');
    const kept = await t.database.db.query<{ row: string }>(
      'select row_to_json(i)::text as row from api_idempotency i',
    );
    for (const { row } of kept.rows) assert.ok(!row.includes(first.body.key), `no token kept in ${row}`);
  });

  test('a publish key may publish and do nothing else', async () => {
    const { key } = await createKey(t, { name: 'publisher', scopes: ['publish'] });
    const published = await t.call('POST', `/api/v1/app/${appA}/msg`, MESSAGE, bearer(key));
    assert.equal(published.status, 202, JSON.stringify(published.body));

    const ep = `/api/v1/app/${appA}/endpoint/${endpointA}`;
    await refused(key, 'POST', `/api/v1/app/${appA}/endpoint`, 403, { url: EP_URL });
    await refused(key, 'PATCH', ep, 403, { description: 'changed' });
    await refused(key, 'DELETE', ep, 403);
    await refused(key, 'POST', '/api/v1/app', 403, { name: 'nope' });
    // Nor by a publish that would create its app.
    await refused(key, 'POST', '/api/v1/app/made-by-publish/msg', 403, {
      ...MESSAGE,
      application: { name: 'nope', uid: 'made-by-publish' },
    });
    assert.equal((await t.call('GET', '/api/v1/app/made-by-publish')).status, 404);
    await refused(key, 'POST', '/api/v1/event-type', 403, { name: 'nope', description: 'nope' });
    await refused(key, 'POST', '/api/v1/api-key', 403, { name: 'escalate', scopes: ['admin'] });
    await refused(key, 'GET', '/api/v1/app', 403);
    await refused(key, 'GET', ep, 403);
    await refused(key, 'GET', `/api/v1/app/${appA}/msg/${messageA}`, 403);

    // It may ask whether herald is ready, though: any key may.
    const ready = await t.call('GET', '/api/v1/health/ready', undefined, bearer(key));
    assert.equal(ready.status, 200, JSON.stringify(ready.body));

    const endpoint = await t.call('GET', ep);
    assert.equal(endpoint.status, 200, 'the refused DELETE left the endpoint in place');
    assert.equal(endpoint.body.description, '', 'the refused PATCH changed nothing');
    const escalated = await t.database.db.query(`select 1 from api_key where name in ('escalate')`);
    assert.equal(escalated.rowCount, 0);
  });

  test('a read key may read but not change anything, nor see a signing secret', async () => {
    // Scopes are a set: one named twice is kept once.
    const { id, key } = await createKey(t, { name: 'reader', scopes: ['read', 'read'] });
    const listed = await t.call('GET', '/api/v1/api-key');
    assert.deepEqual(listed.body.data.find((k: { id: string }) => k.id === id).scopes, ['read']);
    const ep = `/api/v1/app/${appA}/endpoint/${endpointA}`;
    for (const path of ['/api/v1/app', `/api/v1/app/${appA}`, ep, `/api/v1/app/${appA}/msg/${messageA}`]) {
      const answer = await t.call('GET', path, undefined, bearer(key));
      assert.equal(answer.status, 200, `GET ${path}: ${JSON.stringify(answer.body)}`);
    }
    await refused(key, 'POST', '/api/v1/app', 403, { name: 'nope' });
    await refused(key, 'POST', `/api/v1/app/${appA}/msg`, 403, MESSAGE);
    await refused(key, 'PATCH', ep, 403, { description: 'changed' });
    await refused(key, 'DELETE', ep, 403);
    await refused(key, 'DELETE', `/api/v1/app/${appA}`, 403);
    await refused(key, 'GET', `${ep}/secret`, 403);
  });

  test('a key restricted to app A cannot touch app B and sees only A', async () => {
    const { key } = await createKey(t, { name: 'tenant a', scopes: ['admin'], apps: ['keys-a'] });
    const own = await t.call('GET', `/api/v1/app/${appA}`, undefined, bearer(key));
    assert.equal(own.status, 200);
    const listed = await t.call('GET', '/api/v1/app', undefined, bearer(key));
    assert.equal(listed.status, 200);
    assert.deepEqual(
      listed.body.data.map((a: { id: string }) => a.id),
      [appA],
    );

    // Nor may it rename its own app: the clash with another tenant's uid would tell it that uid.
    await refused(key, 'PATCH', `/api/v1/app/${appA}`, 403, { uid: 'keys-b' });
    await refused(key, 'PATCH', `/api/v1/app/${appA}`, 403, { uid: 'nobody-has-this' });
    await refused(key, 'PUT', `/api/v1/app/${appA}`, 403, { name: 'A', uid: 'nobody-has-this' });
    // Another tenant's app is not found, as an app nobody has: no key learns which uids are taken.
    for (const other of [appB, 'keys-b', 'nobody-has-this']) {
      await refused(key, 'GET', `/api/v1/app/${other}`, 404);
      await refused(key, 'POST', `/api/v1/app/${other}/msg`, 404, MESSAGE);
      await refused(key, 'POST', `/api/v1/app/${other}/endpoint`, 404, { url: EP_URL });
      await refused(key, 'DELETE', `/api/v1/app/${other}`, 404);
      await refused(key, 'PUT', `/api/v1/app/${other}`, 404, { name: 'mine now' });
    }
    await refused(key, 'POST', '/api/v1/app', 403, { name: 'another tenant' });
    // get_if_exists shows an existing app only to a key that may see it, and does not tell such a
    // key whether a uid is taken: the same refusal as for a uid nobody has.
    await refused(key, 'POST', '/api/v1/app?get_if_exists=true', 403, { name: 'x', uid: 'keys-b' });
    const [taken, free] = await Promise.all(
      ['keys-b', 'nobody-has-this'].map((uid) =>
        t.call('POST', '/api/v1/app?get_if_exists=true', { name: 'x', uid }, bearer(key)),
      ),
    );
    assert.deepEqual(taken, free);
    const mine = await t.call(
      'POST',
      '/api/v1/app?get_if_exists=true',
      { name: 'x', uid: 'keys-a' },
      bearer(key),
    );
    assert.equal(mine.status, 200);
    assert.equal(mine.body.id, appA);
    // Nor may it mint a key that reaches every app, or manage keys at all.
    await refused(key, 'POST', '/api/v1/api-key', 403, { name: 'escalate', scopes: ['admin'] });
    await refused(key, 'GET', '/api/v1/api-key', 403);

    const messagesOfB = await t.database.db.query('select 1 from message where app_id = $1', [appB]);
    assert.equal(messagesOfB.rowCount, 0);
  });

  test('a revoked key is refused at once; revoking twice is 404', async () => {
    const { id, key } = await createKey(t, { name: 'short-lived', scopes: ['read'] });
    assert.equal((await t.call('GET', '/api/v1/app', undefined, bearer(key))).status, 200);

    assert.equal((await t.call('DELETE', `/api/v1/api-key/${id}`)).status, 204);
    await refused(key, 'GET', '/api/v1/app', 401);
    const again = await t.call('DELETE', `/api/v1/api-key/${id}`);
    assert.equal(again.status, 404);
    const listed = await t.call('GET', '/api/v1/api-key');
    const row = listed.body.data.find((k: { id: string }) => k.id === id);
    assert.ok(row.revokedAt, 'the list shows the key as revoked');
  });

  test('unknown keys and malformed Authorization headers get 401; HERALD_ADMIN_KEY works', async () => {
    const { key } = await createKey(t, { name: 'template', scopes: ['admin'] });
    // Well-formed, but never stored.
    await refused(generateApiKey().token, 'GET', '/api/v1/app', 401);
    for (const header of [
      '',
      'Bearer',
      'Bearer ',
      `Basic ${key}`,
      key,
      `Bearer ${key} extra`,
      `Token ${key}`,
    ]) {
      const answer = await t.call('GET', '/api/v1/app', undefined, { authorization: header });
      assert.equal(answer.status, 401, `Authorization: ${JSON.stringify(header)}`);
      assert.equal(answer.body.code, 'authentication_failed');
    }
    const missing = await fetch(`${t.url}/api/v1/app`);
    assert.equal(missing.status, 401);

    // t.call sends HERALD_ADMIN_KEY unless told otherwise.
    assert.equal((await t.call('GET', '/api/v1/app')).status, 200);
    assert.equal((await t.call('POST', '/api/v1/app', { name: 'by env key' })).status, 201);
  });

  test('`herald keys create --scope read` prints a key that reads and cannot write', async () => {
    const run = await runHerald(
      ['keys', 'create', '--scope', 'read', '--name', 'from cli'],
      testEnv(t.database.url),
    );
    assert.equal(run.code, 0, `${run.stdout}\n${run.stderr}`);
    const key = run.stdout.match(/^hk_\S+$/m)?.[0];
    assert.ok(key, `a key on stdout: ${run.stdout}`);
    const read = await t.call('GET', '/api/v1/app', undefined, bearer(key));
    assert.equal(read.status, 200);
    await refused(key, 'POST', '/api/v1/app', 403, { name: 'nope' });
    await refused(key, 'POST', `/api/v1/app/${appA}/msg`, 403, MESSAGE);
  });

  test('`herald keys create --app <uid>` restricts the key to that app; an app that does not exist is refused', async () => {
    const uidOfA = (await t.call('GET', `/api/v1/app/${appA}`)).body.uid as string;
    const run = await runHerald(
      ['keys', 'create', '--scope', 'publish', '--app', uidOfA, '--name', 'one app'],
      testEnv(t.database.url),
    );
    assert.equal(run.code, 0, `${run.stdout}\n${run.stderr}`);
    const key = run.stdout.match(/^hk_\S+$/m)?.[0];
    assert.ok(key, `a key on stdout: ${run.stdout}`);
    const published = await t.call('POST', `/api/v1/app/${uidOfA}/msg`, MESSAGE, bearer(key));
    assert.equal(published.status, 202, JSON.stringify(published.body));
    await refused(key, 'POST', `/api/v1/app/${appB}/msg`, 404, MESSAGE);

    const missing = await runHerald(
      ['keys', 'create', '--scope', 'publish', '--app', 'no-such-app'],
      testEnv(t.database.url),
    );
    assert.notEqual(missing.code, 0);
    assert.equal(missing.stderr, 'herald: --app (0): application no-such-app not found\n');
  });
});

describe('the key behind each token is cached', () => {
  let t: TestHerald;

  before(async () => {
    t = await startTestHerald('api_key_cache', { worker: false });
  });
  after(() => t.close());

  const read = (key: string) =>
    fetch(`${t.url}/api/v1/app`, { headers: bearer(key), signal: AbortSignal.timeout(3000) });

  test('a known key costs no query: it is honoured while api_key is locked', async () => {
    const { key } = await createKey(t, { name: 'cached', scopes: ['read'] });
    assert.equal((await read(key)).status, 200);
    const locker = new pg.Client({ connectionString: t.database.url });
    await locker.connect();
    try {
      await locker.query('begin');
      // Every read of api_key waits behind this lock: only a cached key gets through.
      await locker.query('lock table api_key in access exclusive mode');
      for (let i = 0; i < 3; i++) assert.equal((await read(key)).status, 200);
    } finally {
      await locker.query('rollback');
      await locker.end();
    }
  });

  /** Cuts the connection that hears announcements (it reconnects 100 ms later at the earliest). */
  async function cutListener(): Promise<number[]> {
    await waitFor('a listener to cut', () => listenedBefore(new Date(), []));
    const cut = await t.database.db.query<{ pid: number }>(
      `with listener as materialized (
         select pid from pg_stat_activity
          where datname = current_database() and query ilike 'listen %' and pid <> pg_backend_pid()
       )
       select pid from listener where pg_terminate_backend(pid)`,
    );
    assert.ok((cut.rowCount ?? 0) > 0, 'the listening connection was found');
    return cut.rows.map((r) => r.pid);
  }

  /** Whether a new listener (not one of `cut`, which may still be on its way out) listened before `at`. */
  async function listenedBefore(at: Date, cut: number[]): Promise<boolean> {
    const { rowCount } = await t.database.db.query(
      `select 1 from pg_stat_activity
        where datname = current_database() and query ilike 'listen %' and query_start < $1
          and pid <> all($2)`,
      [at, cut],
    );
    return (rowCount ?? 0) > 0;
  }

  /**
   * Runs `trial` until one tells (it returns true): a trial with the listener back too early
   * returns false. A slow machine may need another.
   */
  async function untilATrialTells(trial: (n: number) => Promise<boolean>): Promise<void> {
    for (let n = 1; ; n++) {
      if (await trial(n)) return;
      assert.ok(n < 5, 'the listener was back too early in five trials: nothing to tell');
      await waitFor('the listener to be back', () => listenedBefore(new Date(), []));
    }
  }

  test('a key revoked through this API is refused on the next request, announced or not', async () => {
    // Until the cut listener listens again nothing evicts the cached key but the revocation itself.
    await untilATrialTells(async (n) => {
      const { id, key } = await createKey(t, { name: `revoked here ${n}`, scopes: ['read'] });
      assert.equal((await read(key)).status, 200);
      const cut = await cutListener();
      assert.equal((await t.call('DELETE', `/api/v1/api-key/${id}`)).status, 204);
      const status = (await read(key)).status;
      if (await listenedBefore(new Date(), cut)) return false;
      assert.equal(status, 401);
      return true;
    });
  });

  test('a key revoked while the listener is down is refused once it is back, not after the entry ages', async () => {
    // The revocation's announcement goes nowhere; a listener that is back empties the cache.
    await untilATrialTells(async (n) => {
      const { id, key } = await createKey(t, { name: `revoked unheard ${n}`, scopes: ['read'] });
      assert.equal((await read(key)).status, 200);
      const cut = await cutListener();
      await t.database.db.query('update api_key set revoked_at = now() where id = $1', [id]);
      if (await listenedBefore(new Date(), cut)) return false;
      // Well before a cached entry's 5 s age limit.
      await waitFor('the revoked key to be refused', async () => (await read(key)).status === 401, 2000);
      return true;
    });
  });

  test('a key revoked outside this process is refused once the revocation is announced', async () => {
    const { id, key } = await createKey(t, { name: 'revoked elsewhere', scopes: ['read'] });
    assert.equal((await read(key)).status, 200);
    // As the CLI or an operator's SQL would revoke it: not through this process.
    await t.database.db.query('update api_key set revoked_at = now() where id = $1', [id]);
    // Well before a cached entry's 5 s age limit: the announcement evicted it.
    await waitFor('the revoked key to be refused', async () => (await read(key)).status === 401, 2000);
  });
});

describe('per-key rate limiting', () => {
  const LIMIT = 5;
  let t: TestHerald;
  let app: string;

  before(async () => {
    t = await startTestHerald('rate_limit', { worker: false, env: { HERALD_API_RATE_LIMIT: String(LIMIT) } });
    app = await createApp(t, 'limited');
    await createEndpoint(t, app, { url: EP_URL });
  });
  after(() => t.close());

  const publish = (key: string, n: number) =>
    fetch(`${t.url}/api/v1/app/${app}/msg`, {
      method: 'POST',
      headers: { ...bearer(key), 'content-type': 'application/json' },
      body: JSON.stringify({ eventType: 'burst', payload: { n } }),
    });

  test('a burst from one key gets 429 with Retry-After; refused requests store nothing', async () => {
    const busy = await createKey(t, { name: 'busy', scopes: ['publish'] });
    const calm = await createKey(t, { name: 'calm', scopes: ['publish'] });

    const responses = await Promise.all(Array.from({ length: 20 }, (_, n) => publish(busy.key, n)));
    const accepted = responses.filter((r) => r.status === 202);
    const limited = responses.filter((r) => r.status === 429);
    assert.equal(accepted.length + limited.length, 20, `statuses ${responses.map((r) => r.status)}`);
    assert.ok(limited.length > 0, 'some requests were limited');
    assert.ok(accepted.length >= LIMIT, 'the first LIMIT requests in a window pass');
    for (const response of limited) {
      assert.match(response.headers.get('retry-after') ?? '', /^[1-9]\d*$/);
      const body = (await response.json()) as { code: string; detail: unknown };
      assert.equal(body.code, 'rate_limited');
      assert.equal(typeof body.detail, 'string');
    }
    const ids = await Promise.all(accepted.map(async (r) => ((await r.json()) as { id: string }).id));

    // Stored: exactly the accepted messages, each with its deliveries and audit entry.
    const stored = await t.database.db.query<{ id: string }>(
      `select id from message where app_id = $1 and event_type = 'burst' order by id`,
      [app],
    );
    assert.deepEqual(
      stored.rows.map((r) => r.id),
      [...ids].sort(),
    );
    const audited = await t.database.db.query(
      `select 1 from audit_entry where action = 'message.created' and actor = $1`,
      [busy.id],
    );
    assert.equal(audited.rowCount, ids.length);

    // Another key is not affected by the first one's exhausted budget.
    const other = await publish(calm.key, 100);
    assert.equal(other.status, 202, await other.text());

    // Public routes carry no key and are not limited.
    const health = await Promise.all(Array.from({ length: 20 }, () => fetch(`${t.url}/api/v1/health`)));
    assert.deepEqual(new Set(health.map((r) => r.status)), new Set([204]));

    // The budget comes back with the next window.
    await waitFor('the busy key to be accepted again', async () => {
      const response = await publish(busy.key, 200);
      await response.body?.cancel();
      return response.status === 202;
    });
  });
});

describe('failed authentications per address', () => {
  const LIMIT = 3;
  let t: TestHerald;

  before(async () => {
    t = await startTestHerald('auth_failures', {
      worker: false,
      env: { HERALD_AUTH_FAILURE_LIMIT: String(LIMIT) },
    });
  });
  after(() => t.close());

  const read = (key: string) => t.call('GET', '/api/v1/app', undefined, bearer(key));

  test('past the limit an address’s unknown tokens get 429 without a lookup; keys seen live and the admin key still work', async () => {
    const known = await createKey(t, { name: 'known', scopes: ['read'] });
    const fresh = await createKey(t, { name: 'fresh', scopes: ['read'] });
    const revoked = await createKey(t, { name: 'revoked', scopes: ['read'] });
    assert.equal((await read(known.key)).status, 200);
    assert.equal((await t.call('DELETE', `/api/v1/api-key/${revoked.id}`)).status, 204);

    // Missing or malformed credentials cost no lookup and are not counted.
    for (let i = 0; i < LIMIT + 2; i++) {
      assert.equal((await t.call('GET', '/api/v1/app', undefined, { authorization: '' })).status, 401);
    }
    for (let i = 0; i < LIMIT; i++) {
      const answer = await read(generateApiKey().token);
      assert.equal(answer.status, 401, `unknown token ${i + 1} of ${LIMIT}`);
      assert.equal(answer.body.code, 'authentication_failed');
    }
    const refused = await fetch(`${t.url}/api/v1/app`, { headers: bearer(generateApiKey().token) });
    assert.equal(refused.status, 429);
    const retryAfter = Number(refused.headers.get('retry-after'));
    assert.ok(
      Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 60,
      `Retry-After ${retryAfter}`,
    );
    const body = (await refused.json()) as { code: string; detail: string };
    assert.equal(body.code, 'rate_limited');
    assert.match(body.detail, /too many failed authentications from this address/);
    // A revoked key would be 401 after a lookup: refused before it, it is 429.
    assert.equal((await read(revoked.key)).status, 429);
    // So is a live key this process has not seen yet (the price of not looking it up)…
    assert.equal((await read(fresh.key)).status, 429);
    // …but a key seen live here, and the admin key, are honoured: a client with a stale key
    // behind a shared proxy does not lock the others out.
    assert.equal((await read(known.key)).status, 200);
    assert.equal((await t.call('GET', '/api/v1/app')).status, 200);
    // A key seen live and revoked since is looked up, and refused as revoked — and is no longer
    // spared: a client that goes on with it is held to the address's limit.
    assert.equal((await t.call('DELETE', `/api/v1/api-key/${known.id}`)).status, 204);
    assert.equal((await read(known.key)).status, 401);
    assert.equal((await read(known.key)).status, 429);
  });
});
