// herald behind a real PgBouncer in transaction mode (Debian's 1.18, which cannot keep named
// statements across transactions), with HERALD_DB_PREPARE=false and LISTEN on a connection of its
// own to PostgreSQL (HERALD_LISTEN_DATABASE_URL). Publishes and receipts at concurrency 32 share
// the pooler's four server connections, the group commits' pipelines among them, and each is
// delivered once; an idle worker is woken at once (its polling is a minute apart); a revoked key
// is refused at once. A LISTEN through the pooler hears nothing, and herald says so.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { createPgDb } from '../src/db/pg-pool.ts';
import { createApiKey, revokeKey } from '../src/engine/api-keys.ts';
import { createApp, createEndpoint, publishVia } from './support/fixtures.ts';
import { startTestHerald, type TestHerald } from './support/herald.ts';
import { signedHeaders } from './support/inbound.ts';
import { type PgBouncer, pgbouncerMissing, startPgBouncer } from './support/pgbouncer.ts';
import { type Receiver, startReceiver } from './support/receiver.ts';
import { inParallel } from './support/scale-out.ts';
import { waitFor } from './support/wait.ts';

const SOURCE_SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const CONCURRENCY = 32;

describe('behind PgBouncer in transaction mode', { skip: pgbouncerMissing ?? false }, () => {
  let bouncer: PgBouncer;
  let receiver: Receiver;
  let t: TestHerald;
  let app: string;

  before(async () => {
    bouncer = await startPgBouncer(4);
    receiver = await startReceiver();
    t = await startTestHerald('pgbouncer', {
      env: (url) => ({
        DATABASE_URL: bouncer.through(url),
        HERALD_LISTEN_DATABASE_URL: url,
        HERALD_DB_PREPARE: 'false',
        // A minute between polls: only a wake-up that LISTEN heard delivers within the tests' waits.
        HERALD_POLL_INTERVAL_MS: '60000',
        HERALD_DB_POOL_SIZE: '8',
        HERALD_API_RATE_LIMIT: '0',
      }),
    });
    app = await createApp(t, 'pooled');
    for (const name of ['a', 'b', 'c']) await createEndpoint(t, app, { url: `${receiver.url}/${name}` });
  });
  after(async () => {
    await t?.close();
    await receiver?.close();
    await bouncer?.close();
  });

  const succeeded = async () =>
    (
      await t.database.db.query<{ n: number }>(
        `select count(*)::int as n from delivery where app_id = $1 and state = 'succeeded'`,
        [app],
      )
    ).rows[0]!.n;

  /** Every request the receiver had is one (message, endpoint) pair, none twice. */
  function assertEachOnce(expected: number): void {
    const pairs = receiver.requests.map((r) => `${r.headers['webhook-id']} ${r.path}`);
    assert.equal(pairs.length, expected);
    assert.equal(new Set(pairs).size, expected, 'no request was sent twice');
  }

  test('publishes at concurrency 32 are each delivered once, the worker woken by what LISTEN hears', async () => {
    const N = 300;
    await inParallel(N, CONCURRENCY, async (i) => {
      await publishVia(t, app, { eventType: 'e', payload: { i } });
    });
    await waitFor('every delivery to succeed', async () => (await succeeded()) === N * 3, 30_000);
    assertEachOnce(N * 3);

    // Idle now: one more publish is sent at once, not at the next poll a minute away.
    const message = await publishVia(t, app, { eventType: 'e', payload: { late: true } });
    await waitFor(
      'the idle worker to send it',
      () => receiver.requests.filter((r) => r.headers['webhook-id'] === message).length === 3,
      5_000,
    );
  });

  test('signed receipts at concurrency 32, each delivered twice, make one message each', async () => {
    const created = await t.call('POST', '/api/v1/source', {
      uid: 'pooled-feed',
      scheme: 'standard-webhooks',
      secret: SOURCE_SECRET,
      app: 'pooled',
      eventType: 'feed.item',
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const signer = new Webhook(SOURCE_SECRET.slice('whsec_'.length));
    const before = receiver.requests.length;
    const N = 100;
    const statuses: number[] = [];
    // Each delivery id twice, the copies in flight together: the provider's redelivery.
    await inParallel(N * 2, CONCURRENCY, async (i) => {
      const id = `evt_${i % N}`;
      const body = JSON.stringify({ item: i % N });
      const response = await fetch(`${t.url}/ingest/pooled-feed`, {
        method: 'POST',
        headers: signedHeaders(signer, id, body),
        body,
      });
      await response.arrayBuffer();
      statuses.push(response.status);
    });
    assert.deepEqual([...new Set(statuses)], [204]);
    const { rows } = await t.database.db.query<{ claims: number; observations: number; messages: number }>(
      `select (select count(*) from intake)::int as claims,
              (select count(*) from intake_observation)::int as observations,
              (select count(distinct message_id) from intake)::int as messages`,
    );
    assert.deepEqual(rows[0], { claims: N, observations: N * 2, messages: N });
    await waitFor(
      'every relayed message to be delivered',
      () => receiver.requests.length === before + N * 3,
      30_000,
    );
    assertEachOnce(before + N * 3);
  });

  test('a revoked API key is refused at once: the cache heard the revocation', async () => {
    const { key, id } = await t.database.db.transaction((tx) =>
      createApiKey(tx, 'test', { name: 'pooled', scopes: ['admin'], appIds: null }),
    );
    const status = async () =>
      (await fetch(`${t.url}/api/v1/app`, { headers: { authorization: `Bearer ${key}` } })).status;
    assert.equal(await status(), 200);
    await t.database.db.transaction((tx) => revokeKey(tx, 'test', id));
    // Cached keys live 5 s when no announcement comes: refused well within that, it was heard.
    await waitFor('the revoked key to be refused', async () => (await status()) === 401, 2_000);
  });

  test('named statements do fail through this pooler: what HERALD_DB_PREPARE=false is for', async () => {
    const named = createPgDb({ connectionString: bouncer.through(t.database.url), max: 8 });
    try {
      const results = await Promise.allSettled(
        Array.from({ length: 64 }, (_, i) => named.query('select $1::int as n', [i], 'probe')),
      );
      const codes = new Set(
        results.flatMap((r) => (r.status === 'rejected' ? [(r.reason as { code?: string }).code] : [])),
      );
      // 42P05: "prepared statement already exists" (another client prepared it on that session);
      // 26000: "does not exist" (this client prepared it on another).
      assert.ok(codes.has('42P05') || codes.has('26000'), `failures: ${[...codes].join(', ') || 'none'}`);
      // And the error says what to do.
      const failed = results.find((r) => r.status === 'rejected') as PromiseRejectedResult;
      assert.match((failed.reason as Error).message, /set HERALD_DB_PREPARE=false/);
    } finally {
      await named.close();
    }
  });

  test('a LISTEN through the pooler hears nothing, and the check says so; one to PostgreSQL hears', async () => {
    const check = async (listenUrl: string) => {
      const states: string[] = [];
      const db = createPgDb({
        connectionString: bouncer.through(t.database.url),
        listenConnectionString: listenUrl,
        prepare: false,
        checkHearing: true,
        onListenState: (state) => states.push(state),
      });
      try {
        await db.listen('herald_work', () => {});
        return await waitFor(
          'the check to end',
          () => states.find((s) => s === 'hearing' || s === 'deaf'),
          10_000,
        );
      } finally {
        await db.close();
      }
    };
    assert.equal(await check(bouncer.through(t.database.url)), 'deaf');
    assert.equal(await check(t.database.url), 'hearing');
  });
});
