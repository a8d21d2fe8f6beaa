// SIGTERM: stop claiming, let attempts in flight finish within the grace period, or abandon them
// to lease recovery — never lose them — then close the database and exit 0.

import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { attemptsOf, createApp, createEndpoint, deliveryOf, publishVia } from './support/fixtures.ts';
import { startTestHerald, type TestHerald, testEnv } from './support/herald.ts';
import { killAll, startHerald } from './support/processes.ts';
import { type Receiver, startReceiver } from './support/receiver.ts';
import { waitFor, waitForLockWaiter } from './support/wait.ts';

let t: TestHerald;
let receiver: Receiver;

before(async () => {
  // The API only: deliveries are made by the worker processes each test starts.
  t = await startTestHerald('shutdown', { worker: false });
  receiver = await startReceiver();
});
after(async () => {
  await killAll();
  await t.close();
  await receiver.close();
});

const attempts = async (deliveryId: string) =>
  (
    await t.database.db.query<{ outcome: string | null }>(
      'select outcome from attempt where delivery_id = $1 order by id',
      [deliveryId],
    )
  ).rows.map((r) => r.outcome);

test('an idle worker exits at once on SIGTERM, not at its next lease-recovery tick', async () => {
  // Leases of 40 s: lease recovery and retention run every 5 s, and sleep in between.
  const worker = await startHerald(
    'worker',
    testEnv(t.database.url, { HERALD_LEASE_SECONDS: '40', LOG_LEVEL: 'info' }),
  );
  const signalled = Date.now();
  worker.proc.signal('SIGTERM');
  assert.deepEqual(await worker.proc.waitForExit(20_000), { code: 0, signal: null });
  const tookMs = Date.now() - signalled;
  // Its tick is 5 s away (it has just started): one that waited for it would take 4.5–5 s. A
  // loaded machine has taken 2.6 s to stop one that does not.
  assert.ok(tookMs < 3500, `the worker took ${tookMs} ms to stop`);
});

