// Deliveries that wait long wait out of the claims' walk (migration 0030): a retry due later than
// the horizon, and a disabled endpoint's backlog, wait in delivery_deferred; the workers' tending
// brings rows back to delivery_due as they come due, holds what is queued for disabled endpoints,
// and releases what a hold racing with an enable left behind; enabling an endpoint releases its
// rows at once. Every pending delivery keeps exactly one queue row through all of it, under
// concurrent writers, toggles and tending — and end to end, a retry that waited deferred is sent
// at its time.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import { tendDeferred } from '../src/db/deferred-queue.ts';
import { claimDeliveries, recordOutcomes, resendDelivery } from '../src/db/deliveries.ts';
import { freshDatabase, type TestDatabase } from './support/database.ts';
import { createApp, createEndpoint, publishVia } from './support/fixtures.ts';
import { startTestHerald, type TestHerald } from './support/herald.ts';
import { attemptResult } from './support/outcomes.ts';
import { MISQUEUED_SQL } from './support/queue.ts';
import { type Receiver, startReceiver } from './support/receiver.ts';
import { seedApp, seedEndpoint, seedMessage } from './support/seed.ts';
import { waitFor } from './support/wait.ts';

describe('the deferred queue rows', () => {
  let database: TestDatabase;
  before(async () => {
    database = await freshDatabase('deferred_queue');
  });
  after(() => database.drop());

  /** Where each of the app's pending deliveries waits: due, deferred or held. */
  async function placesOf(appId: string): Promise<Map<string, string>> {
    const { rows } = await database.db.query<{ id: string; place: string }>(
      `select q.delivery_id as id, case when d.delivery_id is not null then 'due'
                                        when f.held then 'held' else 'deferred' end as place
         from delivery_queued q
         left join delivery_due d on d.delivery_id = q.delivery_id
         left join delivery_deferred f on f.delivery_id = q.delivery_id
        where q.endpoint_id in (select id from endpoint where app_id = $1)`,
      [appId],
    );
    return new Map(rows.map((r) => [r.id, r.place]));
  }

  async function assertQueuedOnce(appId: string): Promise<void> {
    const { rows } = await database.db.query<{ n: number }>(`select ${MISQUEUED_SQL} as n`, [appId]);
    assert.equal(rows[0]!.n, 0, 'every pending delivery has one queue row, and only they have one');
  }

  /** Runs `sql` on a session whose horizon is `horizon`: writers and tending may differ. */
  async function withHorizon<T>(horizon: string, run: (client: pg.Client) => Promise<T>): Promise<T> {
    const client = new pg.Client({ connectionString: database.url });
    await client.connect();
    try {
      await client.query(`set herald.defer_horizon = '${horizon}'`);
      return await run(client);
    } finally {
      await client.end();
    }
  }

  test('a retry beyond the horizon waits deferred and out of the walk; one within it waits due', async () => {
    const db = database.db;
    const app = await seedApp(db, 'retries');
    await seedEndpoint(db, app.id, 'http://127.0.0.1:1/a');
    await seedEndpoint(db, app.id, 'http://127.0.0.1:1/b');
    await seedMessage(db, app.id);
    const [soon, later] = await claimDeliveries(db, { batch: 2, leaseSeconds: 60, afterEndpoint: '' });
    assert.ok(soon && later);
    await recordOutcomes(
      db,
      [
        attemptResult(soon, 'failure', new Date(Date.now() + 30_000)),
        attemptResult(later, 'failure', new Date(Date.now() + 3_600_000)),
      ],
      5,
    );
    assert.deepEqual(
      await placesOf(app.id),
      new Map([
        [soon.deliveryId, 'due'],
        [later.deliveryId, 'deferred'],
      ]),
    );
    // The claims' walk sees only the endpoint with work within the horizon.
    const walked = await db.query<{ endpoint_id: string }>('select distinct endpoint_id from delivery_due');
    assert.deepEqual(
      walked.rows.map((r) => r.endpoint_id),
      [soon.endpointId],
    );
    await assertQueuedOnce(app.id);

    // A resend (the trigger's path) queues it for now: back in delivery_due.
    await resendDelivery(db, app.id, later.messageId, later.endpointId);
    assert.equal((await placesOf(app.id)).get(later.deliveryId), 'due');
    await assertQueuedOnce(app.id);
  });

  test('tending brings rows coming due back, and holds what waits for a disabled endpoint', async () => {
    const db = database.db;
    const app = await seedApp(db, 'tending');
    const open = await seedEndpoint(db, app.id, 'http://127.0.0.1:1/open');
    const closed = await seedEndpoint(db, app.id, 'http://127.0.0.1:1/closed');
    await seedMessage(db, app.id);
    // Written by a session whose horizon is 1 s, each delivery is queued 30 s ahead: deferred.
    await withHorizon('1 s', (client) =>
      client.query(`update delivery set next_attempt_at = now() + interval '30 seconds' where app_id = $1`, [
        app.id,
      ]),
    );
    assert.deepEqual([...(await placesOf(app.id)).values()], ['deferred', 'deferred']);

    await db.query(`update endpoint set disabled = true, disabled_reason = 'operator' where id = $1`, [
      closed.id,
    ]);
    // Tending (horizon 60 s): the open endpoint's row comes due, the disabled one's is held.
    const tended = await tendDeferred(db, false);
    assert.deepEqual(tended, { requeued: 1, held: 1, released: 0, tended: true });
    const places = await placesOf(app.id);
    const placeAt = async (endpointId: string) => {
      const { rows } = await db.query<{ id: string }>('select id from delivery where endpoint_id = $1', [
        endpointId,
      ]);
      return rows.map((r) => places.get(r.id));
    };
    assert.deepEqual(await placeAt(open.id), ['due']);
    assert.deepEqual(await placeAt(closed.id), ['held']);

    // A publish queues for the disabled endpoint in delivery_due; tending holds it.
    await seedMessage(db, app.id);
    assert.equal(
      (await db.query('select 1 from delivery_due where endpoint_id = $1', [closed.id])).rowCount,
      1,
    );
    assert.deepEqual(await tendDeferred(db, false), { requeued: 0, held: 1, released: 0, tended: true });
    assert.equal(
      (await db.query('select 1 from delivery_due where endpoint_id = $1', [closed.id])).rowCount,
      0,
    );
    await assertQueuedOnce(app.id);

    // Enabling it releases its rows at once, in its own transaction.
    await db.query(`update endpoint set disabled = false, disabled_reason = null where id = $1`, [closed.id]);
    const released = await db.query<{ n: number }>(
      'select count(*)::int as n from delivery_due where endpoint_id = $1',
      [closed.id],
    );
    assert.equal(released.rows[0]!.n, 2);
    assert.equal(
      (await db.query('select 1 from delivery_deferred where endpoint_id = $1', [closed.id])).rowCount,
      0,
    );

    // Disabling it again holds its due rows at once.
    await db.query(`update endpoint set disabled = true, disabled_reason = 'operator' where id = $1`, [
      closed.id,
    ]);
    assert.equal(
      (await db.query('select 1 from delivery_due where endpoint_id = $1', [closed.id])).rowCount,
      0,
    );
    assert.equal(
      (await db.query('select 1 from delivery_deferred where endpoint_id = $1 and held', [closed.id]))
        .rowCount,
      2,
    );
    await assertQueuedOnce(app.id);
  });

  test('a held row of an enabled endpoint (a hold that raced with the enable) is released by the walk over held rows', async () => {
    const db = database.db;
    const app = await seedApp(db, 'raced');
    await seedEndpoint(db, app.id, 'http://127.0.0.1:1/raced');
    await seedMessage(db, app.id);
    // What a hold committed after the enable's release leaves: a held row, its endpoint enabled.
    await withHorizon('1 s', (client) =>
      client.query(`update delivery set next_attempt_at = now() + interval '2 hours' where app_id = $1`, [
        app.id,
      ]),
    );
    await db.query(
      'update delivery_deferred set held = true where endpoint_id in (select id from endpoint where app_id = $1)',
      [app.id],
    );
    assert.deepEqual([...(await placesOf(app.id)).values()], ['held']);
    assert.deepEqual(await tendDeferred(db, false), { requeued: 0, held: 0, released: 0, tended: true });
    assert.deepEqual(await tendDeferred(db, true), { requeued: 0, held: 0, released: 1, tended: true });
    // Two hours ahead, it waits on, unheld, until it comes due.
    assert.deepEqual([...(await placesOf(app.id)).values()], ['deferred']);
    await assertQueuedOnce(app.id);
  });

  test('a hold that meets an enable under way holds nothing: the enable is not undone', async () => {
    const db = database.db;
    const app = await seedApp(db, 'enable-race');
    const endpoint = await seedEndpoint(db, app.id, 'http://127.0.0.1:1/race');
    await db.query(`update endpoint set disabled = true, disabled_reason = 'operator' where id = $1`, [
      endpoint.id,
    ]);
    await seedMessage(db, app.id);
    await seedMessage(db, app.id);
    // Published while disabled: due rows that tending is about to hold, as its snapshot says.
    assert.equal(
      (await db.query('select 1 from delivery_due where endpoint_id = $1', [endpoint.id])).rowCount,
      2,
    );
    const enabling = new pg.Client({ connectionString: database.url });
    await enabling.connect();
    try {
      await enabling.query('begin');
      await enabling.query(`update endpoint set disabled = false, disabled_reason = null where id = $1`, [
        endpoint.id,
      ]);
      // The enable is under way (uncommitted): the hold must not move the rows it is releasing.
      const { rows } = await db.query<{ moved: number }>('select herald_hold_endpoint($1, 100) as moved', [
        endpoint.id,
      ]);
      assert.equal(rows[0]!.moved, 0);
      await enabling.query('commit');
    } finally {
      await enabling.end();
    }
    assert.equal(
      (await db.query('select 1 from delivery_due where endpoint_id = $1', [endpoint.id])).rowCount,
      2,
    );
    assert.equal(
      (await db.query('select 1 from delivery_deferred where endpoint_id = $1', [endpoint.id])).rowCount,
      0,
    );
    await assertQueuedOnce(app.id);
  });

  test('concurrent writers, disables, enables, rests, lifts and tending leave every pending delivery queued once', async () => {
    const db = database.db;
    const app = await seedApp(db, 'churn');
    const endpoints: string[] = [];
    for (let i = 0; i < 8; i++)
      endpoints.push((await seedEndpoint(db, app.id, `http://127.0.0.1:1/${i}`)).id);
    for (let i = 0; i < 25; i++) await seedMessage(db, app.id);
    const { rows } = await db.query<{ id: string }>('select id from delivery where app_id = $1 order by id', [
      app.id,
    ]);
    const ids = rows.map((r) => r.id);
    const pick = (n: number) => [...ids].sort(() => Math.random() - 0.5).slice(0, n);

    const ROUNDS = 60;
    // Writers defer whatever is more than 20 s ahead; tending takes back anything within 10 min.
    const writer = () =>
      withHorizon('20 s', async (client) => {
        for (let round = 0; round < ROUNDS; round++) {
          // Its rows locked in id order, as two writers must, or they deadlock each other (an
          // UPDATE by a list of ids locks in whatever order its plan meets the rows). herald's
          // movers of queue rows skip a locked delivery instead of waiting for it.
          await client.query(
            `update delivery set next_attempt_at = now() + make_interval(secs => (random() * 60)::int)
              where id in (select id from delivery where id = any($1) and state = 'pending'
                            order by id for no key update)`,
            [pick(10)],
          );
        }
      });
    const toggler = () =>
      withHorizon('20 s', async (client) => {
        for (let round = 0; round < ROUNDS; round++) {
          const endpoint = endpoints[round % endpoints.length]!;
          await client.query(
            `update endpoint set disabled = not disabled,
                    disabled_reason = case when disabled then null else 'operator' end
              where id = $1`,
            [endpoint],
          );
        }
      });
    // Rests of an hour start as an outcome write starts one (the endpoint's row and its slot locked,
    // the slot marked) and are lifted as a resend lifts one, on endpoints picked at random: a lift
    // meets rests, held rows and holds under way.
    await db.query(
      'insert into delivery_lease (endpoint_id) select unnest($1::text[]) on conflict do nothing',
      [endpoints],
    );
    const rester = () =>
      withHorizon('20 s', async (client) => {
        for (let round = 0; round < ROUNDS; round++) {
          const endpoint = endpoints[Math.floor(Math.random() * endpoints.length)]!;
          if (Math.random() < 0.5) {
            await client.query('select herald_lift_endpoint_pause($1, false)', [endpoint]);
            continue;
          }
          await client.query('begin');
          await client.query(
            'update endpoint set consecutive_failures = consecutive_failures + 1 where id = $1',
            [endpoint],
          );
          await client.query(
            `update delivery_lease set next_start_at = now() + interval '1 hour', rests_until = now() + interval '1 hour'
              where endpoint_id = $1`,
            [endpoint],
          );
          await client.query('commit');
        }
      });
    const tender = () =>
      withHorizon('10 min', async (client) => {
        for (let round = 0; round < ROUNDS; round++) {
          await client.query('select * from herald_tend_deferred(7, $1)', [round % 3 === 0]);
        }
      });
    await Promise.all([writer(), writer(), toggler(), rester(), rester(), tender(), tender()]);
    await assertQueuedOnce(app.id);
    // Of the rests left, half end within the horizon (in 30 s), the others last their hour.
    await db.query(
      `update delivery_lease set next_start_at = now() + interval '30 seconds', rests_until = now() + interval '30 seconds'
        where endpoint_id = any($1) and next_start_at > now()`,
      [endpoints.filter((_, n) => n % 2 === 0)],
    );

    // Settled: tending (with the walk over held rows) leaves no held row of an open endpoint and no
    // due row of a closed one (disabled, or resting for the hour).
    await withHorizon('10 min', async (client) => {
      for (let i = 0; i < 20; i++) {
        const { rows: tended } = await client.query<{ requeued: number; held: number; released: number }>(
          'select * from herald_tend_deferred(1000, true)',
        );
        if (tended[0]!.requeued + tended[0]!.held + tended[0]!.released === 0) break;
      }
    });
    const stray = await db.query<{ n: number }>(
      `select (select count(*) from delivery_deferred q join endpoint e on e.id = q.endpoint_id
                where q.held and not e.disabled and not herald_endpoint_resting(e.id))
            + (select count(*) from delivery_due q join endpoint e on e.id = q.endpoint_id
                where (e.disabled or herald_endpoint_resting(e.id)) and e.app_id = $1) as n`,
      [app.id],
    );
    assert.equal(Number(stray.rows[0]!.n), 0);
    await assertQueuedOnce(app.id);
  });
});

