// Invariants 3, 5 and 6 across processes: a `herald worker` killed with SIGKILL while its request
// is at the receiver leaves an open attempt under a live lease. Nobody may touch that lease before
// it expires; once it has, another worker process marks the attempt `unknown` (lease_expired) and
// delivers the message again with the same webhook-id.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { loadConfig } from '../src/config.ts';
import { createHerald, type Herald } from '../src/herald.ts';
import { freshDatabase, type TestDatabase } from './support/database.ts';
import { testEnv } from './support/herald.ts';
import { killAll, startHerald } from './support/processes.ts';
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
