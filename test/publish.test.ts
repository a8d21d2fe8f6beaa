// Invariants 1 and 2: acceptance is a database fact, and publishing is idempotent.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import { Webhook } from 'svix';
import { loadConfig } from '../src/config.ts';
import type { HeraldError } from '../src/errors.ts';
import { createHerald, createLogger } from '../src/herald.ts';
import { createApp, createEndpoint, publishVia } from './support/fixtures.ts';
import { ADMIN_KEY, startTestHerald, type TestHerald, testEnv } from './support/herald.ts';
import { idMintedAt } from './support/ids.ts';
import { type Receiver, startReceiver } from './support/receiver.ts';
import { waitFor, waitForLockWaiter } from './support/wait.ts';

let t: TestHerald;
let receiver: Receiver;

before(async () => {
  t = await startTestHerald('publish');
  receiver = await startReceiver();
});
after(async () => {
  await t.close();
  await receiver.close();
});

const count = async (sql: string, params: unknown[]) =>
  (await t.database.db.query<{ n: number }>(`select count(*)::int as n ${sql}`, params)).rows[0]!.n;

describe('the subscription snapshot', () => {
  test('one delivery per endpoint subscribed at publish time, disabled ones included; no backfill', async () => {
    const app = await createApp(t, 'snapshot');
    const matching = await createEndpoint(t, app, { url: `${receiver.url}/a`, filterTypes: ['order.paid'] });
    const other = await createEndpoint(t, app, { url: `${receiver.url}/b`, filterTypes: ['order.refunded'] });
    const disabled = await createEndpoint(t, app, { url: `${receiver.url}/c`, disabled: true });
    const channelled = await createEndpoint(t, app, { url: `${receiver.url}/d`, channels: ['eu'] });
    const msg = await publishVia(t, app, { eventType: 'order.paid', payload: { n: 1 }, channels: ['us'] });
    const late = await createEndpoint(t, app, { url: `${receiver.url}/e` });

    const rows = await t.database.db.query<{ endpoint_id: string; state: string }>(
      'select endpoint_id, state from delivery where message_id = $1 order by endpoint_id',
      [msg],
    );
    const endpoints = rows.rows.map((r) => r.endpoint_id).sort();
    assert.deepEqual(endpoints, [matching, disabled].sort());
    assert.ok(!endpoints.includes(other) && !endpoints.includes(channelled) && !endpoints.includes(late));
    const audit = await count('from audit_entry where target_id = $1 and action = $2', [
      msg,
      'message.created',
    ]);
    assert.equal(audit, 1);
    await waitFor('the matching endpoint to be delivered', () =>
      receiver.requests.some((r) => r.path === '/a'),
    );
    const waiting = await t.database.db.query<{ state: string }>(
      'select state from delivery where message_id = $1 and endpoint_id = $2',
      [msg, disabled],
    );
    assert.equal(waiting.rows[0]!.state, 'pending', 'the disabled endpoint’s delivery waits');
    // Still no backfill once the workers have run: the late endpoint got no delivery, no request.
    assert.equal(await count('from delivery where message_id = $1 and endpoint_id = $2', [msg, late]), 0);
    assert.equal(receiver.requests.filter((r) => r.path === '/e').length, 0);
  });

  test('the message, its deliveries and its audit entry commit together: any refused, or the commit failing, answers no 202 and leaves none', async () => {
    // Each event type is refused at one step: the delivery's insert, the audit entry's, the commit.
    await t.database.db.query(
      `create function test_refuse_publish_part() returns trigger language plpgsql as $$
       declare kind text; refused text;
       begin
         if tg_table_name = 'delivery' then
           kind := (select event_type from message where id = new.message_id);
           refused := 'refused.delivery';
         elsif tg_table_name = 'audit_entry' then
           kind := (select event_type from message where id = new.target_id);
           refused := 'refused.audit';
         else
           kind := new.event_type;
           refused := 'refused.commit';
         end if;
         if kind = refused then
           raise exception 'refused for the test' using errcode = '23514';
         end if;
         return new;
       end $$`,
    );
    await t.database.db.query(
      'create trigger test_refuse_delivery before insert on delivery for each row execute function test_refuse_publish_part()',
    );
    await t.database.db.query(
      'create trigger test_refuse_audit before insert on audit_entry for each row execute function test_refuse_publish_part()',
    );
    // Checked at the commit, after every statement of the publish went through.
    await t.database.db.query(
      `create constraint trigger test_refuse_commit after insert on message deferrable initially deferred
       for each row execute function test_refuse_publish_part()`,
    );
    try {
      const app = await createApp(t, 'all-or-nothing');
      await createEndpoint(t, app, { url: `${receiver.url}/all-or-nothing` });
      for (const eventType of ['refused.delivery', 'refused.audit', 'refused.commit']) {
        const answer = await t.call('POST', `/api/v1/app/${app}/msg`, { eventType, payload: {} });
        assert.notEqual(answer.status, 202, `${eventType}: ${JSON.stringify(answer.body)}`);
        assert.equal(await count('from message where event_type = $1', [eventType]), 0, eventType);
      }
      assert.equal(
        await count(
          `from audit_entry where action = 'message.created' and app_id = (select id from app where uid = $1)`,
          ['all-or-nothing'],
        ),
        0,
      );
      assert.equal(
        await count('from delivery d join app a on a.id = d.app_id where a.uid = $1', ['all-or-nothing']),
        0,
      );
      // The triggers refuse those three only: a publish of any other event type goes in whole.
      const accepted = await t.call('POST', `/api/v1/app/${app}/msg`, { eventType: 'accepted', payload: {} });
      assert.equal(accepted.status, 202, JSON.stringify(accepted.body));
      assert.equal(await count('from delivery where message_id = $1', [accepted.body.id]), 1);
      assert.equal(
        await count(`from audit_entry where action = 'message.created' and target_id = $1`, [
          accepted.body.id,
        ]),
        1,
      );
    } finally {
      await t.database.db.query('drop trigger test_refuse_delivery on delivery');
      await t.database.db.query('drop trigger test_refuse_audit on audit_entry');
      await t.database.db.query('drop trigger test_refuse_commit on message');
      await t.database.db.query('drop function test_refuse_publish_part()');
    }
  });
});

