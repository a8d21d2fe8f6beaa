// Deleting an endpoint, an app or a source deletes its history first, in the transaction that
// deletes the row, and the row last (src/db/history-purge.ts). Deleting the row first cascaded
// through the whole history under the row's lock: every publish to the app, and the outcome write
// of the endpoint's delivery in flight, waited behind it.
//
// Each test holds the lock of one row of the history, as a long history would hold the deletion
// there: the test publishes, writes an outcome or records a receipt beside it meanwhile, with a lock
// timeout short enough that any wait is an error, and looks at what other readers see.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { claimDeliveries, retriesDueNow } from '../src/db/deliveries.ts';
import { PURGE_BATCH, purgeAppHistory, purgeEndpointDeliveries } from '../src/db/history-purge.ts';
import { recordReceipts } from '../src/db/intake.ts';
import type { Queryable, Transaction } from '../src/db/port.ts';
import { createApp, createEndpoint, publishVia } from './support/fixtures.ts';
import { startTestHerald, type TestHerald } from './support/herald.ts';
import { MISQUEUED_SQL } from './support/queue.ts';
import { seedReceipt, seedSource } from './support/seed.ts';
import { waitFor, waitForLockWaiter } from './support/wait.ts';

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

/**
 * `n` deliveries owed to the endpoint, a message each, queued by the trigger that follows them: due
 * now (one second apart, the latest first in id order), or `in` ahead (out of the claims' walk).
 * Answers their ids.
 */
async function seedOwed(
  appId: string,
  endpointId: string,
  n: number,
  due: { in: string } | 'now',
): Promise<string[]> {
  const at = due === 'now' ? `now() - g * interval '1 second'` : `now() + interval '${due.in}'`;
  const { rows } = await t.database.db.query<{ id: string }>(
    `with m as (insert into message (app_id, event_type, payload, payload_expires_at)
                select $1, 'e', '{}', now() + interval '1 day' from generate_series(1, $3) returning id),
          n as (select id, row_number() over (order by id) as g from m)
     insert into delivery (app_id, message_id, endpoint_id, state, next_attempt_at)
     select $1, n.id, $2, 'pending', ${at} from n
     returning id`,
    [appId, endpointId, n],
  );
  return rows.map((r) => r.id);
}

const deliveriesOf = async (db: Queryable, endpointId: string) =>
  (
    await db.query<{ id: string }>('select id from delivery where endpoint_id = $1 order by id', [endpointId])
  ).rows.map((r) => r.id);

async function countIn(db: Queryable, sql: string, params: unknown[]): Promise<number> {
  return (await db.query<{ n: number }>(`select (${sql})::int as n`, params)).rows[0]!.n;
}

const count = (sql: string, params: unknown[]) => countIn(t.database.db, sql, params);

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

/** Holds the lock of one of the endpoint's finished deliveries: the deletion will wait there. */
async function holdHistory(endpointId: string): Promise<() => Promise<void>> {
  return holdOpen((tx) =>
    tx.query(
      `select 1 from delivery where endpoint_id = $1 and state = 'succeeded' order by message_id desc limit 1
        for update`,
      [endpointId],
    ),
  );
}

/** Runs `work` with a lock timeout short enough that any wait for a lock is an error here. */
function withoutWaiting<T>(work: (tx: Transaction) => Promise<T>): Promise<T> {
  return t.database.db.transaction(async (tx) => {
    await tx.query(`set local lock_timeout = '200ms'`);
    return work(tx);
  });
}

/** Publishes one message to the app as the API's group commit does; answers its deliveries. */
async function publishBeside(tx: Transaction, app: string): Promise<number> {
  const item = { ord: 0, app_id: app, event_type: 'e', payload: '{}', retention_days: 1, actor: 'test' };
  const { rows } = await tx.query<{ deliveries: number }>(
    'select deliveries from herald_publish_grouped($1::jsonb, true)',
    [JSON.stringify([item])],
  );
  return rows[0]!.deliveries;
}

/** Leases the app's due deliveries; answers `endpointId`'s delivery now in flight. */
async function putInFlight(endpointId: string): Promise<string> {
  const claimed = await claimDeliveries(t.database.db, { batch: 10, leaseSeconds: 60, afterEndpoint: '' });
  const mine = claimed.find((c) => c.endpointId === endpointId);
  assert.ok(mine, 'the endpoint has a delivery in flight');
  return mine.deliveryId;
}

