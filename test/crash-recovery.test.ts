// Invariants 3, 5 and 6 across processes: a `herald worker` killed with SIGKILL while its request
// is at the receiver leaves an open attempt under a live lease. Nobody may touch that lease before
// it expires; once it has, another worker process marks the attempt `unknown` (lease_expired) and
// delivers the message again with the same webhook-id. A worker frozen past its leases gives back
// none that recovery took meanwhile, and does not count them as given back.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { loadConfig } from '../src/config.ts';
import { recoverExpiredLeases } from '../src/db/deliveries.ts';
import { createHerald, type Herald } from '../src/herald.ts';
import { freshDatabase, type TestDatabase } from './support/database.ts';
import { testEnv } from './support/herald.ts';
import { freePort, killAll, startHerald } from './support/processes.ts';
import { type Receiver, startReceiver } from './support/receiver.ts';
import { addEndpoint, seedApp } from './support/seed.ts';
import { waitFor } from './support/wait.ts';

let database: TestDatabase;
let herald: Herald;
let receiver: Receiver;

// The attempt deadline must stay below the lease (config refuses otherwise).
const WORKER_ENV = { HERALD_LEASE_SECONDS: '2', HERALD_ATTEMPT_TIMEOUT_MS: '1500', LOG_LEVEL: 'info' };

before(async () => {
  database = await freshDatabase('crash_recovery');
  herald = await createHerald({ config: loadConfig(testEnv(database.url)), migrate: false });
  // The first request hangs (the worker dies while it waits); every later one succeeds.
  receiver = await startReceiver((_request, n) => (n === 1 ? 'hang' : { status: 204 }));
});

after(async () => {
  await killAll();
  await receiver?.close();
  await herald?.close();
  await database?.drop();
});

interface AttemptState {
  id: string;
  leaseToken: string;
  outcome: string | null;
  responseClass: string | null;
  startedAt: Date;
  finishedAt: Date | null;
}

async function attemptsOf(deliveryId: string): Promise<AttemptState[]> {
  const result = await database.db.query<AttemptState>(
    `select id, lease_token as "leaseToken", outcome, response_class as "responseClass",
            started_at as "startedAt", finished_at as "finishedAt"
       from attempt where delivery_id = $1 order by started_at, id`,
    [deliveryId],
  );
  return result.rows;
}

async function deliveryOf(messageId: string) {
  const result = await database.db.query<{
    id: string;
    state: string;
    leaseToken: string | null;
    leaseExpiresAt: Date | null;
    attemptsTotal: number;
  }>(
    `select id, state, lease_token as "leaseToken", lease_expires_at as "leaseExpiresAt",
            attempts_total as "attemptsTotal"
       from delivery where message_id = $1`,
    [messageId],
  );
  assert.equal(result.rows.length, 1, 'one endpoint, one delivery');
  return result.rows[0]!;
}

test('a worker killed mid-request is recovered only after its lease, as unknown, then redelivered', async () => {
  const app = await seedApp(database.db, 'crash');
  await addEndpoint(herald, database.db, app, { url: `${receiver.url}/hook` });

  // Two worker processes. The second is frozen (SIGSTOP) before anything is published, so the
  // first one claims the message; it is thawed the moment the first one dies, while the dead
  // worker's lease is still live, and must leave that lease alone until it expires.
  const [first, second] = await Promise.all([
    startHerald('worker', testEnv(database.url, WORKER_ENV), { name: 'worker-1' }),
    startHerald('worker', testEnv(database.url, WORKER_ENV), { name: 'worker-2' }),
  ]);
  second.proc.signal('SIGSTOP');
  const { message } = await herald.publish('crash', { eventType: 'order.created', payload: { n: 1 } });

  await waitFor('the receiver to hold the first request', () => receiver.requests.length === 1);
  const exit = await first.proc.kill('SIGKILL');
  assert.equal(exit.signal, 'SIGKILL', first.proc.describe());

  // Nothing was recorded: the attempt is open and the delivery is leased to the dead worker.
  const held = await deliveryOf(message.id);
  assert.equal(held.state, 'sending');
  assert.ok(held.leaseToken && held.leaseExpiresAt);
  const [open, ...others] = await attemptsOf(held.id);
  assert.equal(others.length, 0);
  assert.equal(open!.outcome, null);
  assert.equal(open!.finishedAt, null);
  assert.equal(open!.leaseToken, held.leaseToken);
  second.proc.signal('SIGCONT');
  // The lease is still live now that the second worker runs again, so a recovery before its
  // expiry would be premature (checked below against the recovery time).
  const { rows } = await database.db.query<{ live: boolean }>('select $1::timestamptz > now() as live', [
    held.leaseExpiresAt,
  ]);
  assert.equal(rows[0]!.live, true, 'the dead worker’s lease should still be live when the second resumes');

  const done = await waitFor(
    'the delivery to succeed through the second worker',
    async () => {
      const d = await deliveryOf(message.id);
      return d.state === 'succeeded' ? d : null;
    },
    20_000,
  );
  const attempts = await attemptsOf(done.id);
  assert.equal(attempts.length, 2, JSON.stringify(attempts));
  const [lost, retried] = attempts as [AttemptState, AttemptState];

  assert.equal(lost.id, open!.id);
  assert.equal(lost.outcome, 'unknown', 'a lease that expired with no outcome is unknown, not failure');
  assert.equal(lost.responseClass, 'lease_expired');
  assert.ok(lost.finishedAt, 'the recovered attempt is closed');
  // Recovered after the lease expired, never while it was live (both times are database time).
  assert.ok(
    lost.finishedAt!.getTime() >= held.leaseExpiresAt!.getTime(),
    `recovered at ${lost.finishedAt!.toISOString()}, lease ran until ${held.leaseExpiresAt!.toISOString()}`,
  );

  assert.equal(retried.outcome, 'success');
  assert.notEqual(retried.leaseToken, lost.leaseToken, 'the retry ran under a new fencing token');
  assert.ok(retried.startedAt.getTime() >= held.leaseExpiresAt!.getTime());
  assert.equal(done.attemptsTotal, 2);
  assert.equal(done.leaseToken, null);

  // At-least-once: the receiver saw the same message twice, with the same webhook-id.
  assert.equal(receiver.requests.length, 2);
  const ids = receiver.requests.map((r) => r.headers['webhook-id']);
  assert.equal(ids[0], message.id);
  assert.equal(ids[1], message.id);
  assert.equal(receiver.requests[0]!.body, receiver.requests[1]!.body);

  // The second worker said what it did, and it stops cleanly.
  assert.ok(
    second.proc.logs.some((r) => r.msg === 'recovered expired leases; attempts marked unknown'),
    second.proc.describe(),
  );
  const stopped = await second.proc.kill('SIGTERM');
  assert.equal(stopped.code, 0, second.proc.describe());
});