describe('the library face', () => {
  test('publish inside the caller’s transaction: rollback sends nothing, commit sends', async () => {
    const app = await createApp(t, 'library');
    await createEndpoint(t, app, { url: `${receiver.url}/lib` });
    const client = new pg.Client({ connectionString: t.database.url });
    await client.connect();
    try {
      await client.query('begin');
      const rolledBack = await t.herald.publish(
        'library',
        { eventType: 'e', payload: { v: 'rolled back' } },
        { db: client },
      );
      await client.query('rollback');

      await client.query('begin');
      const committed = await t.herald.publish(
        'library',
        { eventType: 'e', payload: { v: 'committed' } },
        { db: client },
      );
      // Not visible to anyone (nor sent) before COMMIT.
      assert.equal(await count('from message where id = $1', [committed.message.id]), 0);
      await client.query('commit');

      await waitFor('the committed message to arrive', () =>
        receiver.requests.some((r) => r.path === '/lib'),
      );
      // The worker handles deliveries in due order; the rolled-back one would have come first.
      assert.equal(await count('from message where id = $1', [rolledBack.message.id]), 0);
      assert.equal(await count('from delivery where message_id = $1', [rolledBack.message.id]), 0);
      const bodies = receiver.requests.filter((r) => r.path === '/lib').map((r) => JSON.parse(r.body).v);
      assert.deepEqual(bodies, ['committed']);
    } finally {
      await client.end();
    }
  });

  test('with prepare, herald’s statements are prepared once on the caller’s connection, and the publish is still theirs', async () => {
    const app = await createApp(t, 'library-prepared');
    await createEndpoint(t, app, { url: `${receiver.url}/lib-prepared` });
    const client = new pg.Client({ connectionString: t.database.url });
    await client.connect();
    const prepared = async () =>
      (
        await client.query<{ name: string }>('select name from pg_prepared_statements order by name')
      ).rows.map((r) => r.name);
    try {
      await client.query('begin');
      const plain = await t.herald.publish(
        'library-prepared',
        { eventType: 'e', payload: { v: 0 } },
        { db: client },
      );
      assert.deepEqual(await prepared(), [], 'without prepare, nothing is left on the connection');
      await client.query('rollback');

      const sent: string[] = [];
      for (const v of [1, 2]) {
        await client.query('begin');
        const published = await t.herald.publish(
          'library-prepared',
          { eventType: 'e', payload: { v } },
          { db: client, prepare: true },
        );
        assert.equal(
          await count('from message where id = $1', [published.message.id]),
          0,
          'not before COMMIT',
        );
        await client.query(v === 1 ? 'rollback' : 'commit');
        if (v === 2) sent.push(published.message.id);
      }
      const names = await prepared();
      assert.ok(names.includes('herald:publish_messages'), `prepared: ${names.join(', ')}`);
      assert.ok(
        names.every((name) => name.startsWith('herald:')),
        'every name herald prepared begins with herald:',
      );

      await waitFor('the committed message to arrive', () =>
        receiver.requests.some((r) => r.path === '/lib-prepared'),
      );
      const bodies = receiver.requests
        .filter((r) => r.path === '/lib-prepared')
        .map((r) => JSON.parse(r.body).v);
      assert.deepEqual(bodies, [2], 'only the committed publish is sent');
      assert.equal(await count('from message where id = $1', [plain.message.id]), 0);
      assert.equal(await count('from message where id = any($1)', [sent]), 1);
    } finally {
      await client.end();
    }
  });

  test('prepare asks for a node-postgres client as db, and says so', async () => {
    const notNodePostgres = { query: async () => ({ rows: [] }) };
    for (const options of [{ prepare: true }, { db: notNodePostgres, prepare: true }]) {
      await assert.rejects(
        t.herald.publish('library', { eventType: 'e', payload: {} }, options),
        (error: Error & { code?: string }) => {
          assert.equal(error.code, 'validation');
          assert.match(error.message, /prepare: true needs db, a node-postgres client/);
          return true;
        },
      );
    }
  });

  test('a pool, or herald’s own Db, as db is refused, and nothing is published: it would commit outside the transaction', async () => {
    const pool = new pg.Pool({ connectionString: t.database.url, max: 1 });
    try {
      for (const db of [pool, t.herald.core.db]) {
        await assert.rejects(
          t.herald.publish('library', { eventType: 'e', payload: { pooled: true } }, { db }),
          (error: Error & { code?: string }) => {
            assert.equal(error.code, 'validation');
            assert.match(error.message, /db must be the client your transaction runs on/);
            return true;
          },
        );
      }
      assert.equal(await count(`from message where payload like '%pooled%'`, []), 0);
    } finally {
      await pool.end();
    }
  });

  test('a db that is no client at all is refused by name, as a pool is', async () => {
    for (const db of ['nope', 42, {}]) {
      await assert.rejects(
        // biome-ignore lint/suspicious/noExplicitAny: what a JavaScript caller may pass
        t.herald.publish('library', { eventType: 'e', payload: {} }, { db: db as any }),
        (error: Error & { code?: string }) => {
          assert.equal(error.code, 'validation', String(error));
          assert.match(error.message, /db must be the client your transaction runs on/);
          return true;
        },
      );
    }
  });

  test('a message holding a __proto__ or constructor.prototype key is refused, as the API refuses it, and nothing is published', async () => {
    const poisoned = [
      JSON.parse('{"a":1,"__proto__":{"x":1}}'),
      { a: JSON.parse('{"b":1,"__proto__":{"x":1}}') },
      { list: [{ constructor: { prototype: { x: 1 } } }] },
    ];
    for (const payload of poisoned) {
      await assert.rejects(
        t.herald.publish('library', { eventType: 'e', payload: { ...payload, poisoned: true } }),
        (error: Error & { code?: string }) => {
          assert.equal(error.code, 'bad_request', String(error));
          assert.match(error.message, /__proto__/);
          return true;
        },
      );
    }
    // A spread copies a top-level __proto__ key as the prototype, not a key: the message itself.
    const message = JSON.parse('{"eventType":"e","payload":{"poisoned":true},"__proto__":{"x":1}}');
    await assert.rejects(t.herald.publish('library', message), { code: 'bad_request' });
    assert.equal(await count(`from message where payload like '%poisoned%'`, []), 0);
    // A key merely named so, or a constructor that is a plain value, is a field like any other.
    const fine = await t.herald.publish('library', {
      eventType: 'e',
      payload: { constructor: 'kept', proto: 1, nested: { constructor: { name: 'x' } } },
    });
    assert.equal(fine.created, true);
  });

  test("the library refuses a message field it does not know, naming it (an idempotencyKey belongs in publish's options); the API ignores one, as Svix does", async () => {
    const published = () => count(`from message m join app a on a.id = m.app_id where a.uid = 'library'`, []);
    const before = await published();
    for (const [field, said] of [
      ['idempotencyKey', /idempotencyKey: not a field of a message: publish's options take it/],
      ['eventID', /^eventID: not a field of a message$/],
    ] as const) {
      await assert.rejects(
        t.herald.publish('library', { eventType: 'e', payload: { n: 1 }, [field]: 'k-1' }),
        (error: HeraldError) => {
          assert.equal(error.code, 'validation');
          assert.match(error.message, said);
          assert.deepEqual(error.issues?.[0]?.loc, ['body', field]);
          return true;
        },
      );
    }
    assert.equal(await published(), before);
    const viaApi = await t.call('POST', '/api/v1/app/library/msg', {
      eventType: 'e',
      payload: {},
      eventID: 'x',
    });
    assert.equal(viaApi.status, 202, JSON.stringify(viaApi.body));
  });

  test('close() may be called more than once, at once or after: the first closes, the others wait for it', async () => {
    const config = loadConfig(testEnv(t.database.url));
    const herald = await createHerald({ config, logger: createLogger('silent'), migrate: false });
    await createApp(t, 'closing-app');
    await herald.publish('closing-app', { eventType: 'e', payload: {} });
    await herald.startWorker();
    await Promise.all([herald.close(), herald.close()]);
    await herald.close();
    // To an app that exists: a closed herald refuses it, as it refuses a worker, saying so.
    const refusedAsClosed = (error: Error & { code?: string }) =>
      error.code === 'store_unavailable' && /this herald is closed/.test(error.message);
    await assert.rejects(herald.publish('closing-app', { eventType: 'e', payload: {} }), refusedAsClosed);
    await assert.rejects(herald.startWorker(), refusedAsClosed);
    // In a caller's transaction too: closed, its caches no longer hear of changes.
    const caller = new pg.Client({ connectionString: t.database.url });
    await caller.connect();
    try {
      await assert.rejects(
        herald.publish('closing-app', { eventType: 'e', payload: { afterClose: true } }, { db: caller }),
        refusedAsClosed,
      );
      assert.equal(await count(`from message where payload like '%afterClose%'`, []), 0);
    } finally {
      await caller.end();
    }
    // wake() has nothing to wake: it resolves, and warns of nothing.
    await herald.wake();

    // A worker still starting when close() begins: close() waits for it and stops it.
    const racing = await createHerald({ config, logger: createLogger('silent'), migrate: false });
    const started = racing.startWorker().then(
      () => null,
      (error: Error & { code?: string }) => error,
    );
    await racing.close();
    const refused = await started;
    assert.ok(refused && refusedAsClosed(refused), String(refused));
  });

  /**
   * A library publish to `app` in a caller's transaction while another transaction deletes a row
   * (`deletion`): the deletion commits once the publish waits for it, and `then` gets the publish
   * and the caller's connection, its transaction still open.
   */
  async function publishDuringDeletion(
    app: string,
    deletion: [sql: string, id: string],
    then: (published: ReturnType<typeof t.herald.publish>, caller: pg.Client) => Promise<void>,
  ): Promise<void> {
    const deleting = new pg.Client({ connectionString: t.database.url });
    const caller = new pg.Client({ connectionString: t.database.url });
    await Promise.all([deleting.connect(), caller.connect()]);
    try {
      await deleting.query('begin');
      await deleting.query(deletion[0], [deletion[1]]);
      await caller.query('begin');
      const published = t.herald.publish(app, { eventType: 'e', payload: {} }, { db: caller });
      published.catch(() => {});
      await waitForLockWaiter(t.database.db, 'herald_publish_messages');
      await deleting.query('commit');
      await then(published, caller);
    } finally {
      await Promise.all([deleting.end(), caller.end()]);
    }
  }

  test('an endpoint deleted while a publish waits for it is passed by: the caller’s transaction goes on', async () => {
    const app = await createApp(t, 'deleting');
    const kept = await createEndpoint(t, app, { url: `${receiver.url}/deleting-kept` });
    const doomed = await createEndpoint(t, app, { url: `${receiver.url}/deleting-doomed` });
    await publishDuringDeletion(
      'deleting',
      ['delete from endpoint where id = $1', doomed],
      async (published, caller) => {
        const { message } = await published;
        // The caller's transaction was not aborted: its own work goes on, and commits with the message.
        await caller.query('create temp table caller_work (n int) on commit drop');
        await caller.query('insert into caller_work values (1)');
        await caller.query('commit');
        const deliveries = await t.database.db.query<{ endpoint_id: string }>(
          'select endpoint_id from delivery where message_id = $1',
          [message.id],
        );
        assert.deepEqual(
          deliveries.rows.map((r) => r.endpoint_id),
          [kept],
        );
      },
    );
  });

  test('an app deleted while a publish in the caller’s transaction waits for it: the database’s error, not “not found”', async () => {
    const app = await createApp(t, 'vanishing');
    await publishDuringDeletion(
      'vanishing',
      ['delete from app where id = $1', app],
      async (published, caller) => {
        // PostgreSQL aborted the caller's transaction: the error says so (a foreign key violation),
        // where "not found" would read like the usable transaction of a lookup that missed.
        await assert.rejects(published, (error: { code?: string; constraint?: string }) => {
          assert.equal(error.code, '23503');
          assert.equal(error.constraint, 'message_app_id_fkey');
          return true;
        });
        await caller.query('rollback');
      },
    );
  });

  test('on the embedded database, a publish takes herald’s own transaction as its db, as the README shows', async () => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'herald-embedded-library-'));
    const embedded = await createHerald({ env: { HERALD_DATA_DIR: dataDir, LOG_LEVEL: 'silent' } });
    try {
      await embedded.core.db.query(`insert into app (name, uid) values ('acme', 'acme')`, []);
      const published = await embedded.core.db.transaction(async (tx) => {
        const { message } = await embedded.publish('acme', { eventType: 'e', payload: { n: 1 } }, { db: tx });
        await tx.query('select 1', []);
        return message.id;
      });
      const stored = await embedded.core.db.query('select 1 from message where id = $1', [published]);
      assert.equal(stored.rowCount, 1);
      await embedded.wake();
    } finally {
      await embedded.close();
      fs.rmSync(dataDir, { recursive: true, force: true });
    }
  });

  test('the library validates like the API', async () => {
    await assert.rejects(
      t.herald.publish('library', { eventType: 'bad type!', payload: {} }),
      (error: Error) => {
        assert.match(error.message, /eventType/);
        return true;
      },
    );
    // What only a library caller can hand over: a payload that is no JSON.
    const cyclic: Record<string, unknown> = {};
    cyclic['self'] = cyclic;
    for (const payload of [{ id: 10n }, cyclic]) {
      await assert.rejects(
        t.herald.publish('library', { eventType: 'e', payload }),
        (error: Error & { code?: string }) =>
          error.code === 'validation' && /payload: must be JSON/.test(error.message),
      );
    }
  });
});

