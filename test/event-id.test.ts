// An eventId names one message of its app, as in Svix: a second publish with it is a 409 and
// stores nothing — over HTTP, under concurrent publishes (one group commit or several), and in
// the caller's own transaction — while an idempotent retry still gets its message back.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import { migrate, readMigrations } from '../src/db/migrate.ts';
import { HeraldError } from '../src/errors.ts';
import { freshDatabase } from './support/database.ts';
import { createApp, createEndpoint } from './support/fixtures.ts';
import { startTestHerald, type TestHerald } from './support/herald.ts';
import { seedApp } from './support/seed.ts';

let t: TestHerald;

before(async () => {
  t = await startTestHerald('event_id');
});
after(async () => {
  await t.close();
});

const count = async (sql: string, params: unknown[]) =>
  (await t.database.db.query<{ n: number }>(`select count(*)::int as n ${sql}`, params)).rows[0]!.n;

const publish = (app: string, body: Record<string, unknown>, key?: string) =>
  t.call('POST', `/api/v1/app/${app}/msg`, body, key ? { 'idempotency-key': key } : {});

describe('an eventId names one message of its app', () => {
  test('a second publish with it is a 409 naming the message; nothing more is stored or delivered', async () => {
    const app = await createApp(t, 'evt-once');
    const endpoint = await createEndpoint(t, app, { url: 'http://127.0.0.1:9/never', disabled: true });
    const first = await publish(app, {
      eventType: 'order.paid',
      eventId: 'order-42-paid',
      payload: { n: 1 },
    });
    assert.equal(first.status, 202, JSON.stringify(first.body));
    const again = await publish(app, {
      eventType: 'order.paid',
      eventId: 'order-42-paid',
      payload: { n: 2 },
    });
    assert.equal(again.status, 409, JSON.stringify(again.body));
    assert.equal(again.body.code, 'conflict');
    assert.match(again.body.detail, new RegExp(first.body.id));
    assert.equal(await count('from message where event_id = $1', ['order-42-paid']), 1);
    assert.equal(await count('from delivery where endpoint_id = $1', [endpoint]), 1);
    // The eventId still finds the first message.
    const found = await t.call('GET', `/api/v1/app/${app}/msg/order-42-paid`);
    assert.deepEqual([found.body.id, found.body.payload], [first.body.id, { n: 1 }]);
  });

  test('concurrent publishes with one eventId: exactly one is stored', async () => {
    const app = await createApp(t, 'evt-race');
    for (let round = 0; round < 3; round++) {
      const eventId = `race-${round}`;
      const answers = await Promise.all(
        Array.from({ length: 24 }, (_, i) => publish(app, { eventType: 'e', eventId, payload: { i } })),
      );
      const statuses = answers.map((a) => a.status).sort();
      assert.deepEqual(statuses, [202, ...Array(23).fill(409)], JSON.stringify(answers.map((a) => a.body)));
      assert.equal(await count('from message where event_id = $1', [eventId]), 1);
    }
  });

  test('an idempotent retry with the same key gets its message back; another app may use the eventId', async () => {
    const app = await createApp(t, 'evt-key');
    const body = { eventType: 'e', eventId: 'keyed-1', payload: { n: 1 } };
    const first = await publish(app, body, 'retry-key');
    const retried = await publish(app, body, 'retry-key');
    assert.equal(first.status, 202);
    assert.equal(retried.status, 202, JSON.stringify(retried.body));
    assert.equal(retried.body.id, first.body.id);
    const otherKey = await publish(app, body, 'another-key');
    assert.equal(otherKey.status, 409, 'a new key does not make a taken eventId free');

    const elsewhere = await createApp(t, 'evt-key-other');
    assert.equal((await publish(elsewhere, body)).status, 202, 'eventIds are per app');
  });

  test('in the caller’s transaction: a 409, and the transaction goes on', async () => {
    const app = await createApp(t, 'evt-library');
    await publish(app, { eventType: 'e', eventId: 'lib-1', payload: {} });
    const client = new pg.Client({ connectionString: t.database.url });
    await client.connect();
    try {
      await client.query('begin');
      await assert.rejects(
        t.herald.publish(app, { eventType: 'e', eventId: 'lib-1', payload: {} }, { db: client }),
        (error) => error instanceof HeraldError && error.status === 409,
      );
      const next = await t.herald.publish(
        app,
        { eventType: 'e', eventId: 'lib-2', payload: {} },
        { db: client },
      );
      await client.query('commit');
      assert.equal(await count('from message where id = $1', [next.message.id]), 1);
      assert.equal(await count('from message where event_id = $1', ['lib-1']), 1);
    } finally {
      await client.end();
    }
  });
});

test('the upgrade stops on messages of one app that share an eventId, naming them, and runs once they do not', async () => {
  const old = await freshDatabase('event_id_upgrade', { upTo: 26 });
  try {
    const app = await seedApp(old.db, 'shared');
    for (const id of ['msg_old_a', 'msg_old_b']) {
      await old.db.query(
        `insert into message (id, app_id, event_type, event_id, payload, payload_expires_at)
         values ($1, $2, 'e', 'twice', '{}', now() + interval '1 day')`,
        [id, app.id],
      );
    }
    const upgrade = readMigrations().filter((m) => m.version === 27);
    await assert.rejects(migrate(old.db, upgrade), /share the eventId twice \(2 messages\)/);
    await old.db.query(`update message set event_id = null where id = 'msg_old_a'`);
    assert.deepEqual(await migrate(old.db, upgrade), [27]);
  } finally {
    await old.drop();
  }
});