test('a worker frozen past its leases leaves what recovery took: not given back, not counted', async () => {
  const app = await seedApp(database.db, 'frozen');
  // One connection to the receiver's origin, held by a first request that hangs: the two other
  // endpoints' requests wait behind it for their turn, past their start limit ((lease − deadline)
  // ÷ 2 after the claim: 2.5 s, before the first request's 3 s deadline frees the connection).
  const held = await startReceiver((_request, n) => (n === 1 ? 'hang' : { status: 204 }));
  const metricsPort = await freePort();
  try {
    for (const path of ['a', 'b', 'c'])
      await addEndpoint(herald, database.db, app, { url: `${held.url}/${path}` });
    const worker = await startHerald(
      'worker',
      testEnv(database.url, {
        HERALD_LEASE_SECONDS: '8',
        HERALD_ATTEMPT_TIMEOUT_MS: '3000',
        HERALD_CONNECTIONS_PER_ORIGIN: '1',
        HERALD_METRICS_PORT: String(metricsPort),
        LOG_LEVEL: 'info',
      }),
      { name: 'frozen-worker' },
    );
    const { message } = await herald.publish('frozen', { eventType: 'order.created', payload: { n: 1 } });
    const leased = `select count(*)::int as n from delivery where message_id = $1 and state = 'sending'`;
    await waitFor('one request at the receiver, three leases taken', async () => {
      const { rows } = await database.db.query<{ n: number }>(leased, [message.id]);
      return held.requests.length === 1 && rows[0]!.n === 3;
    });
    // Frozen while the two other requests wait for the connection; recovery takes all three leases
    // once they have expired (database time), as another worker would.
    worker.proc.signal('SIGSTOP');
    await waitFor(
      'the frozen worker’s leases to expire',
      async () => {
        const { rows } = await database.db.query<{ expired: boolean }>(
          'select bool_and(lease_expires_at < now()) as expired from delivery where message_id = $1',
          [message.id],
        );
        return rows[0]!.expired;
      },
      15_000,
    );
    // Retried an hour later. Retried at once, they were claimed again by the thawed worker, whose
    // new requests a busy machine could give back before the scrape, and count (lease_short 3,
    // seen once in a full run): new attempts, not the ones this test is about.
    const recovered = await recoverExpiredLeases(database.db, {
      schedule: Array<number>(9).fill(3600),
      jitter: 0,
    });
    assert.equal(recovered.length, 3);
    worker.proc.signal('SIGCONT');

    // Thawed, it finds the two requests that waited past their start limit unsent; their leases are
    // gone, so it gives nothing back and counts nothing: recovery closed each attempt as unknown.
    const lateNotice =
      'not sent, but its lease was recovered first; recovery recorded the attempt as unknown';
    await waitFor(
      'the frozen worker to find both waiting requests’ leases recovered',
      () => worker.proc.logs.filter((r) => r.msg === lateNotice).length === 2,
      15_000,
    );
    const scrape = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    // Every reason is served from the start, at 0.
    const givenBack = scrape
      .split('\n')
      .filter((line) => line.startsWith('herald_attempts_not_sent_total{') && !line.endsWith(' 0'));
    assert.deepEqual(givenBack, [], 'a lease recovery took is not also counted as given back');
    const { rows: closed } = await database.db.query<{ outcome: string; responseClass: string }>(
      `select a.outcome, a.response_class as "responseClass"
         from attempt a join delivery d on d.id = a.delivery_id
        where d.message_id = $1 and a.lease_token = any($2)`,
      [message.id, recovered.map((r) => r.leaseToken)],
    );
    assert.deepEqual(
      closed.map((a) => `${a.outcome}/${a.responseClass}`),
      ['unknown/lease_expired', 'unknown/lease_expired', 'unknown/lease_expired'],
    );
    const stopped = await worker.proc.kill('SIGTERM');
    assert.equal(stopped.code, 0, worker.proc.describe());
  } finally {
    await held.close();
  }
});