describe('application changes made anywhere', () => {
  // Publishers cache the apps they publish to and evict one when the database announces a change
  // (migration 0006's trigger): a change made behind herald's back — here plain SQL — takes effect
  // on the next publishes, well before the cache's 5-second age limit.
  test('a renamed uid and a deleted app take effect on the next publishes', async () => {
    const app = await createApp(t, 'changing-app');
    await publishVia(t, 'changing-app', { eventType: 'e', payload: { n: 1 } });
    const publishTo = (ref: string) =>
      t.call('POST', `/api/v1/app/${ref}/msg`, { eventType: 'e', payload: {} });

    await t.database.db.query(`update app set uid = 'changed-app' where id = $1`, [app]);
    await waitFor(
      'the old uid to be unknown',
      async () => (await publishTo('changing-app')).status === 404,
      2000,
    );
    assert.equal((await publishTo('changed-app')).status, 202);

    await t.database.db.query('delete from app where id = $1', [app]);
    await waitFor('the deleted app to be unknown', async () => (await publishTo(app)).status === 404, 2000);
  });

  test('a uid moved through this API to a new app takes effect on its next publish, announced or not', async () => {
    const first = await createApp(t, 'moving-app');
    await publishVia(t, 'moving-app', { eventType: 'e', payload: { n: 1 } });
    // Unannounced, only the API's own eviction keeps the cached app from taking the publish.
    await t.database.db.query('alter table app disable trigger app_changed');
    try {
      assert.equal((await t.call('PATCH', `/api/v1/app/${first}`, { uid: 'moved-away' })).status, 200);
      const second = await createApp(t, 'moving-app');
      const published = await t.call('POST', '/api/v1/app/moving-app/msg', { eventType: 'e', payload: {} });
      assert.equal(published.status, 202);
      assert.equal((await t.call('GET', `/api/v1/app/${second}/msg/${published.body.id}`)).status, 200);
      assert.equal((await t.call('GET', `/api/v1/app/${first}/msg/${published.body.id}`)).status, 404);
    } finally {
      await t.database.db.query('alter table app enable trigger app_changed');
    }
  });

  test('a publish held by a lock (its app being deleted) is answered 503 within the lock timeout, and holds up no other', async () => {
    const held = await createApp(t, 'locked-app');
    await createApp(t, 'free-app');
    await publishVia(t, 'locked-app', { eventType: 'e', payload: { n: 1 } });
    // As a deletion of the app cascading through its history: its row locked until it commits.
    const deleter = new pg.Client({ connectionString: t.database.url });
    await deleter.connect();
    try {
      await deleter.query('begin');
      await deleter.query('select 1 from app where id = $1 for update', [held]);
      const publishTo = (app: string, extra: Record<string, unknown> = {}) =>
        fetch(`${t.url}/api/v1/app/${app}/msg`, {
          method: 'POST',
          headers: { authorization: `Bearer ${ADMIN_KEY}`, 'content-type': 'application/json' },
          body: JSON.stringify({ eventType: 'e', payload: {}, ...extra }),
          signal: AbortSignal.timeout(15_000),
        }).then(async (r) => ({ status: r.status, body: (await r.json()) as { code?: string } }));
      // A publish that would create its app (`application`) runs in a transaction of its own,
      // outside the group commit: it waits no longer.
      const [blocked, blockedCreating, free] = await Promise.all([
        publishTo('locked-app'),
        publishTo('locked-app', { application: { name: 'locked-app', uid: 'locked-app' } }),
        publishTo('free-app'),
      ]);
      assert.equal(free.status, 202);
      for (const answer of [blocked, blockedCreating]) {
        assert.equal(answer.status, 503, JSON.stringify(answer.body));
        assert.equal(answer.body.code, 'store_unavailable');
      }
      // The library on herald's own pool: the same verdict, as a HeraldError to retry.
      await assert.rejects(
        t.herald.publish('locked-app', { eventType: 'e', payload: {} }),
        (error: Error & { code?: string }) =>
          error.code === 'store_unavailable' && /publish again/.test(error.message),
      );
    } finally {
      await deleter.query('rollback');
      await deleter.end();
    }
    assert.equal(
      (await t.call('POST', '/api/v1/app/locked-app/msg', { eventType: 'e', payload: {} })).status,
      202,
    );
  });

  test('a publish creating an app that another transaction is creating uncommitted is answered 503 within the lock timeout', async () => {
    // As a library caller's transaction that published to this new app and has not committed.
    const creator = new pg.Client({ connectionString: t.database.url });
    await creator.connect();
    const creating = { eventType: 'e', payload: {}, application: { name: 'Pending', uid: 'pending-app' } };
    try {
      await creator.query('begin');
      await creator.query(`insert into app (uid, name) values ('pending-app', 'Pending')`);
      const started = Date.now();
      const answer = await fetch(`${t.url}/api/v1/app/pending-app/msg`, {
        method: 'POST',
        headers: { authorization: `Bearer ${ADMIN_KEY}`, 'content-type': 'application/json' },
        body: JSON.stringify(creating),
        signal: AbortSignal.timeout(15_000),
      });
      assert.equal(answer.status, 503);
      assert.equal(((await answer.json()) as { code: string }).code, 'store_unavailable');
      assert.ok(Date.now() - started < 10_000, `answered after ${Date.now() - started} ms`);
      // The library on herald's own pool: the same verdict.
      await assert.rejects(t.herald.publish('pending-app', creating), { code: 'store_unavailable' });
    } finally {
      await creator.query('rollback');
      await creator.end();
    }
    // The other creator gone, the publish makes the app.
    assert.equal((await t.call('POST', '/api/v1/app/pending-app/msg', creating)).status, 202);
  });

  test('an app a publish creates (`application`) commits with its message and its audit entry, or not at all', async () => {
    // The message of this event type is refused by the database, after the app was made.
    await t.database.db.query(
      `create function test_refuse_message() returns trigger language plpgsql as $$
       begin
         if new.event_type = 'refused.by.test' then raise exception 'refused for the test' using errcode = '23514'; end if;
         return new;
       end $$`,
    );
    await t.database.db.query(
      'create trigger test_refuse_message before insert on message for each row execute function test_refuse_message()',
    );
    const appsCreatedInAudit = async () =>
      (
        await t.database.db.query<{ n: number }>(
          `select count(*)::int as n from audit_entry where action = 'app.created'`,
        )
      ).rows[0]!.n;
    const auditedBefore = await appsCreatedInAudit();
    try {
      const answer = await t.call('POST', '/api/v1/app/born-with-message/msg', {
        eventType: 'refused.by.test',
        payload: {},
        application: { name: 'Born with its message' },
      });
      assert.notEqual(answer.status, 202);
      assert.equal(
        (await t.call('GET', '/api/v1/app/born-with-message')).status,
        404,
        'no app without its message',
      );
      assert.equal(await appsCreatedInAudit(), auditedBefore, 'no audit entry of an app that is not');
    } finally {
      await t.database.db.query('drop trigger test_refuse_message on message');
      await t.database.db.query('drop function test_refuse_message()');
    }
    const made = await t.call('POST', '/api/v1/app/born-with-message/msg', {
      eventType: 'e',
      payload: {},
      application: { name: 'Born with its message' },
    });
    assert.equal(made.status, 202, JSON.stringify(made.body));
  });

  test('a publish to an app deleted before its deletion was announced is not found (404, not 500)', async () => {
    const app = await createApp(t, 'vanishing-app');
    await publishVia(t, 'vanishing-app', { eventType: 'e', payload: { n: 1 } });
    // The announcement is held back: the cache still has the app when the publish runs.
    await t.database.db.query('alter table app disable trigger app_changed');
    try {
      await t.database.db.query('delete from app where id = $1', [app]);
      const answer = await t.call('POST', '/api/v1/app/vanishing-app/msg', { eventType: 'e', payload: {} });
      assert.equal(answer.status, 404, JSON.stringify(answer.body));
      assert.equal(answer.body.code, 'not_found');
      // The library shares the app cache: it says the same, as a HeraldError.
      await assert.rejects(t.herald.publish('vanishing-app', { eventType: 'e', payload: {} }), {
        name: 'HeraldError',
        kind: 'not_found',
      });
    } finally {
      await t.database.db.query('alter table app enable trigger app_changed');
    }
  });
});

