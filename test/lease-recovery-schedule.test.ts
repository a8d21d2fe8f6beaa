// A recovered lease's delivery waits the retry schedule's next step, as an attempt that timed out
// does (migration 0031), instead of coming round at once: a worker that dies on a message must not
// be handed it again at every recovery.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { recoverExpiredLeases } from '../src/db/deliveries.ts';
import { freshDatabase, type TestDatabase } from './support/database.ts';
import { claimForTest, seedApp, seedEndpoint, seedMessage } from './support/seed.ts';

let database: TestDatabase;
before(async () => {
  database = await freshDatabase('lease_recovery_schedule');
});
after(async () => {
  await database.drop();
});

// Three attempts a cycle: after the first a minute's wait, after the second an hour's.
const POLICY = { schedule: [60, 3600], jitter: 0.2 };

test('each recovered lease waits the step after its attempt, within the jitter; past the budget it fails', async () => {
  const { db } = database;
  const app = await seedApp(db, 'recovery');
  const endpoints = [];
  for (const n of [1, 2, 3]) endpoints.push(await seedEndpoint(db, app.id, `http://127.0.0.1:9/${n}`));
  await seedMessage(db, app.id);
  const claimed = await claimForTest(db);
  assert.equal(claimed.length, 3);
  // Endpoint n's delivery is on its n-th attempt when its worker dies.
  for (const [n, endpoint] of endpoints.entries())
    await db.query(
      `update delivery set attempts_in_cycle = $2, lease_expires_at = now() - interval '1 second'
        where endpoint_id = $1`,
      [endpoint.id, n + 1],
    );

  const recovered = await recoverExpiredLeases(db, POLICY);
  assert.equal(recovered.length, 3);
  const { rows } = await db.query<{
    url: string;
    state: string;
    waitS: number | null;
    queued: string | null;
  }>(
    `select e.url, d.state, extract(epoch from d.next_attempt_at - now())::float8 as "waitS",
            (select 'due' from delivery_due q where q.delivery_id = d.id
              union all select 'deferred' from delivery_deferred q where q.delivery_id = d.id) as queued
       from delivery d join endpoint e on e.id = d.endpoint_id order by e.url`,
  );
  const [first, second, third] = rows;
  assert.equal(first!.state, 'pending');
  assert.ok(first!.waitS! >= 48 && first!.waitS! <= 72, `after attempt 1: ${first!.waitS} s`);
  assert.equal(second!.state, 'pending');
  assert.ok(second!.waitS! >= 2880 && second!.waitS! <= 4320, `after attempt 2: ${second!.waitS} s`);
  // Waiting an hour, it is out of the claims' walk until it comes due.
  assert.equal(second!.queued, 'deferred');
  assert.equal(third!.state, 'failed');
  assert.equal(third!.waitS, null);

  const { rows: attempts } = await db.query<{ outcome: string }>(
    `select outcome || '/' || response_class as outcome from attempt order by id`,
  );
  assert.deepEqual(
    attempts.map((a) => a.outcome),
    ['unknown/lease_expired', 'unknown/lease_expired', 'unknown/lease_expired'],
  );
});
