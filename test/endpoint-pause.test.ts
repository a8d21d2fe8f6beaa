// A failing endpoint rests before its next request (migration 0032): from its second failure in a
// row for the schedule's step, and for a Retry-After it sent, whatever delivery is due next — so
// that a short outage of a receiver with a backlog does not spend five failures in a second and
// disable it.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import { tendDeferred } from '../src/db/deferred-queue.ts';
import {
  type AttemptResult,
  type ClaimedDelivery,
  claimDeliveries,
  liftEndpointPause,
  recordOutcomes,
  resendDelivery,
} from '../src/db/deliveries.ts';
import { asQueryable } from '../src/db/port.ts';
import { freshDatabase, type TestDatabase } from './support/database.ts';
import { createApp, createEndpoint, publishVia } from './support/fixtures.ts';
import { startTestHerald } from './support/herald.ts';
import { attemptResult } from './support/outcomes.ts';
import { MISQUEUED_SQL } from './support/queue.ts';
import { startReceiver } from './support/receiver.ts';
import { seedApp, seedEndpoint, seedMessage } from './support/seed.ts';
import { waitFor, waitForLockWaiter } from './support/wait.ts';

const STEPS = [5, 300, 1800];

describe('below the worker', () => {
  let database: TestDatabase;
  before(async () => {
    database = await freshDatabase('endpoint_pause');
  });
  after(async () => {
    await database.drop();
  });

  const failed = (claim: ClaimedDelivery, retryAfterSeconds: number | null = null): AttemptResult => ({
    ...attemptResult(claim, 'failure', new Date(Date.now() + 3_600_000)),
    endpointPause: { steps: STEPS, retryAfterSeconds },
  });
  const claimOne = async () =>
    claimDeliveries(database.db, { batch: 10, leaseSeconds: 30, afterEndpoint: '' });
  /** Seconds until the endpoint's slot opens again; null: open. */
  const pausedFor = async (endpointId: string) =>
    (
      await database.db.query<{ s: number | null }>(
        `select extract(epoch from next_start_at - now())::float8 as s from delivery_lease
          where endpoint_id = $1 and next_start_at > now()`,
        [endpointId],
      )
    ).rows[0]?.s ?? null;

  /** As if the rest were over: the slot opens now, and tending brings back what the rest held. */
  const restEnds = async (endpointId: string) => {
    await database.db.query(
      `update delivery_lease set next_start_at = now(), rests_until = case when rests_until is not null then now() end
        where endpoint_id = $1`,
      [endpointId],
    );
    await tendDeferred(database.db, false);
  };
  /** How many of the endpoint's pending deliveries wait where: due, deferred or held. */
  const placesOf = async (endpointId: string) =>
    Object.fromEntries(
      (
        await database.db.query<{ place: string; n: number }>(
          `select case when not q.held and exists (select 1 from delivery_due d where d.delivery_id = q.delivery_id)
                       then 'due' when q.held then 'held' else 'deferred' end as place, count(*)::int as n
             from delivery_queued q where q.endpoint_id = $1 group by 1`,
          [endpointId],
        )
      ).rows.map((r) => [r.place, r.n]),
    );

  test('one failure among successes: no pause; the second in a row: the first step; a success ends the run', async () => {
    const { db } = database;
    const app = await seedApp(db, 'steps');
    const endpoint = await seedEndpoint(db, app.id, 'http://127.0.0.1:9/steps');
    for (let i = 0; i < 4; i++) await seedMessage(db, app.id);

    const [first] = await claimOne();
    await recordOutcomes(db, [failed(first!)], 100);
    assert.equal(await pausedFor(endpoint.id), null, 'one failure: the next delivery may go at once');
    const [second] = await claimOne();
    assert.ok(second, 'the next delivery is claimed at once');
    await recordOutcomes(db, [failed(second)], 100);
    const paused = await pausedFor(endpoint.id);
    assert.ok(paused !== null && paused > 4 && paused <= 5, `two in a row: ${paused} s`);
    assert.deepEqual(await claimOne(), [], 'due work waits while the endpoint rests');

    // The rest is over (as if 5 s had passed): a success, and the count starts again.
    await db.query('update delivery_lease set next_start_at = null where endpoint_id = $1', [endpoint.id]);
    const [third] = await claimOne();
    await recordOutcomes(db, [attemptResult(third!)], 100);
    const [fourth] = await claimOne();
    await recordOutcomes(db, [failed(fourth!)], 100);
    assert.equal(await pausedFor(endpoint.id), null);
  });

  test("the third failure in a row rests for the second step; a Retry-After longer than the step is the endpoint's", async () => {
    const { db } = database;
    const app = await seedApp(db, 'retry-after');
    const endpoint = await seedEndpoint(db, app.id, 'http://127.0.0.1:9/retry-after');
    for (let i = 0; i < 3; i++) await seedMessage(db, app.id);
    await db.query('update endpoint set consecutive_failures = 2 where id = $1', [endpoint.id]);
    const [first] = await claimOne();
    await recordOutcomes(db, [failed(first!)], 100);
    const third = await pausedFor(endpoint.id);
    assert.ok(third !== null && third > 299 && third <= 300, `three in a row: ${third} s`);

    await restEnds(endpoint.id);
    await db.query('update endpoint set consecutive_failures = 0 where id = $1', [endpoint.id]);
    const [second] = await claimOne();
    await recordOutcomes(db, [failed(second!, 60)], 100);
    const asked = await pausedFor(endpoint.id);
    assert.ok(asked !== null && asked > 59 && asked <= 60, `a first failure with Retry-After 60: ${asked} s`);
    assert.deepEqual(await claimOne(), []);
  });

  /** Sets the endpoint's rest to end in `interval`, as an outcome write past the horizon marks it. */
  const restFor = (endpointId: string, interval: string) =>
    database.db.query(
      `update delivery_lease set next_start_at = now() + $2::interval, rests_until = now() + $2::interval
        where endpoint_id = $1`,
      [endpointId, interval],
    );

  test("a rest beyond the horizon holds the endpoint's backlog out of the claims' walk until it ends or is lifted", async () => {
    const { db } = database;
    const app = await seedApp(db, 'held');
    const endpoint = await seedEndpoint(db, app.id, 'http://127.0.0.1:9/held');
    for (let i = 0; i < 4; i++) await seedMessage(db, app.id);
    await db.query('update endpoint set consecutive_failures = 2 where id = $1', [endpoint.id]);
    const [first] = await claimOne();
    // The third failure in a row rests for 300 s, past the 60 s horizon: the outcome write marks
    // the slot, and tending holds the three due deliveries; the failed one's retry, an hour ahead,
    // waits deferred.
    await recordOutcomes(db, [failed(first!)], 100);
    assert.deepEqual(
      await placesOf(endpoint.id),
      { due: 3, deferred: 1 },
      'nothing moved by the outcome write',
    );
    assert.deepEqual(await tendDeferred(db, false), { requeued: 0, held: 3, released: 0, tended: true });
    assert.deepEqual(await placesOf(endpoint.id), { held: 3, deferred: 1 });

    // A publish meanwhile queues its delivery due; tending holds it.
    await seedMessage(db, app.id);
    assert.deepEqual(await placesOf(endpoint.id), { held: 3, deferred: 1, due: 1 });
    assert.deepEqual(await tendDeferred(db, false), { requeued: 0, held: 1, released: 0, tended: true });
    assert.deepEqual(await placesOf(endpoint.id), { held: 4, deferred: 1 });

    // The rest ends within the horizon: tending brings the backlog back before the slot opens.
    await restFor(endpoint.id, '30 seconds');
    assert.deepEqual(await tendDeferred(db, false), { requeued: 0, held: 0, released: 4, tended: true });
    assert.deepEqual(await placesOf(endpoint.id), { due: 4, deferred: 1 });
    assert.deepEqual(await claimOne(), [], 'the slot is still closed for its last 30 s');

    // A longer rest since (a Retry-After of an hour): tending holds the backlog again, and an
    // operator's resend, recovery or enable lifts the rest and brings it back at once.
    await restFor(endpoint.id, '1 hour');
    assert.deepEqual(await tendDeferred(db, false), { requeued: 0, held: 4, released: 0, tended: true });
    await liftEndpointPause(db, endpoint.id);
    assert.deepEqual(await placesOf(endpoint.id), { due: 4, deferred: 1 });
    assert.equal((await claimOne()).length, 1);
    const misqueued = await db.query<{ n: number }>(`select ${MISQUEUED_SQL} as n`, [app.id]);
    assert.equal(misqueued.rows[0]!.n, 0, 'every pending delivery has one queue row');
  });

  test('a resting endpoint with a backlog of more than 1,000 stays in the walk: moving it would cost more', async () => {
    const { db } = database;
    const app = await seedApp(db, 'large');
    const endpoint = await seedEndpoint(db, app.id, 'http://127.0.0.1:9/large');
    const items = Array.from({ length: 1001 }, (_, ord) => ({
      ord,
      app_id: app.id,
      event_type: 'e',
      payload: '{}',
      retention_days: 1,
      actor: 'test',
    }));
    await db.query('select id from herald_publish_messages($1::jsonb, true)', [JSON.stringify(items)]);
    await db.query('insert into delivery_lease (endpoint_id) values ($1) on conflict do nothing', [
      endpoint.id,
    ]);
    await restFor(endpoint.id, '1 hour');
    assert.deepEqual(await tendDeferred(db, false), { requeued: 0, held: 0, released: 0, tended: true });
    // Its mark goes: tending counts its rows no more for this rest.
    const marked = async () =>
      (
        await db.query('select 1 from delivery_lease where endpoint_id = $1 and rests_until is not null', [
          endpoint.id,
        ])
      ).rowCount === 1;
    assert.equal(await marked(), false);
    // One delivery fewer, and a rest of its own (as the next failure's): at most 1,000, it is held.
    await db.query(
      'delete from delivery where id = (select id from delivery where endpoint_id = $1 order by id limit 1)',
      [endpoint.id],
    );
    await restFor(endpoint.id, '1 hour');
    assert.deepEqual(await tendDeferred(db, false), { requeued: 0, held: 1000, released: 0, tended: true });
    assert.equal(await marked(), true);

    // Held rows whose endpoint lost its mark (a burst of more than 1,000 since): as the rest comes
    // within the horizon, the walk over held rows releases them, mark or not.
    await db.query(
      `update delivery_lease set next_start_at = now() + interval '30 seconds', rests_until = null
        where endpoint_id = $1`,
      [endpoint.id],
    );
    assert.deepEqual(await tendDeferred(db, false), { requeued: 0, held: 0, released: 0, tended: true });
    assert.deepEqual(await tendDeferred(db, true), { requeued: 0, held: 0, released: 1000, tended: true });
  });

  test('a lift waits for an outcome write under way that starts a rest, and lifts that rest', async () => {
    const { db } = database;
    const app = await seedApp(db, 'lift-race');
    const endpoint = await seedEndpoint(db, app.id, 'http://127.0.0.1:9/lift-race');
    for (let i = 0; i < 3; i++) await seedMessage(db, app.id);
    await db.query('update endpoint set consecutive_failures = 2 where id = $1', [endpoint.id]);
    const [claim] = await claimOne();
    const writer = new pg.Client({ connectionString: database.url });
    await writer.connect();
    try {
      await writer.query('begin');
      // The third failure in a row: a rest of 300 s, not committed yet.
      await recordOutcomes(asQueryable(writer), [failed(claim!)], 100);
      const lifting = liftEndpointPause(db, endpoint.id);
      await waitForLockWaiter(db, 'herald_lift_endpoint_pause');
      await writer.query('commit');
      await lifting;
    } finally {
      await writer.end();
    }
    assert.equal(await pausedFor(endpoint.id), null, 'the rest the outcome write started is lifted');
    assert.equal((await claimOne()).length, 1);
  });

  test('a resend queued behind a failing attempt sends now: that failure counts, but starts no rest', async () => {
    const { db } = database;
    const app = await seedApp(db, 'queued-resend');
    const endpoint = await seedEndpoint(db, app.id, 'http://127.0.0.1:9/queued-resend');
    await seedMessage(db, app.id);
    await db.query('update endpoint set consecutive_failures = 2 where id = $1', [endpoint.id]);
    const [claim] = await claimOne();
    assert.equal(await resendDelivery(db, app.id, claim!.messageId, endpoint.id), 'queued');
    // The third failure in a row would rest the endpoint for 300 s.
    await recordOutcomes(db, [failed(claim!)], 100);
    assert.equal(await pausedFor(endpoint.id), null);
    const { rows } = await db.query<{ failures: number }>(
      'select consecutive_failures as failures from endpoint where id = $1',
      [endpoint.id],
    );
    assert.equal(rows[0]!.failures, 3, 'the failure counts towards auto-disable');
    const [again] = await claimOne();
    assert.equal(again?.deliveryId, claim!.deliveryId, 'the resend is claimed at once');
    assert.equal(again?.trigger, 'manual');
  });

  test('a resend queued behind an attempt whose payload went meanwhile leaves that attempt the last', async () => {
    const { db } = database;
    const app = await seedApp(db, 'queued-expired');
    await seedEndpoint(db, app.id, 'http://127.0.0.1:9/queued-expired');
    await seedMessage(db, app.id);
    const [claim] = await claimOne();
    assert.equal(await resendDelivery(db, app.id, claim!.messageId, claim!.endpointId), 'queued');
    await db.query('update message set payload = null where id = $1', [claim!.messageId]);
    await recordOutcomes(db, [attemptResult(claim!)], 100);
    const { rows } = await db.query<{ state: string; cycle: number; marked: boolean }>(
      'select state, cycle, resend_requested_at is not null as marked from delivery where id = $1',
      [claim!.deliveryId],
    );
    assert.deepEqual(rows[0], { state: 'succeeded', cycle: 1, marked: false });
  });

  test('an enable, which holds the endpoint, lifts without waiting for a slot an outcome write holds: no deadlock', async () => {
    const { db } = database;
    const app = await seedApp(db, 'enable-lift');
    const endpoint = await seedEndpoint(db, app.id, 'http://127.0.0.1:9/enable-lift');
    await seedMessage(db, app.id);
    const [claim] = await claimOne();
    assert.ok(claim);
    // An outcome write's order: the slot first, the endpoint after.
    const writer = new pg.Client({ connectionString: database.url });
    await writer.connect();
    try {
      await writer.query('begin');
      await writer.query('select 1 from delivery_lease where endpoint_id = $1 for update', [endpoint.id]);
      // The enable's order: the endpoint first (replaceEndpoint's lock), then the lift.
      await db.transaction(async (tx) => {
        // A lift that waited for the slot would wait for good (the writer waits for this next).
        await tx.query(`set local lock_timeout = '2s'`);
        await tx.query('select 1 from endpoint where id = $1 for update', [endpoint.id]);
        await liftEndpointPause(tx, endpoint.id, true);
      });
      await writer.query(
        'update endpoint set consecutive_failures = consecutive_failures + 1 where id = $1',
        [endpoint.id],
      );
      await writer.query('commit');
    } finally {
      await writer.end();
    }
  });

  test("lifting a rest keeps a throttle's spacing (at most a second)", async () => {
    const { db } = database;
    const app = await seedApp(db, 'lifted');
    const endpoint = await seedEndpoint(db, app.id, 'http://127.0.0.1:9/lifted');
    await seedMessage(db, app.id);
    const [claim] = await claimOne();
    await recordOutcomes(db, [failed(claim!, 3600)], 100);
    assert.ok(((await pausedFor(endpoint.id)) ?? 0) > 3500);
    await liftEndpointPause(db, endpoint.id);
    assert.equal(await pausedFor(endpoint.id), null);
    await db.query(
      `update delivery_lease set next_start_at = now() + interval '0.5 seconds' where endpoint_id = $1`,
      [endpoint.id],
    );
    await liftEndpointPause(db, endpoint.id);
    assert.ok((await pausedFor(endpoint.id)) !== null);
  });

  test('a worker of the version before (no pause in its items) pauses nothing', async () => {
    const { db } = database;
    const app = await seedApp(db, 'older');
    const endpoint = await seedEndpoint(db, app.id, 'http://127.0.0.1:9/older');
    for (let i = 0; i < 3; i++) await seedMessage(db, app.id);
    for (let i = 0; i < 3; i++) {
      const [claim] = await claimOne();
      assert.ok(claim, `delivery ${i + 1} is claimed at once`);
      await recordOutcomes(db, [attemptResult(claim, 'failure', new Date(Date.now() + 3_600_000))], 100);
    }
    assert.equal(await pausedFor(endpoint.id), null);
  });
});