describe('a retry that waits deferred, end to end', () => {
  let t: TestHerald;
  let receiver: Receiver;
  const RETRY_SECONDS = 3;

  before(async () => {
    // A horizon of 1 s defers the 3 s retry; a 4 s lease has the worker tend every second.
    t = await startTestHerald('deferred_e2e', {
      settings: { 'herald.defer_horizon': '1 s' },
      env: {
        HERALD_RETRY_SCHEDULE: String(RETRY_SECONDS),
        HERALD_LEASE_SECONDS: '4',
        HERALD_ATTEMPT_TIMEOUT_MS: '2000',
      },
    });
    receiver = await startReceiver((_request, n) => ({ status: n === 1 ? 500 : 204 }));
  });
  after(async () => {
    await t.close();
    await receiver.close();
  });

  test('is sent at its time, not before', async () => {
    const app = await createApp(t, 'deferred-e2e');
    const endpoint = await createEndpoint(t, app, { url: `${receiver.url}/hook` });
    await publishVia(t, app, { eventType: 'e', payload: { n: 1 } });

    await waitFor('the first attempt to fail and its retry to wait deferred', async () => {
      const { rowCount } = await t.database.db.query(
        'select 1 from delivery_deferred where endpoint_id = $1',
        [endpoint],
      );
      return rowCount === 1;
    });
    // Recorded, not only received: the receiver has the request before the outcome is written.
    await waitFor(
      'the retry to succeed',
      async () => {
        const { rowCount } = await t.database.db.query(
          `select 1 from delivery where endpoint_id = $1 and state = 'succeeded'`,
          [endpoint],
        );
        return rowCount === 1;
      },
      15_000,
    );
    assert.equal(receiver.requests.length, 2);
    // The retry is scheduled from the failure's response (its start plus its duration), its wait
    // spread by ±20 % (src/herald.ts).
    const { rows } = await t.database.db.query<{ outcome: string; started_at: Date; duration_ms: number }>(
      'select outcome, started_at, duration_ms from attempt where endpoint_id = $1 order by started_at',
      [endpoint],
    );
    assert.deepEqual(
      rows.map((r) => r.outcome),
      ['failure', 'success'],
    );
    const answeredAt = rows[0]!.started_at.getTime() + rows[0]!.duration_ms;
    const waited = rows[1]!.started_at.getTime() - answeredAt;
    assert.ok(
      waited >= RETRY_SECONDS * 800 - 50,
      `the retry started ${waited} ms after the failure's answer`,
    );
    const left = await t.database.db.query('select 1 from delivery_queued where endpoint_id = $1', [
      endpoint,
    ]);
    assert.equal(left.rowCount, 0);
  });
});
