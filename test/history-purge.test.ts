// Deleting an endpoint or an app takes the endpoints' finished deliveries first, in transactions
// of their own (src/db/history-purge.ts), and an app's endpoints, claims and messages after them.
// Deleting the row alone cascaded through the whole history under the row's lock, and every
// publish to the app waited behind it.
//
// The route tests hold the lock of a delivery in flight, as the outcome write of a worker holds it:
// the transaction that deletes its endpoint waits for it, so the test can look at what the purge
// left meanwhile, and publish beside it.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { claimDeliveries } from '../src/db/deliveries.ts';
import { purgeApp, purgeEndpointHistory } from '../src/db/history-purge.ts';
import { recordReceipts } from '../src/db/intake.ts';
import type { Transaction } from '../src/db/port.ts';
import { createApp, createEndpoint, publishVia } from './support/fixtures.ts';
import { startTestHerald, type TestHerald } from './support/herald.ts';
import { MISQUEUED_SQL } from './support/queue.ts';
import { seedReceipt, seedSource } from './support/seed.ts';
import { waitForLockWaiter } from './support/wait.ts';

let t: TestHerald;

before(async () => {
  t = await startTestHerald('history_purge', { worker: false });
});
after(() => t.close());

/** `n` finished deliveries of the endpoint, each with its attempt, as a long history leaves them. */
async function seedHistory(appId: string, endpointId: string, n: number): Promise<void> {
  await t.database.db.query(
    `with m as (insert into message (app_id, event_type, payload, payload_expires_at)
                select $1, 'e', '{}', now() + interval '1 day' from generate_series(1, $3) returning id),
          d as (insert into delivery (app_id, message_id, endpoint_id, state, attempts_in_cycle, attempts_total)
                select $1, m.id, $2, 'succeeded', 1, 1 from m returning id, message_id)
     insert into attempt (app_id, delivery_id, message_id, endpoint_id, cycle, lease_token, trigger, url,
                          finished_at, outcome, status_code)
     select $1, d.id, d.message_id, $2, 1, gen_random_uuid(), 'scheduled', 'http://x', now(), 'success', 204 from d`,
    [appId, endpointId, n],
  );
}

async function count(sql: string, params: unknown[]): Promise<number> {
  return (await t.database.db.query<{ n: number }>(`select (${sql})::int as n`, params)).rows[0]!.n;
}

/** Runs `work` in a transaction held open, its locks with it, until the returned release is called. */
async function holdOpen(work: (tx: Transaction) => Promise<unknown>): Promise<() => Promise<void>> {
  let locked!: () => void;
  let release!: () => void;
  const held = new Promise<void>((resolve) => {
    locked = resolve;
  });
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  const holder = t.database.db.transaction(async (tx) => {
    await work(tx);
    locked();
    await released;
  });
  await held;
  return async () => {
    release();
    await holder;
  };
}

/**
 * Leases the app's due deliveries and holds the lock of `endpointId`'s one, as its outcome write
 * would, until the returned release is called.
 */
async function holdInFlight(endpointId: string): Promise<() => Promise<void>> {
  const claimed = await claimDeliveries(t.database.db, { batch: 10, leaseSeconds: 60, afterEndpoint: '' });
  const mine = claimed.find((c) => c.endpointId === endpointId);
  assert.ok(mine, 'the endpoint has a delivery in flight');
  return holdOpen((tx) => tx.query('select 1 from delivery where id = $1 for update', [mine.deliveryId]));
}

/**
 * Publishes one message to the app as the API's group commit does, answering its deliveries: with
 * a lock timeout short enough that a wait is an error here, where the API would hold the batch
 * for 2 s and answer 503.
 */
function publishWithoutWaiting(app: string): Promise<number> {
  return t.database.db.transaction(async (tx) => {
    await tx.query(`set local lock_timeout = '200ms'`);
    const item = { ord: 0, app_id: app, event_type: 'e', payload: '{}', retention_days: 1, actor: 'test' };
    const { rows } = await tx.query<{ deliveries: number }>(
      'select deliveries from herald_publish_grouped($1::jsonb, true)',
      [JSON.stringify([item])],
    );
    return rows[0]!.deliveries;
  });
}

test("an endpoint's history goes before it, and its app's publishes never wait for the deletion", async () => {
  const app = await createApp(t, 'purge-endpoint');
  const doomed = await createEndpoint(t, app, { url: 'http://127.0.0.1:9/doomed' });
  const kept = await createEndpoint(t, app, { url: 'http://127.0.0.1:9/kept' });
  await seedHistory(app, doomed, 2_500);
  await publishVia(t, app, { eventType: 'e', payload: { n: 1 } });
  const release = await holdInFlight(doomed);
  // Owed to the endpoint behind the one in flight (one at a time per endpoint).
  await publishVia(t, app, { eventType: 'e', payload: { n: 2 } });

  const deletion = t.call('DELETE', `/api/v1/app/${app}/endpoint/${doomed}`);
  try {
    // The deletion's last transaction waits for the delivery in flight; its history is gone by then,
    // committed, and the endpoint is still there, unlocked.
    await waitForLockWaiter(t.database.db, "state = 'sending' for update");
    assert.equal(
      await count(
        `select count(*) from delivery where endpoint_id = $1 and state in ('succeeded', 'failed')`,
        [doomed],
      ),
      0,
      'every finished delivery of the endpoint was deleted ahead of it',
    );
    assert.equal(
      await count(`select count(*) from delivery where endpoint_id = $1 and state = 'pending'`, [doomed]),
      1,
      'work still owed stays with the endpoint until it goes',
    );
    assert.equal(
      await count('select count(*) from attempt where endpoint_id = $1', [doomed]),
      1,
      'only the attempt in flight',
    );
    assert.equal(await count('select count(*) from endpoint where id = $1', [doomed]), 1);

    // A publish to the app meanwhile fans out to both endpoints without waiting.
    assert.equal(await publishWithoutWaiting(app), 2);
  } finally {
    await release();
  }
  assert.equal((await deletion).status, 204);

  assert.equal(await count('select count(*) from endpoint where id = $1', [doomed]), 0);
  assert.equal(await count('select count(*) from delivery where endpoint_id = $1', [doomed]), 0);
  assert.equal(await count('select count(*) from attempt where endpoint_id = $1', [doomed]), 0);
  assert.equal(
    await count('select count(*) from delivery where endpoint_id = $1', [kept]),
    3,
    'the other endpoint keeps its own',
  );
  assert.equal(await count(MISQUEUED_SQL, [app]), 0, 'the queue tables follow the purge');
});