test('a receiver with a backlog that fails for a moment (a deploy) is not disabled: its failures are spaced, then it recovers', async () => {
  // Steps of 1, 2 and 4 s; five failures in a row disable. The receiver answers 503 for 1.5 s from
  // the first request (not from the worker's start, which a loaded machine may take a while over):
  // without rests, the backlog's first five requests would fail within milliseconds.
  const t = await startTestHerald('endpoint_pause', {
    worker: false,
    env: { HERALD_RETRY_SCHEDULE: '1,2,4,8', HERALD_DISABLE_AFTER_FAILURES: '5' },
  });
  let downUntil = 0;
  const receiver = await startReceiver(() => {
    if (downUntil === 0) downUntil = Date.now() + 1500;
    return Date.now() < downUntil ? { status: 503 } : { status: 204 };
  });
  try {
    const app = await createApp(t, 'deploy');
    const endpoint = await createEndpoint(t, app, { url: `${receiver.url}/deploy` });
    for (let i = 0; i < 10; i++) await publishVia(t, app, { eventType: 'e', payload: { i } });
    await t.herald.startWorker();
    await waitFor(
      'every delivery to succeed',
      async () =>
        (
          await t.database.db.query<{ n: number }>(
            `select count(*)::int as n from delivery where endpoint_id = $1 and state = 'succeeded'`,
            [endpoint],
          )
        ).rows[0]!.n === 10,
      20_000,
    );
    const { rows } = await t.database.db.query<{ disabled: boolean; failures: number }>(
      'select disabled, consecutive_failures as failures from endpoint where id = $1',
      [endpoint],
    );
    assert.deepEqual(rows[0], { disabled: false, failures: 0 });
    const failures = receiver.requests.filter((r) => r.startedAt < downUntil).length;
    assert.ok(failures >= 2 && failures < 5, `${failures} requests during the outage`);

    // An operator who resends, recovers, replays or enables asks for a send now: the rest is lifted.
    const rest = () =>
      t.database.db.query(
        `update delivery_lease set next_start_at = now() + interval '1 hour' where endpoint_id = $1`,
        [endpoint],
      );
    const resting = async () =>
      (
        await t.database.db.query(
          'select 1 from delivery_lease where endpoint_id = $1 and next_start_at > now()',
          [endpoint],
        )
      ).rowCount === 1;
    const { rows: sent } = await t.database.db.query<{ id: string; message: string }>(
      'select id, message_id as message from delivery where endpoint_id = $1 order by id limit 2',
      [endpoint],
    );
    await rest();
    // The endpoint says so, and until when.
    const read = await t.call('GET', `/api/v1/app/${app}/endpoint/${endpoint}`);
    const until = new Date(read.body.restingUntil).getTime() - Date.now();
    assert.ok(until > 3_500_000 && until <= 3_600_000, `resting for ${until} ms more`);
    const resent = await t.call(
      'POST',
      `/api/v1/app/${app}/msg/${sent[0]!.message}/endpoint/${endpoint}/resend`,
    );
    assert.equal(resent.status, 202, JSON.stringify(resent.body));
    assert.equal(await resting(), false, 'resent');
    assert.equal((await t.call('GET', `/api/v1/app/${app}/endpoint/${endpoint}`)).body.restingUntil, null);
    await rest();
    await t.database.db.query(`update delivery set state = 'failed', next_attempt_at = null where id = $1`, [
      sent[1]!.id,
    ]);
    const recovered = await t.call('POST', `/api/v1/app/${app}/endpoint/${endpoint}/recover`, {
      since: new Date(Date.now() - 3_600_000).toISOString(),
    });
    assert.equal(recovered.status, 202, JSON.stringify(recovered.body));
    assert.equal(await resting(), false, 'recovered');
    // A replay, as a resend: its finished deliveries start again, and their endpoint's rest ends.
    await waitFor('the recovered delivery to succeed', async () => {
      const { rows: states } = await t.database.db.query<{ state: string }>(
        'select state from delivery where id = $1',
        [sent[1]!.id],
      );
      return states[0]!.state === 'succeeded';
    });
    await rest();
    const replayed = await t.call('POST', '/api/v1/replay', {
      status: 'succeeded',
      cap: 10,
      messageIds: [sent[1]!.message],
    });
    assert.equal(replayed.status, 202, JSON.stringify(replayed.body));
    assert.equal(replayed.body.count, 1, JSON.stringify(replayed.body));
    assert.equal(await resting(), false, 'replayed');
    await rest();
    for (const disabled of [true, false]) {
      const patched = await t.call('PATCH', `/api/v1/app/${app}/endpoint/${endpoint}`, { disabled });
      assert.equal(patched.status, 200, JSON.stringify(patched.body));
      // Disabled, it still rests; the enable's answer shows the rest lifted.
      assert.equal(patched.body.restingUntil === null, !disabled, JSON.stringify(patched.body));
    }
    assert.equal(await resting(), false, 'enabled');
    // Sent to a new URL: the old URL's rest, failures and refused credentials are not the new one's.
    await rest();
    await t.database.db.query(
      'update endpoint set consecutive_failures = 4, credentials_rejected_at = now() where id = $1',
      [endpoint],
    );
    const moved = await t.call('PATCH', `/api/v1/app/${app}/endpoint/${endpoint}`, {
      url: `${receiver.url}/deploy-moved`,
    });
    assert.equal(moved.status, 200, JSON.stringify(moved.body));
    assert.equal(moved.body.restingUntil, null);
    assert.equal(moved.body.credentialsRejectedAt, null);
    assert.equal(await resting(), false, 'moved');
    const { rows: counted } = await t.database.db.query<{ n: number }>(
      'select consecutive_failures as n from endpoint where id = $1',
      [endpoint],
    );
    assert.equal(counted[0]!.n, 0);
  } finally {
    await t.close();
    await receiver.close();
  }
});