describe('the publish response', () => {
  // The API answers a publish with the payload as it sent it to the database (spliced in as JSON
  // text, not parsed and serialised again): it must read exactly as the message reads afterwards.
  test('is the message as GET returns it, with and without content, and again on a replay', async () => {
    const app = await createApp(t, 'response');
    const body = {
      eventType: 'invoice.paid',
      eventId: 'evt-response-1',
      channels: ['eu', 'billing'],
      tags: ['t1'],
      payload: {
        text: 'Grüße, 請求書 ✓ 🧾 "quoted" \\ back\nslash \u2028 sep',
        nested: { list: [1, 2.5, -3e-7, null, true, { deep: [] }], empty: {} },
        n: 12345678901234,
      },
    };
    const published = await t.call('POST', `/api/v1/app/${app}/msg`, body, { 'idempotency-key': 'resp-1' });
    assert.equal(published.status, 202);
    const read = await t.call('GET', `/api/v1/app/${app}/msg/${published.body.id}`);
    assert.deepEqual(published.body, read.body);
    assert.deepEqual(published.body.payload, body.payload);

    const replayed = await t.call('POST', `/api/v1/app/${app}/msg`, body, { 'idempotency-key': 'resp-1' });
    assert.equal(replayed.status, 202);
    assert.deepEqual(replayed.body, read.body);

    const bare = await t.call('POST', `/api/v1/app/${app}/msg?with_content=false`, {
      ...body,
      eventId: 'evt-response-2',
    });
    assert.equal(bare.status, 202);
    const bareRead = await t.call('GET', `/api/v1/app/${app}/msg/${bare.body.id}?with_content=false`);
    assert.deepEqual(bare.body, bareRead.body);
    assert.deepEqual(bare.body.payload, {});
  });

  test('numbers reach the receiver, signed, as the publisher wrote them: 64-bit ids, exponents, trailing zeros', async () => {
    const app = await createApp(t, 'exact-numbers');
    const endpoint = await createEndpoint(t, app, { url: `${receiver.url}/exact` });
    const { key } = (await t.call('GET', `/api/v1/app/${app}/endpoint/${endpoint}/secret`)).body;
    // What a double would give back: 9007199254740992, 1.5, null, 0, 12345678901234567000.
    const payload =
      '{"id":9007199254740993,"amount":1.50,"huge":1e400,"zero":-0,"tiny":0.0000001,"list":[12345678901234567890,0.1,"1e5"]}';
    const published = await fetch(`${t.url}/api/v1/app/${app}/msg`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_KEY}`, 'content-type': 'application/json' },
      body: `{"eventType": "exact.numbers", "payload": ${payload}}`,
    });
    const answer = await published.text();
    assert.equal(published.status, 202, answer);
    assert.ok(answer.includes(`"payload":${payload}`), answer);
    const id = JSON.parse(answer).id as string;
    const read = await fetch(`${t.url}/api/v1/app/${app}/msg/${id}`, {
      headers: { authorization: `Bearer ${ADMIN_KEY}` },
    });
    assert.ok((await read.text()).includes(`"payload":${payload}`));

    const request = await waitFor('the delivery', () => receiver.requests.find((r) => r.path === '/exact'));
    assert.equal(request.body, payload);
    // Signed over those bytes.
    assert.doesNotThrow(() =>
      new Webhook(key).verify(request.body, request.headers as Record<string, string>),
    );

    // A body that begins with a byte-order mark (as some clients write UTF-8) is taken the same way.
    const marked = await fetch(`${t.url}/api/v1/app/${app}/msg`, {
      method: 'POST',
      headers: { authorization: `Bearer ${ADMIN_KEY}`, 'content-type': 'application/json' },
      body: `\uFEFF{"eventType": "exact.numbers", "payload": ${payload}}`,
    });
    const markedAnswer = await marked.text();
    assert.equal(marked.status, 202, markedAnswer);
    assert.ok(markedAnswer.includes(`"payload":${payload}`), markedAnswer);
  });

  test('the library returns the payload it stored', async () => {
    const app = await createApp(t, 'response-lib');
    const payload = { a: 'ä', list: [1, { b: null }] };
    const { message, created } = await t.herald.publish(app, { eventType: 'e', payload });
    assert.ok(created);
    const stored = await t.database.db.query<{ payload: string }>(
      'select payload from message where id = $1',
      [message.id],
    );
    assert.equal(message.payload, stored.rows[0]!.payload);
    assert.deepEqual(JSON.parse(message.payload!), payload);
  });
});

describe('idempotent publish', () => {
  test('a retry that writes a number otherwise (10.50 for 10.5) is the same publish, as it was before numbers were kept as written', async () => {
    const app = await createApp(t, 'idem-numbers');
    const first = await t.call(
      'POST',
      `/api/v1/app/${app}/msg`,
      { eventType: 'e', payload: { amount: 10.5 } },
      {
        'idempotency-key': 'amount-1',
      },
    );
    assert.equal(first.status, 202, JSON.stringify(first.body));
    const retried = await fetch(`${t.url}/api/v1/app/${app}/msg`, {
      method: 'POST',
      headers: {
        authorization: `Bearer ${ADMIN_KEY}`,
        'content-type': 'application/json',
        'idempotency-key': 'amount-1',
      },
      body: '{"eventType":"e","payload":{"amount":10.50}}',
    });
    const answer = (await retried.json()) as { id: string };
    assert.equal(retried.status, 202, JSON.stringify(answer));
    assert.equal(answer.id, first.body.id);
    // Other content under the key is still a conflict.
    const other = await t.call(
      'POST',
      `/api/v1/app/${app}/msg`,
      { eventType: 'e', payload: { amount: 10.51 } },
      {
        'idempotency-key': 'amount-1',
      },
    );
    assert.equal(other.status, 409);

    // The other way round, and with an exponent: one value, one publish. Two numbers a double
    // cannot tell apart are two contents.
    const raw = (key: string, payload: string) =>
      fetch(`${t.url}/api/v1/app/${app}/msg`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${ADMIN_KEY}`,
          'content-type': 'application/json',
          'idempotency-key': key,
        },
        body: `{"eventType":"e","payload":${payload}}`,
      }).then(async (r) => ({ status: r.status, id: ((await r.json()) as { id?: string }).id }));
    const written = await raw('amount-2', '{"amount":10.50,"big":1e3}');
    assert.equal(written.status, 202);
    assert.deepEqual(await raw('amount-2', '{"amount":10.5,"big":1000}'), written);
    assert.deepEqual(await raw('amount-2', '{"amount":1.050e1,"big":1000.0}'), written);
    assert.equal((await raw('id-1', '{"id":9007199254740992}')).status, 202);
    assert.equal((await raw('id-1', '{"id":9007199254740993}')).status, 409);
    assert.equal((await raw('id-1', '{"id":9007199254740992.0}')).status, 202);
  });

  test('same key and content → the same message; different content → 409', async () => {
    const app = await createApp(t, 'idem');
    await createEndpoint(t, app, { url: `${receiver.url}/idem` });
    const body = { eventType: 'e', payload: { a: 1 } };
    const first = await t.call('POST', `/api/v1/app/${app}/msg`, body, { 'idempotency-key': 'k1' });
    const again = await t.call('POST', `/api/v1/app/${app}/msg`, body, { 'idempotency-key': 'k1' });
    assert.equal(first.status, 202);
    assert.equal(again.status, 202);
    assert.equal(again.body.id, first.body.id);
    const conflict = await t.call(
      'POST',
      `/api/v1/app/${app}/msg`,
      { ...body, payload: { a: 2 } },
      { 'idempotency-key': 'k1' },
    );
    assert.equal(conflict.status, 409);
    assert.equal(conflict.body.code, 'idempotency_conflict');
    assert.equal(await count('from message where app_id = $1', [app]), 1);
    assert.equal(
      await count('from delivery d join message m on m.id = d.message_id where m.app_id = $1', [app]),
      1,
    );
  });

  test("a key of intake's own (intake:…) is refused, through the API and the library, and nothing is stored", async () => {
    const app = await createApp(t, 'idem-reserved');
    const body = { eventType: 'e', payload: { a: 1 } };
    const refused = await t.call('POST', `/api/v1/app/${app}/msg`, body, {
      'idempotency-key': 'intake:src_1:evt_1',
    });
    assert.equal(refused.status, 422);
    assert.equal(refused.body.code, 'validation');
    assert.deepEqual(refused.body.detail[0].loc, ['header', 'idempotency-key']);
    await assert.rejects(
      t.herald.publish(app, body, { idempotencyKey: 'intake:src_1:evt_1' }),
      (error: Error & { code?: string }) => error.code === 'validation',
    );
    assert.equal(await count('from message where app_id = $1', [app]), 0);
    // Only the prefix is reserved.
    const taken = await t.call('POST', `/api/v1/app/${app}/msg`, body, { 'idempotency-key': 'my-intake:1' });
    assert.equal(taken.status, 202);
  });

  test('a key longer than 256 characters is refused by name, through the API and the library, and nothing is stored', async () => {
    const app = await createApp(t, 'idem-long');
    const body = { eventType: 'e', payload: { a: 1 } };
    const long = 'k'.repeat(4096);
    const refused = await t.call('POST', `/api/v1/app/${app}/msg`, body, { 'idempotency-key': long });
    assert.equal(refused.status, 422, JSON.stringify(refused.body));
    assert.deepEqual(refused.body.detail[0].loc, ['header', 'idempotency-key']);
    assert.match(refused.body.detail[0].msg, /at most 256 characters/);
    await assert.rejects(
      t.herald.publish(app, body, { idempotencyKey: long }),
      (error: Error & { code?: string }) => error.code === 'validation',
    );
    assert.equal(await count('from message where app_id = $1', [app]), 0);
    const longest = await t.call('POST', `/api/v1/app/${app}/msg`, body, {
      'idempotency-key': 'k'.repeat(256),
    });
    assert.equal(longest.status, 202);
  });

  test('a library key with U+0000 is refused before anything is written: the caller’s transaction goes on; an empty key is none, as in the API', async () => {
    const app = await createApp(t, 'idem-nul');
    const body = { eventType: 'e', payload: { a: 1 } };
    const client = new pg.Client({ connectionString: t.database.url });
    await client.connect();
    try {
      await client.query('begin');
      await assert.rejects(
        t.herald.publish(app, body, { db: client, idempotencyKey: 'a\u0000b' }),
        (error: Error & { code?: string }) => error.code === 'validation' && /U\+0000/.test(error.message),
      );
      // Not aborted: the transaction goes on, and commits what it publishes next.
      await t.herald.publish(app, body, { db: client });
      await client.query('commit');
    } finally {
      await client.end();
    }
    assert.equal(await count('from message where app_id = $1', [app]), 1);
    // Two keys that would be stored alike (U+FFFD for a lone surrogate) are refused too.
    await assert.rejects(
      t.herald.publish(app, body, { idempotencyKey: 'k\uD800' }),
      (error: Error & { code?: string }) => error.code === 'validation',
    );
    const first = await t.herald.publish(app, body, { idempotencyKey: '' });
    const second = await t.herald.publish(app, body, { idempotencyKey: '' });
    assert.notEqual(first.message.id, second.message.id, 'two messages: no key');
  });

  test('concurrent duplicates resolve to one message', async () => {
    const app = await createApp(t, 'idem-race');
    await createEndpoint(t, app, { url: `${receiver.url}/race` });
    const body = { eventType: 'e', payload: { race: true } };
    const responses = await Promise.all(
      Array.from({ length: 20 }, () =>
        t.call('POST', `/api/v1/app/${app}/msg`, body, { 'idempotency-key': 'same' }),
      ),
    );
    assert.deepEqual(
      responses.map((r) => r.status),
      responses.map(() => 202),
    );
    assert.equal(new Set(responses.map((r) => r.body.id)).size, 1);
    assert.equal(await count('from message where app_id = $1', [app]), 1);
    assert.equal(
      await count('from delivery d join message m on m.id = d.message_id where m.app_id = $1', [app]),
      1,
    );
  });
});