/** The statements of a deletion that may wait for the row a test holds: its purge's, or its row's. */
const ENDPOINT_DELETION = ['delete from delivery x', 'delete from endpoint'];
/** The statement of an endpoint's purge that walks its deliveries by message: past its due ones. */
const ENDPOINT_DELIVERIES = 'delete from delivery x';
/** The statement of an endpoint's purge that takes the tail of its due queue. */
const DUE_TAIL = 'select delivery_id from picked';
const APP_DELETION = ['from message m where m.id = any', 'delete from app'];

/** Locks a delivery, as a worker's outcome write locks its delivery in flight first. */
const lockDelivery = (tx: Transaction, deliveryId: string) =>
  tx.query('select 1 from delivery where id = $1 for update', [deliveryId]);

test("an endpoint's deletion locks neither it nor its delivery in flight while its history goes", async () => {
  const app = await createApp(t, 'purge-endpoint');
  const doomed = await createEndpoint(t, app, { url: 'http://127.0.0.1:9/doomed' });
  const kept = await createEndpoint(t, app, { url: 'http://127.0.0.1:9/kept' });
  await seedHistory(app, doomed, 2_500);
  await publishVia(t, app, { eventType: 'e', payload: { n: 1 } });
  const inFlight = await putInFlight(doomed);
  await publishVia(t, app, { eventType: 'e', payload: { n: 2 } });
  const release = await holdHistory(doomed);

  const deletion = t.call('DELETE', `/api/v1/app/${app}/endpoint/${doomed}`);
  try {
    await waitForLockWaiter(t.database.db, ENDPOINT_DELETION);
    assert.equal(await withoutWaiting((tx) => publishBeside(tx, app)), 2, 'a publish fans out to both');
    await withoutWaiting((tx) => lockDelivery(tx, inFlight));
    // One transaction: until it commits, others see the endpoint's history whole.
    assert.equal(await count(`select count(*) from delivery where endpoint_id = $1`, [doomed]), 2_500 + 3);
  } finally {
    await release();
  }
  assert.equal((await deletion).status, 204);

  for (const table of ['endpoint', 'delivery', 'attempt']) {
    const key = table === 'endpoint' ? 'id' : 'endpoint_id';
    assert.equal(await count(`select count(*) from ${table} where ${key} = $1`, [doomed]), 0, table);
  }
  assert.equal(
    await count('select count(*) from delivery where endpoint_id = $1', [kept]),
    3,
    'the other endpoint keeps its own',
  );
  assert.equal(await count(MISQUEUED_SQL, [app]), 0, 'the queue tables follow the deletion');
});

test("an app's deletion locks neither it nor its deliveries in flight while its history goes", async () => {
  const app = await createApp(t, 'purge-app');
  const endpoint = await createEndpoint(t, app, { url: 'http://127.0.0.1:9/app' });
  await seedHistory(app, endpoint, 1_500);
  const source = await seedSource(t.database.db, app, 'purge-app-source');
  const receipts = Array.from({ length: 20 }, (_, i) => seedReceipt(source.id, `d${i}`));
  await recordReceipts(t.database.db, receipts, 1);
  const inFlight = await putInFlight(endpoint);
  const release = await holdHistory(endpoint);

  const deletion = t.call('DELETE', `/api/v1/app/${app}`);
  try {
    await waitForLockWaiter(t.database.db, APP_DELETION);
    assert.equal(await withoutWaiting((tx) => publishBeside(tx, app)), 1);
    await withoutWaiting((tx) => lockDelivery(tx, inFlight));
    assert.equal(await count('select count(*) from message where app_id = $1', [app]), 1_500 + 20 + 1);
    assert.equal(await count('select count(*) from intake where source_id = $1', [source.id]), 20);
  } finally {
    await release();
  }
  assert.equal((await deletion).status, 204);
  for (const table of ['app', 'message', 'delivery', 'attempt', 'endpoint', 'source', 'intake']) {
    const key = table === 'app' ? 'id' : 'app_id';
    assert.equal(await count(`select count(*) from ${table} where ${key} = $1`, [app]), 0, table);
  }
});