/** A receiver that answers each request `delayMs` after it arrives, and counts them. */
async function startSlowReceiver(delayMs = 1500) {
  let arrived = 0;
  const server = http.createServer((_request, response) => {
    arrived++;
    setTimeout(() => response.writeHead(204).end(), delayMs);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    get arrived() {
      return arrived;
    },
    async close() {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

test('SIGTERM during a slow attempt waits for it, records it, and exits 0', async () => {
  const slow = await startSlowReceiver();
  try {
    const app = await createApp(t, 'graceful');
    const ep = await createEndpoint(t, app, {
      url: `${slow.origin}/slow`,
    });
    const worker = await startHerald('worker', testEnv(t.database.url, { LOG_LEVEL: 'info' }));
    const msg = await publishVia(t, app, { eventType: 'e', payload: {} });
    await waitFor('the request to arrive', () => slow.arrived === 1);
    worker.proc.signal('SIGTERM');
    const exit = await worker.proc.waitForExit(20_000);
    assert.deepEqual(exit, { code: 0, signal: null });
    const delivery = (await deliveryOf(t, msg, ep))!;
    assert.equal(
      delivery.state,
      'succeeded',
      'the attempt in flight finished and was recorded before exiting',
    );
    assert.deepEqual(await attempts(delivery.id), ['success']);
  } finally {
    await slow.close();
  }
});

test('an attempt that outlives the grace period still has its outcome recorded before exit; a restarted worker completes the delivery', async () => {
  receiver.respond = (request) => (request.path === '/stuck' ? 'hang' : { status: 204 });
  const app = await createApp(t, 'abandon');
  const ep = await createEndpoint(t, app, { url: `${receiver.url}/stuck` });
  const env = testEnv(t.database.url, {
    LOG_LEVEL: 'info',
    HERALD_SHUTDOWN_GRACE_MS: '200',
    HERALD_LEASE_SECONDS: '3',
    HERALD_ATTEMPT_TIMEOUT_MS: '2500',
  });
  const first = await startHerald('worker', env, { name: 'first worker' });
  const msg = await publishVia(t, app, { eventType: 'e', payload: {} });
  await waitFor('the request to arrive', () => receiver.requests.some((r) => r.path === '/stuck'));
  first.proc.signal('SIGTERM');
  const exit = await first.proc.waitForExit(10_000);
  assert.deepEqual(exit, { code: 0, signal: null });
  // Past the grace, but the sender's close waited for its request anyway: the outcome in hand
  // (its deadline passed: unknown) is written before the process exits, not left to lease
  // recovery — the delivery waits again, its lease ended.
  const delivery = (await deliveryOf(t, msg, ep))!;
  assert.equal(delivery.state, 'pending');
  assert.deepEqual(await attempts(delivery.id), ['unknown']);

  receiver.respond = () => ({ status: 204 });
  const second = await startHerald('worker', env, { name: 'second worker' });
  await waitFor(
    'the delivery to complete',
    async () => (await deliveryOf(t, msg, ep))?.state === 'succeeded',
    20_000,
  );
  assert.deepEqual(await attempts(delivery.id), ['unknown', 'success']);
  // Stopped here: left running, it would claim the deliveries of the tests after this one.
  assert.deepEqual(await second.proc.kill('SIGTERM'), { code: 0, signal: null });
});

test('a stopping worker sends nothing more: requests still waiting for their origin are given back unsent', async () => {
  // One connection to an origin that four endpoints share, and a receiver that answers each
  // request 6 s after it arrives: when the stop begins, one request is out and three wait for
  // the connection. The stop's grace (200 ms) ends long before the request out is answered, with
  // seconds to spare for a loaded machine to see all four leased and begin the stop.
  const slow = await startSlowReceiver(6000);
  const s = await startTestHerald('shutdown_waiting', {
    worker: false,
    env: {
      HERALD_CONNECTIONS_PER_ORIGIN: '1',
      HERALD_LEASE_SECONDS: '30',
      HERALD_ATTEMPT_TIMEOUT_MS: '15000',
    },
  });
  try {
    const app = await createApp(s, 'waiting');
    const { origin } = slow;
    const endpoints: string[] = [];
    for (const path of ['/a', '/b', '/c', '/d'])
      endpoints.push(await createEndpoint(s, app, { url: `${origin}${path}` }));
    const message = await publishVia(s, app, { eventType: 'e', payload: {} });
    const worker = await s.herald.startWorker();
    await waitFor('the first request to arrive', () => slow.arrived === 1);
    await waitFor('all four deliveries to be leased', async () => {
      const states = await Promise.all(
        endpoints.map(async (ep) => (await deliveryOf(s, message, ep))!.state),
      );
      return states.every((state) => state === 'sending');
    });
    await worker.stop(200);

    const deliveries = await Promise.all(endpoints.map(async (ep) => (await deliveryOf(s, message, ep))!));
    const waited = deliveries.filter((d) => d.attempts_total === 0);
    // The three that waited are due again, their budget whole, with no attempt behind them.
    assert.equal(waited.length, 3, JSON.stringify(deliveries));
    for (const d of waited) {
      assert.equal(d.state, 'pending');
      assert.deepEqual(await attemptsOf(s, d.id), []);
    }
    const notSent = await s.herald.core.metrics.registry
      .getSingleMetric('herald_attempts_not_sent_total')
      ?.get();
    assert.equal((notSent?.values ?? []).find((v) => v.labels['reason'] === 'stopping')?.value, 3);
  } finally {
    // Closing waits for the request out (and, were any let through, for them too).
    await s.close();
    await slow.close();
  }
  assert.equal(slow.arrived, 1, 'no request left after the stop began');
});

test('the grace counts from the stop: a maintenance pass still running spends it instead of extending it', async () => {
  // A request out for 20 s, and the worker's maintenance pass held behind a lock when the stop
  // begins; the lock goes 3 s later, when the 3 s grace is over. A grace that began only once
  // maintenance had ended would keep the stop going until 6 s.
  const slow = await startSlowReceiver(20_000);
  const s = await startTestHerald('shutdown_grace', {
    worker: false,
    env: { HERALD_LEASE_SECONDS: '30', HERALD_ATTEMPT_TIMEOUT_MS: '25000' },
  });
  const locker = new pg.Client({ connectionString: s.database.url });
  await locker.connect();
  try {
    const app = await createApp(s, 'grace');
    await createEndpoint(s, app, { url: `${slow.origin}/held` });
    await publishVia(s, app, { eventType: 'e', payload: {} });
    const worker = await s.herald.startWorker();
    await waitFor('the request to arrive', () => slow.arrived === 1);
    await locker.query('begin');
    await locker.query('lock table delivery_deferred in access exclusive mode');
    // Its maintenance pass (every 5 s here) waits behind the lock: tending the deferred rows, or
    // lease recovery, whose writes the queue trigger follows into that table.
    await waitForLockWaiter(s.database.db, ['herald_tend_deferred', 'herald_recover_expired_leases'], 30_000);

    const began = Date.now();
    const stopped = worker.stop(3000);
    await sleep(3000);
    await locker.query('rollback');
    await stopped;
    const tookMs = Date.now() - began;
    assert.ok(tookMs < 4500, `the stop took ${tookMs} ms with a grace of 3000`);
  } finally {
    await locker.end();
    await slow.close();
    await s.close();
  }
});

test('Ctrl-C under npm start (the signal twice at once) stops gracefully; a second signal a second later stops at once', async () => {
  // Each request is answered 5 s after it arrives: the second is still out when the second
  // signal comes, a second and a log line after the first, with room for a loaded machine.
  const slow = await startSlowReceiver(5000);
  try {
    const app = await createApp(t, 'double-signal');
    await createEndpoint(t, app, { url: `${slow.origin}/slow` });
    const start = () =>
      startHerald(
        'worker',
        testEnv(t.database.url, {
          LOG_LEVEL: 'info',
          HERALD_LEASE_SECONDS: '30',
          HERALD_ATTEMPT_TIMEOUT_MS: '15000',
        }),
      );
    let worker = await start();
    const msg = await publishVia(t, app, { eventType: 'e', payload: {} });
    await waitFor('the request to arrive', () => slow.arrived === 1);
    // The terminal's SIGINT to the process group, and npm's copy of it to its child, which comes
    // once npm has had it: after the first (two at the same instant would be one signal).
    worker.proc.signal('SIGINT');
    await worker.proc.waitForLog('stopping: no new work; finishing attempts in flight');
    worker.proc.signal('SIGINT');
    assert.deepEqual(await worker.proc.waitForExit(20_000), { code: 0, signal: null });
    assert.ok(!worker.proc.logs.some((r) => r.msg === 'stopping at once'), worker.proc.describe());
    const delivery = await t.database.db.query<{ state: string }>(
      'select state from delivery where message_id = $1',
      [msg],
    );
    assert.equal(delivery.rows[0]!.state, 'succeeded', 'the attempt in flight was finished and recorded');

    // A second press, once a second has passed, means "now".
    worker = await start();
    await publishVia(t, app, { eventType: 'e', payload: {} });
    await waitFor('the second request to arrive', () => slow.arrived === 2);
    worker.proc.signal('SIGINT');
    await worker.proc.waitForLog('stopping: no new work; finishing attempts in flight');
    await sleep(1100);
    worker.proc.signal('SIGINT');
    assert.deepEqual(await worker.proc.waitForExit(5_000), { code: 1, signal: null });
    assert.ok(
      worker.proc.logs.some((r) => r.msg === 'stopping at once'),
      worker.proc.describe(),
    );
  } finally {
    await slow.close();
  }
});

test('a maintenance pass under way when the worker stops goes no further than its step', async () => {
  const s = await startTestHerald('shutdown_pass', { worker: false });
  const locker = new pg.Client({ connectionString: s.database.url });
  await locker.connect();
  try {
    const app = await createApp(s, 'pass');
    // Retention would remove this payload, in the first pass's last step.
    const expired = await s.database.db.query<{ id: string }>(
      `insert into message (app_id, event_type, payload, payload_expires_at)
       values ($1, 'e', '{}', now() - interval '1 minute') returning id`,
      [app],
    );
    // The first pass waits in its first step, tending the deferred deliveries, while the stop begins.
    await locker.query('begin');
    await locker.query('lock table delivery_deferred in access exclusive mode');
    const worker = await s.herald.startWorker();
    await waitForLockWaiter(s.database.db, 'herald_tend_deferred', 30_000);
    const stopped = worker.stop(1000);
    await locker.query('rollback');
    await stopped;
    const kept = await s.database.db.query('select 1 from message where id = $1 and payload is not null', [
      expired.rows[0]!.id,
    ]);
    assert.equal(kept.rowCount, 1, 'the steps after the one under way did not run');
  } finally {
    await locker.end();
    await s.close();
  }
});