describe('waking the workers', () => {
  test('API, library and in-transaction publishes wake an idle worker at once (no polling)', async () => {
    // A poll interval of a minute: only a NOTIFY can bring these deliveries within the deadline.
    const quiet = await startTestHerald('wake', { env: { HERALD_POLL_INTERVAL_MS: '60000' } });
    try {
      const app = await createApp(quiet, 'wake');
      await createEndpoint(quiet, app, { url: `${receiver.url}/wake` });
      const arrived = (n: number) => receiver.requests.filter((r) => r.path === '/wake').length >= n;
      await publishVia(quiet, app, { eventType: 'e', payload: { via: 'api' } });
      await waitFor('the API publish to arrive', () => arrived(1), 5000);
      await quiet.herald.publish('wake', { eventType: 'e', payload: { via: 'library' } });
      await waitFor('the library publish to arrive', () => arrived(2), 5000);
      const client = new pg.Client({ connectionString: quiet.database.url });
      await client.connect();
      try {
        await client.query('begin');
        await quiet.herald.publish(
          'wake',
          { eventType: 'e', payload: { via: 'transaction' } },
          { db: client },
        );
        await client.query('commit');
      } finally {
        await client.end();
      }
      await waitFor('the in-transaction publish to arrive', () => arrived(3), 5000);
    } finally {
      await quiet.close();
    }
  });

  test('a worker stopped and started again is woken again', async () => {
    const quiet = await startTestHerald('wake-restart', {
      worker: false,
      env: { HERALD_POLL_INTERVAL_MS: '60000' },
    });
    try {
      const app = await createApp(quiet, 'wake-restart');
      await createEndpoint(quiet, app, { url: `${receiver.url}/wake-restart` });
      const worker = await quiet.herald.startWorker();
      await worker.stop();
      await worker.start();
      // Its first claim round has found nothing: from here only a NOTIFY brings the delivery.
      await publishVia(quiet, app, { eventType: 'e', payload: {} });
      await waitFor(
        'the publish to arrive',
        () => receiver.requests.some((r) => r.path === '/wake-restart'),
        5000,
      );
    } finally {
      await quiet.close();
    }
  });

  test('wake: false keeps the NOTIFY out of the caller’s transaction; herald.wake() after COMMIT sends it', async () => {
    const quiet = await startTestHerald('wake-after', { env: { HERALD_POLL_INTERVAL_MS: '60000' } });
    const listener = new pg.Client({ connectionString: quiet.database.url });
    const caller = new pg.Client({ connectionString: quiet.database.url });
    try {
      const app = await createApp(quiet, 'wake-after');
      await createEndpoint(quiet, app, { url: `${receiver.url}/wake-after` });
      await Promise.all([listener.connect(), caller.connect()]);
      const heard: string[] = [];
      listener.on('notification', (n) => heard.push(n.payload ?? ''));
      await listener.query('listen herald_work');
      // Notifications arrive in commit order: what is heard before a marker committed later was
      // sent by the transactions before it.
      let markers = 0;
      const heardUpToMarker = async () => {
        const marker = `marker-${++markers}`;
        await caller.query(`select pg_notify('herald_work', $1)`, [marker]);
        await waitFor(`the ${marker}`, () => heard.includes(marker), 5000);
        return heard.splice(0).filter((payload) => payload !== marker);
      };
      const publishInTransaction = async (wake: boolean, n: number) => {
        await caller.query('begin');
        await quiet.herald.publish('wake-after', { eventType: 'e', payload: { n } }, { db: caller, wake });
        await caller.query('commit');
      };

      await publishInTransaction(true, 1);
      assert.deepEqual(await heardUpToMarker(), [''], 'the default publish notifies at its commit');
      await waitFor(
        'the first publish to arrive',
        () => receiver.requests.some((r) => r.path === '/wake-after'),
        5000,
      );

      await publishInTransaction(false, 2);
      assert.deepEqual(await heardUpToMarker(), [], 'wake: false sends no NOTIFY with the commit');
      await quiet.herald.wake();
      assert.deepEqual(await heardUpToMarker(), [''], 'herald.wake() sends one');
      await waitFor(
        'the second publish to arrive (woken, not polled: the poll interval is a minute)',
        () => receiver.requests.filter((r) => r.path === '/wake-after').length === 2,
        5000,
      );

      // Overlapping calls share NOTIFYs: one under way and at most one after it.
      await Promise.all(Array.from({ length: 20 }, () => quiet.herald.wake()));
      const shared = await heardUpToMarker();
      assert.ok(
        shared.length >= 1 && shared.length <= 2,
        `20 overlapping wakes sent ${shared.length} NOTIFYs`,
      );
    } finally {
      await Promise.all([listener.end(), caller.end()]);
      await quiet.close();
    }
  });
});