test("a source's deletion does not lock it while its claims go", async () => {
  const app = await createApp(t, 'purge-source');
  const source = await seedSource(t.database.db, app, 'purge-source');
  await recordReceipts(
    t.database.db,
    Array.from({ length: 30 }, (_, i) => seedReceipt(source.id, `r${i}`)),
    1,
  );
  const release = await holdOpen((tx) =>
    tx.query(`select 1 from intake where source_id = $1 and delivery_id = 'r7' for update`, [source.id]),
  );

  const deletion = t.call('DELETE', `/api/v1/source/${source.id}`);
  try {
    await waitForLockWaiter(t.database.db, ['delete from intake x', 'delete from source']);
    const [beside] = await withoutWaiting((tx) => recordReceipts(tx, [seedReceipt(source.id, 'new')], 1));
    assert.ok(beside?.claimed, 'a receipt of a new delivery id is claimed meanwhile');
    assert.equal(await count('select count(*) from intake where source_id = $1', [source.id]), 31);
  } finally {
    await release();
  }
  assert.equal((await deletion).status, 204);
  assert.equal(await count('select count(*) from intake where source_id = $1', [source.id]), 0);
  assert.equal(await count('select count(*) from intake_observation where app_id = $1', [app]), 0);
});

test('of two deletions of one app, one is answered 204 and audited, the other 404', async () => {
  const app = await createApp(t, 'purge-twice');
  const endpoint = await createEndpoint(t, app, { url: 'http://127.0.0.1:9/twice' });
  await seedHistory(app, endpoint, 100);
  const release = await holdHistory(endpoint);
  const first = t.call('DELETE', `/api/v1/app/${app}`);
  let second: ReturnType<typeof t.call>;
  try {
    await waitForLockWaiter(t.database.db, APP_DELETION);
    second = t.call('DELETE', `/api/v1/app/${app}`);
    await waitForLockWaiter(t.database.db, APP_DELETION, 10_000, 2);
  } finally {
    await release();
  }
  const statuses = [(await first).status, (await second).status].sort();
  assert.deepEqual(statuses, [204, 404]);
  assert.equal(
    await count(`select count(*) from audit_entry where action = 'app.deleted' and target_id = $1`, [app]),
    1,
  );
});

test('a deletion that PostgreSQL rolls back to break a deadlock starts over, and is answered 204', async () => {
  const app = await createApp(t, 'purge-deadlock');
  const endpoint = await createEndpoint(t, app, { url: 'http://127.0.0.1:9/deadlock' });
  await seedHistory(app, endpoint, 200);
  const ordered = await t.database.db.query<{ id: string }>(
    'select id from delivery where endpoint_id = $1 order by message_id',
    [endpoint],
  );
  const oldest = ordered.rows[0]!.id;
  const newest = ordered.rows.at(-1)!.id;
  const deadlocks = () =>
    count('select deadlocks from pg_stat_database where datname = current_database()', []);
  const before = await deadlocks();

  // A bulk writer of the same rows in the other order: it holds the newest delivery, which the
  // purge reaches last, then asks for the oldest, which the purge holds by then. The deletion
  // began to wait first, so it is the one PostgreSQL rolls back.
  let go!: () => void;
  const crossing = new Promise<void>((resolve) => {
    go = resolve;
  });
  let crossed!: (rolledBack: boolean) => void;
  const writerCrossed = new Promise<boolean>((resolve) => {
    crossed = resolve;
  });
  const release = await holdOpen(async (tx) => {
    await tx.query('select 1 from delivery where id = $1 for update', [newest]);
    void crossing.then(async () => {
      try {
        await tx.query('select 1 from delivery where id = $1 for update', [oldest]);
        crossed(false);
      } catch {
        crossed(true);
      }
    });
  });

  const deletion = t.call('DELETE', `/api/v1/app/${app}/endpoint/${endpoint}`);
  try {
    await waitForLockWaiter(t.database.db, ENDPOINT_DELETION);
    go();
    assert.equal(await writerCrossed, false, 'the writer got its lock: the deletion was rolled back');
    await waitFor('the deadlock counted', async () => (await deadlocks()) > before);
    // Started over, it waits for the writer's rows again.
    await waitForLockWaiter(t.database.db, ENDPOINT_DELETION);
  } finally {
    await release();
  }
  assert.equal((await deletion).status, 204);
  assert.equal(await count('select count(*) from delivery where endpoint_id = $1', [endpoint]), 0);
});