test("an app's deletion purges its endpoints one by one, and its app's publishes never wait for it", async () => {
  const app = await createApp(t, 'purge-app');
  const endpoint = await createEndpoint(t, app, { url: 'http://127.0.0.1:9/app' });
  await seedHistory(app, endpoint, 1_500);
  await publishVia(t, app, { eventType: 'e', payload: { n: 1 } });
  const release = await holdInFlight(endpoint);

  const deletion = t.call('DELETE', `/api/v1/app/${app}`);
  try {
    // The endpoint's own deletion waits for its delivery in flight, its history gone already.
    await waitForLockWaiter(t.database.db, "state = 'sending' for update");
    assert.equal(
      await count(`select count(*) from delivery where app_id = $1 and state in ('succeeded', 'failed')`, [
        app,
      ]),
      0,
    );
    assert.equal(await count('select count(*) from app where id = $1', [app]), 1);
    // Neither the app nor its endpoint is locked meanwhile: a publish to it goes through.
    assert.equal(await publishWithoutWaiting(app), 1);
  } finally {
    await release();
  }
  assert.equal((await deletion).status, 204);
  for (const table of ['message', 'delivery', 'attempt', 'endpoint'])
    assert.equal(await count(`select count(*) from ${table} where app_id = $1`, [app]), 0, table);
});

test("an app's messages and claims go once no endpoint is left: a retry or a redelivery meanwhile sends nothing", async () => {
  const app = await createApp(t, 'purge-app-rest');
  const endpoint = await createEndpoint(t, app, { url: 'http://127.0.0.1:9/rest' });
  await seedHistory(app, endpoint, 1_500);
  await publishVia(t, app, { eventType: 'e', payload: { n: 1 } }, { 'idempotency-key': 'k-1' });
  const source = await seedSource(t.database.db, app, 'purge-app-source');
  const receipts = Array.from({ length: 20 }, (_, i) => seedReceipt(source.id, `d${i}`));
  await recordReceipts(t.database.db, receipts, 1);

  await purgeApp(t.database.db, app, 7);
  for (const table of ['endpoint', 'delivery', 'attempt', 'message', 'intake'])
    assert.equal(await count(`select count(*) from ${table} where app_id = $1`, [app]), 0, table);
  assert.equal(
    await count('select count(*) from app where id = $1', [app]),
    1,
    "the app's row is its deletion's",
  );
  assert.equal(await count('select count(*) from source where id = $1', [source.id]), 1);

  // What the purge took can no longer make these duplicates; with no endpoint left, they send nothing.
  const retried = await t.call(
    'POST',
    `/api/v1/app/${app}/msg`,
    { eventType: 'e', payload: { n: 1 } },
    { 'idempotency-key': 'k-1' },
  );
  assert.equal(retried.status, 202);
  const [redelivered] = await recordReceipts(t.database.db, [receipts[0]!], 1);
  assert.ok(redelivered?.relayed);
  assert.equal(await count('select count(*) from delivery where app_id = $1', [app]), 0);

  assert.equal((await t.call('DELETE', `/api/v1/app/${app}`)).status, 204);
  for (const table of ['message', 'source', 'intake'])
    assert.equal(await count(`select count(*) from ${table} where app_id = $1`, [app]), 0, table);
});

test('the purge walks its batches past rows another transaction deleted under it', async () => {
  const app = await createApp(t, 'purge-batches');
  const endpoint = await createEndpoint(t, app, { url: 'http://127.0.0.1:9/batches' });
  await seedHistory(app, endpoint, 50);
  const first = (
    await t.database.db.query<{ id: string }>(
      'select id from delivery where endpoint_id = $1 order by message_id limit 7',
      [endpoint],
    )
  ).rows.map((r) => r.id);

  // Another deletion (a second DELETE, history retention) holds the purge's first batch of 7, and
  // commits while the purge waits for it: that batch deletes nothing, and the purge goes on.
  const release = await holdOpen((tx) => tx.query('delete from delivery where id = any($1)', [first]));
  const purge = purgeEndpointHistory(t.database.db, endpoint, 7);
  try {
    await waitForLockWaiter(t.database.db, 'with picked as materialized');
  } finally {
    await release();
  }
  assert.equal(await purge, 50 - 7, 'every batch after the first deleted its rows');
  assert.equal(await count('select count(*) from delivery where endpoint_id = $1', [endpoint]), 0);
  assert.equal(await count('select count(*) from attempt where endpoint_id = $1', [endpoint]), 0);
  assert.equal(await count(MISQUEUED_SQL, [app]), 0);
});