describe('listing messages by time', () => {
  test('before and after select by creation time, a publish that began before `before` included', async () => {
    const app = await createApp(t, 'by-time');
    const appId = (await t.database.db.query<{ id: string }>(`select id from app where uid = 'by-time'`))
      .rows[0]!.id;
    const day = 86_400_000;
    const now = Date.now();
    /** A message published `ago` ms ago, its id minted `mintedLater` ms after its transaction began. */
    const publishedAgo = async (ago: number, mintedLater = 0) => {
      const id = idMintedAt('msg', now - ago + mintedLater, ago);
      await t.database.db.query(
        `insert into message (id, app_id, event_type, payload, payload_expires_at, created_at)
         values ($1, $2, 'e', '{}', now() + interval '1 day', to_timestamp($3 / 1000.0))`,
        [id, appId, now - ago],
      );
      return id;
    };
    const threeDays = await publishedAgo(3 * day);
    const twoDays = await publishedAgo(2 * day, 20_000);
    const oneDay = await publishedAgo(day);
    const list = async (query: string) => {
      const page = await t.call('GET', `/api/v1/app/${app}/msg?${query}`);
      assert.equal(page.status, 200, JSON.stringify(page.body));
      return (page.body as { data: { id: string }[] }).data.map((m) => m.id);
    };
    const at = (ago: number) => encodeURIComponent(new Date(now - ago).toISOString());
    // Ten seconds after the two-day-old publish began: it is before, although its id was minted after.
    assert.deepEqual(await list(`before=${at(2 * day - 10_000)}`), [twoDays, threeDays]);
    assert.deepEqual(await list(`after=${at(2 * day + 10_000)}`), [oneDay, twoDays]);
    assert.deepEqual(await list(`after=${at(3 * day - 1)}&before=${at(day + 1)}`), [twoDays]);
    assert.deepEqual(await list(`before=${at(4 * day)}`), []);
  });

  test('a timestamp as shown bounds its own row out: after and before set to it leave it out, a millisecond beyond takes it in', async () => {
    const app = await createApp(t, 'own-time');
    const ep = await createEndpoint(t, app, { url: `${receiver.url}/own-time` });
    const msg = await publishVia(t, app, { eventType: 'e', payload: {} });
    await waitFor(
      'its attempt',
      async () => (await t.call('GET', `/api/v1/app/${app}/attempt/msg/${msg}`)).body.data.length === 1,
    );
    // Stored to the microsecond, shown to the millisecond: 536 µs past the millisecond shown.
    const pastShown = `date_trunc('milliseconds', %) + interval '536 microseconds'`;
    await t.database.db.query(
      `update message set created_at = ${pastShown.replace('%', 'created_at')} where id = $1`,
      [msg],
    );
    await t.database.db.query(
      `update attempt set started_at = ${pastShown.replace('%', 'started_at')} where message_id = $1`,
      [msg],
    );
    const shown = {
      msg: (await t.call('GET', `/api/v1/app/${app}/msg/${msg}`)).body.timestamp as string,
      attempt: (await t.call('GET', `/api/v1/app/${app}/attempt/msg/${msg}`)).body.data[0]
        .timestamp as string,
    };
    const shifted = (iso: string, ms: number) =>
      encodeURIComponent(new Date(Date.parse(iso) + ms).toISOString());
    for (const [path, at] of [
      [`/msg`, shown.msg],
      [`/endpoint/${ep}/msg`, shown.msg],
      [`/attempt/endpoint/${ep}`, shown.attempt],
    ] as const) {
      const found = async (query: string) => {
        const page = await t.call('GET', `/api/v1/app/${app}${path}?${query}`);
        assert.equal(page.status, 200, JSON.stringify(page.body));
        return page.body.data.length;
      };
      assert.equal(await found(`after=${shifted(at, 0)}`), 0, `${path}: not after its own time`);
      assert.equal(await found(`before=${shifted(at, 0)}`), 0, `${path}: not before its own time`);
      assert.equal(await found(`after=${shifted(at, -1)}`), 1, `${path}: after a millisecond before`);
      assert.equal(await found(`before=${shifted(at, 1)}`), 1, `${path}: before a millisecond after`);
    }
  });

  test('after alone pages from its moment towards newer messages, as Svix does; an iterator overrides both', async () => {
    const app = await createApp(t, 'tail-after');
    const appId = (await t.database.db.query<{ id: string }>(`select id from app where uid = 'tail-after'`))
      .rows[0]!.id;
    const now = Date.now();
    const hour = 3_600_000;
    // Six messages an hour apart, oldest first: ids[0] six hours ago … ids[5] an hour ago.
    const ids: string[] = [];
    for (let n = 6; n >= 1; n--) {
      const id = idMintedAt('msg', now - n * hour, n * hour);
      await t.database.db.query(
        `insert into message (id, app_id, event_type, payload, payload_expires_at, created_at)
         values ($1, $2, 'e', '{}', now() + interval '1 day', to_timestamp($3 / 1000.0))`,
        [id, appId, now - n * hour],
      );
      ids.push(id);
    }
    const page = async (query: string) => {
      const answer = await t.call('GET', `/api/v1/app/${app}/msg?${query}`);
      assert.equal(answer.status, 200, JSON.stringify(answer.body));
      return answer.body as {
        data: { id: string }[];
        iterator: string | null;
        prevIterator: string | null;
        done: boolean;
      };
    };
    const at = (ago: number) => encodeURIComponent(new Date(now - ago).toISOString());
    // After 5.5 hours ago: the two oldest of the five after it, newest first…
    const first = await page(`after=${at(5.5 * hour)}&limit=2`);
    assert.deepEqual(
      first.data.map((m) => m.id),
      [ids[2], ids[1]],
    );
    assert.equal(first.done, false);
    // …and prevIterator walks on towards newer ones, to the end, missing none.
    const second = await page(`iterator=${first.prevIterator}&limit=2&after=${at(5.5 * hour)}`);
    assert.deepEqual(
      second.data.map((m) => m.id),
      [ids[4], ids[3]],
    );
    const third = await page(`iterator=${second.prevIterator}&limit=2`);
    assert.deepEqual(
      third.data.map((m) => m.id),
      [ids[5]],
    );
    assert.equal(third.done, true);
    // An iterator walks on from where it points, whatever before says.
    const onwards = await page(`iterator=${first.iterator}&before=${at(6.5 * hour)}`);
    assert.deepEqual(
      onwards.data.map((m) => m.id),
      [ids[0]],
    );
    // herald's own window (both bounds, which Svix refuses) holds on every page, not the first only.
    const window = `after=${at(5.5 * hour)}&before=${at(1.5 * hour)}&limit=2`;
    const inside = await page(window);
    assert.deepEqual(
      inside.data.map((m) => m.id),
      [ids[4], ids[3]],
    );
    const insideNext = await page(`${window}&iterator=${inside.iterator}`);
    assert.deepEqual(
      insideNext.data.map((m) => m.id),
      [ids[2], ids[1]],
    );
    assert.equal((await page(`${window}&iterator=${insideNext.iterator}`)).data.length, 0);
    // So does before in herald's ascending walk (Svix's message list has no order).
    const upTo = `order=ascending&before=${at(3.5 * hour)}&limit=2`;
    const oldest = await page(upTo);
    assert.deepEqual(
      oldest.data.map((m) => m.id),
      [ids[0], ids[1]],
    );
    assert.deepEqual(
      (await page(`${upTo}&iterator=${oldest.iterator}`)).data.map((m) => m.id),
      [ids[2]],
    );
    // An empty iterator is no iterator: the first page, not an empty end.
    const empty = await page('iterator=&limit=2');
    assert.deepEqual(
      empty.data.map((m) => m.id),
      [ids[5], ids[4]],
    );
  });
});