test("an app's deletion locks a message before its deliveries, as a replay, a resend and retention do", async () => {
  const app = await createApp(t, 'purge-order');
  const endpoint = await createEndpoint(t, app, { url: 'http://127.0.0.1:9/order' });
  await seedHistory(app, endpoint, 50);
  const { rows } = await t.database.db.query<{ deliveryId: string; messageId: string }>(
    `select id as "deliveryId", message_id as "messageId" from delivery where endpoint_id = $1
      order by message_id desc limit 1`,
    [endpoint],
  );
  const { deliveryId, messageId } = rows[0]!;

  // A restart's hold on its message (deliveries.ts, messageHeld); its delivery comes next.
  let restart!: Transaction;
  const release = await holdOpen(async (tx) => {
    restart = tx;
    await tx.query('select 1 from message where id = $1 for key share', [messageId]);
  });
  const deletion = t.call('DELETE', `/api/v1/app/${app}`);
  try {
    await waitForLockWaiter(t.database.db, APP_DELETION);
    // The deletion waits at the message holding none of its deliveries: the restart gets its own.
    await restart.query(`set local lock_timeout = '200ms'`);
    await restart.query('select 1 from delivery where id = $1 for update', [deliveryId]);
  } finally {
    await release();
  }
  assert.equal((await deletion).status, 204);
  assert.equal(await count('select count(*) from message where app_id = $1', [app]), 0);
});

test('a purge goes in batches of its own size until nothing is left', async () => {
  const app = await createApp(t, 'purge-batches');
  const endpoint = await createEndpoint(t, app, { url: 'http://127.0.0.1:9/batches' });
  await seedHistory(app, endpoint, 50);
  await seedOwed(app, endpoint, 9, { in: '1 day' });
  const source = await seedSource(t.database.db, app, 'purge-batches-source');
  await recordReceipts(
    t.database.db,
    Array.from({ length: 12 }, (_, i) => seedReceipt(source.id, `b${i}`)),
    1,
  );
  await seedOwed(app, endpoint, 20, 'now');
  const head = await t.database.db.query<{ id: string }>(
    'select delivery_id as id from delivery_due where endpoint_id = $1 order by next_attempt_at, delivery_id limit 7',
    [endpoint],
  );
  // Out of the walk but soon back in it, as tending moves what comes within its horizon; and held
  // by a rest of the endpoint, open, which tending releases as the rest ends: left.
  const soon = await seedOwed(app, endpoint, 4, { in: '90 seconds' });
  const resting = await seedOwed(app, endpoint, 3, { in: '1 day' });
  await t.database.db.query('update delivery_deferred set held = true where delivery_id = any($1)', [
    resting,
  ]);

  // Batches of 7: 50 finished deliveries, 9 owed a day ahead, 32 due (12 of them due at one time)
  // of which the 7 at the head stay, 12 claims, and the messages whose deliveries are all gone.
  await t.database.db.transaction(async (tx) => {
    // The tail's keys go out as text and back: whatever the session's settings.
    await tx.query(`set local datestyle = 'SQL, DMY'`);
    await tx.query(`set local timezone = 'Asia/Kolkata'`);
    await purgeEndpointDeliveries(tx, endpoint, 7);
    assert.deepEqual(
      await deliveriesOf(tx, endpoint),
      [...head.rows.map((r) => r.id), ...soon, ...resting].sort(),
      'the head of the due queue, and what comes back into the walk soon, are left for the cascade',
    );
    await purgeAppHistory(tx, app, 7);
  });
  assert.equal(await count('select count(*) from intake where source_id = $1', [source.id]), 0);
  assert.equal(
    await count('select count(*) from message where app_id = $1', [app]),
    7 + 4 + 3,
    'the messages of what is left, still owed, stay for the cascade',
  );
  assert.equal(await count(MISQUEUED_SQL, [app]), 0);
});

test("a disabled endpoint's held backlog goes ahead of its row, and of its app's", async () => {
  const app = await createApp(t, 'purge-held');
  const endpoint = await createEndpoint(t, app, { url: 'http://127.0.0.1:9/held' });
  await seedOwed(app, endpoint, 30, 'now');
  const disabled = await t.call('PATCH', `/api/v1/app/${app}/endpoint/${endpoint}`, { disabled: true });
  assert.equal(disabled.status, 200);
  assert.equal(
    await count('select count(*) from delivery_deferred where endpoint_id = $1 and held', [endpoint]),
    30,
    'the disable held them',
  );
  for (const purge of [
    (tx: Transaction) => purgeEndpointDeliveries(tx, endpoint, 7),
    (tx: Transaction) => purgeAppHistory(tx, app, 7),
  ]) {
    // Each purge looks at what it left, then rolls back, for the other to start from the same.
    const rolledBack = t.database.db.transaction(async (tx) => {
      await purge(tx);
      assert.deepEqual(await deliveriesOf(tx, endpoint), []);
      throw new Error('rolled back');
    });
    await assert.rejects(rolledBack, { message: 'rolled back' });
  }
});