describe("an endpoint's statistics over a window", () => {
  test('since and until count the deliveries of the messages published in the window', async () => {
    const app = await createApp(t, 'stats-window');
    // Disabled: its pending delivery waits, whatever the worker does.
    const ep = await createEndpoint(t, app, { url: `${receiver.url}/stats`, disabled: true });
    assert.equal((await t.call('GET', `/api/v1/app/${app}/endpoint/${ep}`)).body.disabled, true);
    const appId = (await t.database.db.query<{ id: string }>(`select id from app where uid = 'stats-window'`))
      .rows[0]!.id;
    const day = 86_400_000;
    const now = Date.now();
    for (const [ago, state] of [
      [40 * day, 'failed'],
      [3 * day, 'failed'],
      [2 * day, 'succeeded'],
      [day, 'pending'],
    ] as const) {
      await t.database.db.query(
        `with m as (insert into message (id, app_id, event_type, payload, payload_expires_at, created_at)
                    values ($1, $2, 'e', '{}', now() + interval '1 day', to_timestamp($4 / 1000.0)) returning id)
         insert into delivery (app_id, message_id, endpoint_id, state, next_attempt_at)
         select $2, m.id, $3, $5, case when $5 = 'pending' then now() end from m`,
        [idMintedAt('msg', now - ago), appId, ep, now - ago, state],
      );
    }
    const stats = async (query: string) => {
      const answer = await t.call('GET', `/api/v1/app/${app}/endpoint/${ep}/stats${query}`);
      assert.equal(answer.status, 200, JSON.stringify(answer.body));
      const { pending, success, fail } = answer.body as Record<string, number>;
      return { pending, success, fail };
    };
    const at = (ago: number) => encodeURIComponent(new Date(now - ago).toISOString());
    // Svix's default window: the 28 days until now.
    assert.deepEqual(await stats(''), { pending: 1, success: 1, fail: 1 });
    assert.deepEqual(await stats(`?since=${at(50 * day)}`), { pending: 1, success: 1, fail: 2 });
    // Moments outside what an id can say still bound the count: from the beginning, to the end.
    assert.deepEqual(await stats('?since=1900-01-01T00:00:00Z&until=9999-12-31T00:00:00Z'), {
      pending: 1,
      success: 1,
      fail: 2,
    });
    // `since` inclusive, `until` exclusive.
    assert.deepEqual(await stats(`?since=${at(2 * day)}&until=${at(day)}`), {
      pending: 0,
      success: 1,
      fail: 0,
    });
    assert.deepEqual(await stats(`?since=${at(2.5 * day)}`), { pending: 1, success: 1, fail: 0 });
    assert.deepEqual(await stats(`?until=${at(1.5 * day)}`), { pending: 0, success: 1, fail: 1 });
    assert.deepEqual(await stats(`?since=${at(2.5 * day)}&until=${at(1.5 * day)}`), {
      pending: 0,
      success: 1,
      fail: 0,
    });
    const refused = await t.call('GET', `/api/v1/app/${app}/endpoint/${ep}/stats?since=yesterday`);
    assert.equal(refused.status, 422);
    assert.match(JSON.stringify(refused.body), /since/);
  });
});

describe("an endpoint's messages and attempts, filtered", () => {
  test('status, event types, channel and time select the messages and attempts they name', async () => {
    const app = await createApp(t, 'ep-history');
    const ep = await createEndpoint(t, app, { url: `${receiver.url}/history`, disabled: true });
    const appId = (await t.database.db.query<{ id: string }>(`select id from app where uid = 'ep-history'`))
      .rows[0]!.id;
    const day = 86_400_000;
    const now = Date.now();
    const sent: Record<string, string> = {};
    for (const [name, ago, state, eventType, channel] of [
      ['old', 3 * day, 'failed', 'invoice.paid', 'eu'],
      ['middle', 2 * day, 'succeeded', 'invoice.sent', 'us'],
      ['recent', day, 'pending', 'invoice.paid', 'us'],
    ] as const) {
      const id = idMintedAt('msg', now - ago);
      sent[name] = id;
      await t.database.db.query(
        `with m as (insert into message (id, app_id, event_type, channels, payload, payload_expires_at, created_at)
                    values ($1, $2, $5, array[$6], '{}', now() + interval '1 day', to_timestamp($4 / 1000.0))
                    returning id),
              d as (insert into delivery (app_id, message_id, endpoint_id, state, next_attempt_at, attempts_total,
                                          attempts_in_cycle)
                    select $2, m.id, $3, $7, case when $7 = 'pending' then now() end, 1, 1 from m returning id)
         insert into attempt (id, app_id, delivery_id, message_id, endpoint_id, cycle, lease_token, trigger, url,
                              started_at, finished_at, outcome, status_code)
         select $8, $2, d.id, $1, $3, 1, gen_random_uuid(), 'scheduled', 'http://127.0.0.1:1/history',
                to_timestamp($4 / 1000.0), to_timestamp($4 / 1000.0),
                case when $7 = 'succeeded' then 'success' when $7 = 'pending' then 'unknown' else 'failure' end,
                case when $7 = 'succeeded' then 204 when $7 = 'pending' then null else 500 end
           from d`,
        [id, appId, ep, now - ago, eventType, channel, state, idMintedAt('atmpt', now - ago)],
      );
    }
    const ids = async (path: string) => {
      const page = await t.call('GET', `/api/v1/app/${app}${path}`);
      assert.equal(page.status, 200, JSON.stringify(page.body));
      return (page.body as { data: { id?: string; msgId?: string }[] }).data.map((m) => m.msgId ?? m.id);
    };
    const at = (ago: number) => encodeURIComponent(new Date(now - ago).toISOString());
    const messages = `/endpoint/${ep}/msg`;
    assert.deepEqual(await ids(messages), [sent['recent'], sent['middle'], sent['old']]);
    assert.deepEqual(await ids(`${messages}?status=0`), [sent['middle']]);
    assert.deepEqual(await ids(`${messages}?status=2`), [sent['old']]);
    assert.deepEqual(await ids(`${messages}?status=1`), [sent['recent']]);
    assert.deepEqual(await ids(`${messages}?status=3`), []);
    // Canceled, in the Svix SDKs' enum: no herald delivery is, on either list.
    assert.deepEqual(await ids(`${messages}?status=4`), []);
    assert.deepEqual(await ids(`/attempt/endpoint/${ep}?status=4`), []);
    assert.deepEqual(await ids(`${messages}?status=`), [sent['recent'], sent['middle'], sent['old']]);
    assert.deepEqual(await ids(`${messages}?event_types=invoice.paid`), [sent['recent'], sent['old']]);
    assert.deepEqual(await ids(`${messages}?channel=us`), [sent['recent'], sent['middle']]);
    assert.deepEqual(await ids(`${messages}?before=${at(1.5 * day)}`), [sent['middle'], sent['old']]);
    assert.deepEqual(await ids(`${messages}?after=${at(2.5 * day)}`), [sent['recent'], sent['middle']]);
    assert.deepEqual(await ids(`${messages}?before=${at(4 * day)}`), []);
    // The endpoint's attempts, by the time each started.
    const attempts = `/attempt/endpoint/${ep}`;
    assert.deepEqual(await ids(`${attempts}?before=${at(1.5 * day)}`), [sent['middle'], sent['old']]);
    assert.deepEqual(await ids(`${attempts}?after=${at(2.5 * day)}&before=${at(1.5 * day)}`), [
      sent['middle'],
    ]);
    // …by the class of their response, and by their message's event type and channel.
    assert.deepEqual(await ids(`${attempts}?status_code_class=500`), [sent['old']]);
    assert.deepEqual(await ids(`${attempts}?status_code_class=200`), [sent['middle']]);
    assert.deepEqual(await ids(`${attempts}?status_code_class=0`), [sent['recent']]);
    assert.deepEqual(await ids(`${attempts}?event_types=invoice.sent`), [sent['middle']]);
    assert.deepEqual(await ids(`${attempts}?channel=eu`), [sent['old']]);
    assert.deepEqual(await ids(`/attempt/msg/${sent['old']}?channel=us`), []);
    const refused = await t.call('GET', `/api/v1/app/${app}${attempts}?status_code_class=250`);
    assert.equal(refused.status, 422);
    assert.match(JSON.stringify(refused.body), /status_code_class.*one of 0, 100, 200, 300, 400, 500/);

    // A list of event types as PHP and Rails clients spell it, brackets encoded or not.
    assert.deepEqual(await ids(`${messages}?event_types%5B%5D=invoice.sent`), [sent['middle']]);
    assert.deepEqual(await ids(`${messages}?event_types[0]=invoice.sent&event_types[1]=invoice.paid`), [
      sent['recent'],
      sent['middle'],
      sent['old'],
    ]);
    assert.deepEqual(await ids(`${attempts}?event_types[]=invoice.paid&event_types=invoice.sent`), [
      sent['recent'],
      sent['middle'],
      sent['old'],
    ]);

    // An attempt's content is its response body, left out with with_content=false.
    await t.database.db.query(`update attempt set response_body = 'refused' where message_id = $1`, [
      sent['old'],
    ]);
    const withBody = await t.call('GET', `/api/v1/app/${app}${attempts}?status_code_class=500`);
    assert.equal(withBody.body.data[0].response, 'refused');
    const without = await t.call(
      'GET',
      `/api/v1/app/${app}${attempts}?status_code_class=500&with_content=false`,
    );
    // As Svix answers it: a client that parses it as JSON does not fail.
    assert.equal(without.body.data[0].response, '{}');
    const byMessage = await t.call('GET', `/api/v1/app/${app}/attempt/msg/${sent['old']}?with_content=false`);
    assert.equal(byMessage.body.data[0].response, '{}');

    // A message still waiting for its first attempt (the endpoint is disabled) is the endpoint's
    // too, with its tags.
    const waiting = await publishVia(t, app, { eventType: 'invoice.paid', payload: {}, tags: ['late'] });
    const page = await t.call('GET', `/api/v1/app/${app}${messages}?status=1`);
    assert.deepEqual(
      page.body.data.map((m: { id: string; tags: string[] | null }) => [m.id, m.tags]),
      [
        [waiting, ['late']],
        [sent['recent'], null],
      ],
    );
  });
});

describe('listing by tag', () => {
  test('message, attempt and attempted-message lists keep the messages with the tag', async () => {
    const app = await createApp(t, 'by-tag');
    const ep = await createEndpoint(t, app, { url: `${receiver.url}/by-tag` });
    const tagged: Record<string, string> = {};
    for (const tags of [['a'], ['b'], ['a', 'b']]) {
      tagged[tags.join('+')] = await publishVia(t, app, { eventType: 'e', payload: {}, tags });
    }
    await waitFor('three attempts', async () => {
      const { rows } = await t.database.db.query<{ n: number }>(
        `select count(*)::int as n from attempt where endpoint_id = $1 and outcome is not null`,
        [ep],
      );
      return rows[0]!.n === 3;
    });
    const ids = async (path: string) => {
      const page = await t.call('GET', `/api/v1/app/${app}${path}`);
      assert.equal(page.status, 200, JSON.stringify(page.body));
      return (page.body as { data: { id?: string; msgId?: string }[] }).data
        .map((m) => m.msgId ?? m.id)
        .sort();
    };
    const withA = [tagged['a'], tagged['a+b']].sort();
    const withB = [tagged['b'], tagged['a+b']].sort();
    assert.deepEqual(await ids('/msg?tag=a'), withA);
    assert.deepEqual(await ids('/msg?tag=b'), withB);
    assert.deepEqual(await ids('/msg?tag=c'), []);
    assert.deepEqual(await ids(`/attempt/endpoint/${ep}?tag=b`), withB);
    assert.deepEqual(await ids(`/endpoint/${ep}/msg?tag=a`), withA);
    assert.deepEqual(await ids(`/attempt/msg/${tagged['a']}?tag=b`), []);
    assert.deepEqual(await ids(`/attempt/msg/${tagged['a']}?tag=a`), [tagged['a']]);
  });
});

describe('a message whose payload is gone', () => {
  test('reads as {"expired": true} with content, {} without, as in Svix', async () => {
    const app = await createApp(t, 'expunged');
    const id = await publishVia(t, app, { eventType: 'e', payload: { secret: 1 } });
    assert.equal((await t.call('DELETE', `/api/v1/app/${app}/msg/${id}/content`)).status, 204);
    const read = await t.call('GET', `/api/v1/app/${app}/msg/${id}`);
    assert.deepEqual(read.body.payload, { expired: true });
    const listed = await t.call('GET', `/api/v1/app/${app}/msg`);
    assert.deepEqual(listed.body.data[0].payload, { expired: true });
    const bare = await t.call('GET', `/api/v1/app/${app}/msg/${id}?with_content=false`);
    assert.deepEqual(bare.body.payload, {});
  });

  test('expunged, it keeps no digest of its content; a repeat of its idempotency key gets the message', async () => {
    const app = await createApp(t, 'expunged-keyed');
    const body = { eventType: 'e', payload: { pin: '4321' } };
    const key = { 'idempotency-key': 'expunge-me' };
    const first = await t.call('POST', `/api/v1/app/${app}/msg`, body, key);
    assert.equal(first.status, 202, JSON.stringify(first.body));
    assert.equal((await t.call('DELETE', `/api/v1/app/${app}/msg/${first.body.id}/content`)).status, 204);
    // A plain SHA-256 of the request would let a reader of the table test guesses of the PIN.
    const stored = await t.database.db.query('select request_hash from message where id = $1', [
      first.body.id,
    ]);
    assert.equal(stored.rows[0]!.request_hash, null);
    const again = await t.call('POST', `/api/v1/app/${app}/msg`, body, key);
    assert.equal(again.status, 202, JSON.stringify(again.body));
    assert.equal(again.body.id, first.body.id);
    // Other content under the key has nothing left to be told apart from: the key names the
    // message, which it gets, and no second message is made (invariant 2 after an expunge).
    const other = await t.call('POST', `/api/v1/app/${app}/msg`, { ...body, payload: { pin: '0000' } }, key);
    assert.equal(other.status, 202, JSON.stringify(other.body));
    assert.equal(other.body.id, first.body.id);
    assert.deepEqual(other.body.payload, { expired: true });
  });

  test('past its retention, before the job that clears it has run, a repeat of its key answers as after it', async () => {
    const app = await createApp(t, 'expired-keyed');
    const body = { eventType: 'e', payload: { pin: '1234' } };
    const key = { 'idempotency-key': 'expire-me' };
    const first = await t.call('POST', `/api/v1/app/${app}/msg`, body, key);
    assert.equal(first.status, 202, JSON.stringify(first.body));
    // Its retention ends; the payload and its digest are still in the row, to be cleared.
    await t.database.db.query(
      `update message set payload_expires_at = now() - interval '1 second' where id = $1`,
      [first.body.id],
    );
    const read = await t.call('GET', `/api/v1/app/${app}/msg/${first.body.id}`);
    assert.deepEqual(read.body.payload, { expired: true });
    // The same content does not bring the payload back, and other content is no conflict: the
    // key names the message, as it does once the payload is cleared.
    for (const payload of [body.payload, { pin: '0000' }]) {
      const again = await t.call('POST', `/api/v1/app/${app}/msg`, { ...body, payload }, key);
      assert.equal(again.status, 202, JSON.stringify(again.body));
      assert.equal(again.body.id, first.body.id);
      assert.deepEqual(again.body.payload, { expired: true });
    }
  });
});

describe('resending a delivery in flight', () => {
  test('is queued behind the attempt: that attempt ends as it will, then a new cycle starts at once', async () => {
    const app = await createApp(t, 'resend-in-flight');
    const ep = await createEndpoint(t, app, { url: `${receiver.url}/in-flight` });
    const answering = receiver.respond;
    let hanging = 0;
    receiver.respond = (request, n) => {
      if (request.path !== '/in-flight') return answering(request, n);
      hanging++;
      // The first request hangs until its deadline (3 s here): an unknown outcome. The next is answered.
      return hanging === 1 ? 'hang' : { status: 204 };
    };
    try {
      const id = await publishVia(t, app, { eventType: 'e', payload: {} });
      await waitFor('the request to wait at the receiver', () => hanging === 1);
      const resent = await t.call('POST', `/api/v1/app/${app}/msg/${id}/endpoint/${ep}/resend`);
      assert.equal(resent.status, 202, JSON.stringify(resent.body));
      const audited = await t.database.db.query<{ details: unknown }>(
        `select details from audit_entry where action = 'message.resent' and target_id = $1`,
        [id],
      );
      assert.deepEqual(
        audited.rows.map((r) => r.details),
        [{ endpointId: ep, queued: true }],
      );
      assert.equal(hanging, 1, 'still one request in flight to the endpoint');
      await waitFor('the resend to succeed', async () => {
        const { rows } = await t.database.db.query<{ state: string }>(
          'select state from delivery where message_id = $1',
          [id],
        );
        return rows[0]?.state === 'succeeded';
      });
      // The hung attempt's outcome was recorded (unknown, at its deadline), and the resend started
      // a new cycle at once, its attempt a manual one.
      const { rows } = await t.database.db.query<{ outcome: string; cycle: number; trigger: string }>(
        `select a.outcome, a.cycle, a.trigger from attempt a
           join delivery d on d.id = a.delivery_id where d.message_id = $1 order by a.started_at`,
        [id],
      );
      assert.deepEqual(rows, [
        { outcome: 'unknown', cycle: 1, trigger: 'scheduled' },
        { outcome: 'success', cycle: 2, trigger: 'manual' },
      ]);
      assert.equal(hanging, 2);
      assert.equal(receiver.maxConcurrentByPath.get('/in-flight'), 1);
    } finally {
      receiver.respond = answering;
    }
  });
});