test("an endpoint's deletion leaves the head of its queue to the claims while its owed deliveries go", async () => {
  const app = await createApp(t, 'purge-owed');
  const doomed = await createEndpoint(t, app, { url: 'http://127.0.0.1:9/owed' });
  await seedHistory(app, doomed, 20);
  await seedOwed(app, doomed, PURGE_BATCH + 30, 'now');
  await seedOwed(app, doomed, 40, { in: '1 day' });
  // Locks the deliveries at these places of the queue, and those only (a locking clause over an
  // offset would lock the rows the offset passes by too).
  const queue = (offset: number, limit: number) =>
    `select p.id from delivery p
      where p.id in (select q.delivery_id from delivery_due q where q.endpoint_id = $1
                      order by q.next_attempt_at, q.delivery_id offset ${offset} limit ${limit})
      order by p.next_attempt_at, p.id for update of p nowait`;
  const headId = (await t.database.db.query<{ id: string }>(queue(0, 1), [doomed])).rows[0]!.id;
  // The tail's first row, which the purge, latest due first, reaches last.
  const release = await holdOpen((tx) => tx.query(queue(PURGE_BATCH, 1), [doomed]));

  const deletion = t.call('DELETE', `/api/v1/app/${app}/endpoint/${doomed}`);
  try {
    await waitForLockWaiter(t.database.db, DUE_TAIL);
    // The tail goes last, right before the row: the head need last only as long as the tail's purge.
    await withoutWaiting(async (tx) => {
      const finished = `select 1 from delivery where endpoint_id = $1 and state = 'succeeded' limit 1 for update nowait`;
      await assert.rejects(tx.query(finished, [doomed]), { code: '55P03' }, 'its history went first');
    });
    await withoutWaiting(async (tx) => {
      await assert.rejects(
        tx.query(queue(PURGE_BATCH + 1, 1), [doomed]),
        { code: '55P03' },
        'its tail is taken',
      );
    });
    // The head is free for the claims, which stepped over every deleted row ahead of a free one.
    const head = await withoutWaiting((tx) => tx.query(queue(0, PURGE_BATCH), [doomed]));
    assert.equal(head.rowCount, PURGE_BATCH);
    const claimed = await withoutWaiting((tx) =>
      claimDeliveries(tx, { batch: 10, leaseSeconds: 60, afterEndpoint: '' }),
    );
    assert.equal(claimed.find((c) => c.endpointId === doomed)?.deliveryId, headId, 'a claim leases the head');
    assert.equal(
      await count('select count(*) from delivery where endpoint_id = $1', [doomed]),
      20 + PURGE_BATCH + 70,
    );
  } finally {
    await release();
  }
  assert.equal((await deletion).status, 204);
  assert.equal(await count('select count(*) from delivery where endpoint_id = $1', [doomed]), 0);
  assert.equal(await count(MISQUEUED_SQL, [app]), 0);
});

test("an enable beside an endpoint's deletion passes by the retries the deletion holds", async () => {
  const app = await createApp(t, 'purge-enable');
  const endpoint = await createEndpoint(t, app, { url: 'http://127.0.0.1:9/enable' });
  await seedOwed(app, endpoint, 20, { in: '1 day' });
  // The retry the purge, in message order, reaches last: it has taken the others when it waits.
  const { rows } = await t.database.db.query<{ id: string }>(
    'select id from delivery where endpoint_id = $1 order by message_id desc limit 1',
    [endpoint],
  );
  // Close to its time: the purge leaves it for the cascade, and the enable makes it due.
  const [soon] = await seedOwed(app, endpoint, 1, { in: '90 seconds' });
  await t.database.db.query(
    `update endpoint set disabled = true, disabled_reason = 'failures' where id = $1`,
    [endpoint],
  );
  const release = await holdOpen((tx) => lockDelivery(tx, rows[0]!.id));

  const deletion = t.call('DELETE', `/api/v1/app/${app}/endpoint/${endpoint}`);
  try {
    await waitForLockWaiter(t.database.db, ENDPOINT_DELIVERIES);
    // What an enable does to the retries, holding the endpoint's row (endpoints.ts): waiting here
    // held up every publish to the app, and deadlocked with the deletion.
    await withoutWaiting(async (tx) => {
      await retriesDueNow(tx, endpoint);
      const due = 'select count(*) from delivery where id = $1 and next_attempt_at <= now()';
      assert.equal(await countIn(tx, due, [soon]), 1, 'the retry no one holds is due now');
    });
  } finally {
    await release();
  }
  assert.equal((await deletion).status, 204);
});
