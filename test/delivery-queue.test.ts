// The queue tables (migration 0015) follow the deliveries through every writer: fan-out, claim,
// each kind of outcome, a lease given back, recovery of an expired lease, resend, endpoint
// recovery, replay, and the deletes that cascade from an endpoint or a pruned message. The claim
// reads only the queue tables to find work, so a writer that left them behind would lose a
// delivery (never claimed again) or block an endpoint for good (a lease that never ends).

import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { after, before, test } from 'node:test';
import pg from 'pg';
import {
  acknowledgeUnknownOutcomes,
  type ClaimedDelivery,
  claimDeliveries,
  recordOutcomes,
  recoverExpiredLeases,
  recoverFailedDeliveries,
  releaseClaim,
  releaseUnsent,
  resendDelivery,
  restartDeliveries,
} from '../src/db/deliveries.ts';
import { deleteEndpoint } from '../src/db/endpoints.ts';
import { asQueryable, type Db } from '../src/db/port.ts';
import { pruneFinishedHistory } from '../src/db/retention.ts';
import { freshDatabase, type TestDatabase } from './support/database.ts';
import { attemptResult, noWaits } from './support/outcomes.ts';
import { MISQUEUED_SQL } from './support/queue.ts';
import { seedApp, seedEndpoint, seedMessage } from './support/seed.ts';
import { waitForLockWaiter } from './support/wait.ts';

let database: TestDatabase;

before(async () => {
  database = await freshDatabase('delivery_queue');
});
after(() => database.drop());

interface Counts {
  misqueued: number;
  due: number;
  leased: number;
  failed: number;
}

async function queue(appId: string, db: Db): Promise<Counts> {
  const result = await db.query<Counts>(
    `with mine as (select id from endpoint where app_id = $1)
     select ${MISQUEUED_SQL} as misqueued,
            (select count(*)::int from delivery_queued where endpoint_id in (table mine)) as due,
            (select count(*)::int from delivery_lease where endpoint_id in (table mine) and delivery_id is not null) as leased,
            (select count(*)::int from delivery_failed where endpoint_id in (table mine)) as failed`,
    [appId],
  );
  return result.rows[0]!;
}

async function assertFollows(
  appId: string,
  step: string,
  expected: Omit<Counts, 'misqueued'>,
  db: Db = database.db,
) {
  const counts = await queue(appId, db);
  assert.deepEqual(counts, { misqueued: 0, ...expected }, `after ${step}`);
}

/**
 * A database of the test's own (every claim there is of its endpoints), with a second connection
 * to hold locks from as another writer would; both closed after `run`.
 */
async function withOwnDatabase(name: string, run: (own: TestDatabase, other: pg.Client) => Promise<void>) {
  const own = await freshDatabase(name);
  const other = new pg.Client({ connectionString: own.url });
  await other.connect();
  try {
    await run(own, other);
  } finally {
    await other.end();
    await own.drop();
  }
}

test('every writer keeps the queue tables equal to the deliveries’ states', async () => {
  const db = database.db;
  const app = await seedApp(db, 'queue');
  const endpoints = [];
  for (let i = 0; i < 4; i++) endpoints.push(await seedEndpoint(db, app.id, 'http://127.0.0.1:1/q'));
  const messages = [];
  for (let i = 0; i < 3; i++) messages.push(await seedMessage(db, app.id));
  await assertFollows(app.id, 'fan-out', { due: 12, leased: 0, failed: 0 });

  const first = await claimDeliveries(db, { batch: 4, leaseSeconds: 600, afterEndpoint: '' });
  assert.equal(first.length, 4);
  await assertFollows(app.id, 'a claim', { due: 8, leased: 4, failed: 0 });

  // Success, a retry later, a final failure; the fourth lease is given back unsent.
  const later = new Date(Date.now() + 3_600_000);
  await recordOutcomes(
    db,
    [
      attemptResult(first[0]!, 'success', null),
      attemptResult(first[1]!, 'failure', later),
      attemptResult(first[2]!, 'failure', null),
    ],
    5,
  );
  assert.equal(await releaseUnsent(db, first[3]!), true);
  await assertFollows(app.id, 'outcomes and a lease given back', { due: 10, leased: 0, failed: 1 });
  // The retry an hour ahead waits out of the claims' walk (0030); the rest are due now.
  const deferred = await db.query<{ delivery_id: string }>('select delivery_id from delivery_deferred');
  assert.deepEqual(
    deferred.rows.map((r) => r.delivery_id),
    [first[1]!.deliveryId],
  );

  // A claim whose worker never got it is given back whole.
  const claimId = crypto.randomUUID();
  const lost = await claimDeliveries(db, { batch: 4, leaseSeconds: 600, afterEndpoint: '', claimId });
  assert.ok(lost.length > 0);
  assert.equal(await releaseClaim(db, claimId), lost.length);
  await assertFollows(app.id, 'a claim given back', { due: 10, leased: 0, failed: 1 });

  // Leases that expire are recovered: due again.
  const expiring = await claimDeliveries(db, { batch: 4, leaseSeconds: 0, afterEndpoint: '' });
  assert.ok(expiring.length > 0);
  await assertFollows(app.id, 'a claim with expired leases', {
    due: 10 - expiring.length,
    leased: expiring.length,
    failed: 1,
  });
  const recovered = await recoverExpiredLeases(db, noWaits(5));
  assert.equal(recovered.length, expiring.length);
  await assertFollows(app.id, 'recovery', { due: 10, leased: 0, failed: 1 });

  // Resend, endpoint recovery and replay move failed and finished deliveries back to due.
  const failed = first[2]!;
  await resendDelivery(db, app.id, failed.messageId, failed.endpointId);
  await assertFollows(app.id, 'a resend', { due: 11, leased: 0, failed: 0 });
  const again = await claimDeliveries(db, { batch: 4, leaseSeconds: 600, afterEndpoint: '' });
  await recordOutcomes(
    db,
    again.map((d) => attemptResult(d, 'failure', null)),
    100,
  );
  await assertFollows(app.id, 'final failures', { due: 11 - again.length, leased: 0, failed: again.length });
  const endpointOfFailure = again[0]!.endpointId;
  const onThatEndpoint = again.filter((d) => d.endpointId === endpointOfFailure).length;
  assert.equal(
    (await recoverFailedDeliveries(db, endpointOfFailure, new Date(0), null)).restarted,
    onThatEndpoint,
  );
  await assertFollows(app.id, 'an endpoint recovery', {
    due: 11 - again.length + onThatEndpoint,
    leased: 0,
    failed: again.length - onThatEndpoint,
  });
  await restartDeliveries(db, [first[0]!.deliveryId]);
  await assertFollows(app.id, 'a replay of a success', {
    due: 12 - again.length + onThatEndpoint,
    leased: 0,
    failed: again.length - onThatEndpoint,
  });

  // Deleting an endpoint takes its deliveries' queue rows with them, whatever their state.
  const inFlight = await claimDeliveries(db, { batch: 4, leaseSeconds: 600, afterEndpoint: '' });
  assert.ok(inFlight.length > 0);
  await deleteEndpoint(db, inFlight[0]!.endpointId);
  const left = await db.query<{ state: string; n: number }>(
    `select state, count(*)::int as n from delivery where app_id = $1 group by state`,
    [app.id],
  );
  const count = (state: string) => left.rows.find((r) => r.state === state)?.n ?? 0;
  await assertFollows(app.id, 'an endpoint deleted', {
    due: count('pending'),
    leased: count('sending'),
    failed: count('failed'),
  });
  assert.ok(count('sending') > 0, 'leases of the other endpoints are still in flight');

  // Pruning finished history deletes messages whose deliveries are all finished.
  await recordOutcomes(
    db,
    inFlight.slice(1).map((d) => attemptResult(d, 'failure', null)),
    100,
  );
  await db.query(`update delivery set state = 'failed', next_attempt_at = null where state = 'pending'`);
  // The leases recovered above left unknown attempts: their deliveries, failed now, are parked for
  // review, and pruning keeps their messages (retention.ts, KEPT).
  const parked = await db.query<{ messages: number; deliveries: number }>(
    `select count(distinct d.message_id)::int as messages, count(*)::int as deliveries
       from delivery d join delivery_failed f on (f.endpoint_id, f.delivery_id) = (d.endpoint_id, d.id)
      where d.app_id = $1 and f.unknown_attempts > 0`,
    [app.id],
  );
  const { messages: keptMessages } = parked.rows[0]!;
  assert.ok(keptMessages > 0 && keptMessages < messages.length, 'some messages are parked, some not');
  // Kept for 0 days: every other finished message is old enough.
  assert.equal(await db.transaction((tx) => pruneFinishedHistory(tx, 0)), messages.length - keptMessages);
  const failedLeft = await db.query<{ n: number }>(
    `select count(*)::int as n from delivery where app_id = $1 and state = 'failed'`,
    [app.id],
  );
  await assertFollows(app.id, 'finished history pruned', {
    due: 0,
    leased: 0,
    failed: failedLeft.rows[0]!.n,
  });
});

test('two deliveries of one endpoint in flight break delivery_one_in_flight, whoever writes them', async () => {
  const db = database.db;
  const app = await seedApp(db, 'one-in-flight');
  await seedEndpoint(db, app.id, 'http://127.0.0.1:1/q');
  await seedMessage(db, app.id);
  await seedMessage(db, app.id);
  await assert.rejects(
    db.query(
      `update delivery set state = 'sending', next_attempt_at = null, lease_token = gen_random_uuid(),
              lease_expires_at = now() + interval '1 minute'
        where app_id = $1`,
      [app.id],
    ),
    /delivery_one_in_flight/,
  );
  await assertFollows(app.id, 'the rejected update', { due: 2, leased: 0, failed: 0 });
});

test('a lease fills its endpoint’s slot and empties it in place, never a row of its own', async () => {
  const app = await seedApp(database.db, 'slots');
  const endpoints = new Set<string>();
  for (let i = 0; i < 4; i++) {
    endpoints.add((await seedEndpoint(database.db, app.id, 'http://127.0.0.1:1/q')).id);
  }
  for (let i = 0; i < 250; i++) await seedMessage(database.db, app.id);
  // One transaction, so that its own statistics count exactly the rows these leases wrote.
  const client = new pg.Client({ connectionString: database.url });
  await client.connect();
  try {
    const db = asQueryable(client);
    await db.query('begin');
    let delivered = 0;
    let leases = 0;
    // Endpoints of other tests' apps with work left are claimed too: their slots count.
    const leased = new Set<string>();
    for (;;) {
      const claimed = await claimDeliveries(db, { batch: 4, leaseSeconds: 600, afterEndpoint: '' });
      if (claimed.length === 0) break;
      await recordOutcomes(
        db,
        claimed.map((d) => attemptResult(d)),
        5,
      );
      delivered += claimed.filter((d) => endpoints.has(d.endpointId)).length;
      leases += claimed.length;
      for (const d of claimed) leased.add(d.endpointId);
    }
    assert.equal(delivered, 1000);
    const written = await db.query<{ inserted: number; updated: number; deleted: number }>(
      `select n_tup_ins::int as inserted, n_tup_upd::int as updated, n_tup_del::int as deleted
         from pg_stat_xact_user_tables where relname = 'delivery_lease'`,
    );
    // A row per lease (inserted at the claim, deleted with the outcome) would be 1,000 of each, and
    // the table would grow by all of them until a VACUUM; a slot is inserted once, then updated.
    const { inserted, updated, deleted } = written.rows[0]!;
    assert.ok(inserted <= leased.size, `${inserted} slots inserted for ${leased.size} endpoints`);
    assert.equal(deleted, 0);
    assert.ok(updated >= 2 * leases - leased.size, `${updated} slot updates for ${leases} leases`);
    const slots = await db.query<{ endpoint_id: string; delivery_id: string | null }>(
      `select endpoint_id, delivery_id from delivery_lease
        where endpoint_id in (select id from endpoint where app_id = $1)`,
      [app.id],
    );
    assert.deepEqual(new Set(slots.rows.map((r) => r.endpoint_id)), endpoints, 'one slot per endpoint');
    assert.ok(
      slots.rows.every((r) => r.delivery_id === null),
      'every slot is empty again',
    );
    await db.query('commit');
  } finally {
    await client.end();
  }
});

test('lease recovery takes back only leases whose delivery says they expired, whatever the slot says', async () => {
  const db = database.db;
  const app = await seedApp(db, 'recovery-guard');
  await seedEndpoint(db, app.id, 'http://127.0.0.1:1/r');
  await seedMessage(db, app.id);
  const [live] = await claimDeliveries(db, { batch: 1, leaseSeconds: 600, afterEndpoint: '' });
  assert.ok(live);
  // What recovery's snapshot shows when the lease it read ended and the delivery was claimed again
  // before its lock: the slot's old, expired time beside the delivery's new, live lease.
  await db.query(
    `update delivery_lease set lease_expires_at = now() - interval '1 minute' where delivery_id = $1`,
    [live.deliveryId],
  );
  assert.deepEqual(await recoverExpiredLeases(db, noWaits(5)), [], 'a live lease is never recovered');
  const state = await db.query<{ state: string }>('select state from delivery where id = $1', [
    live.deliveryId,
  ]);
  assert.equal(state.rows[0]!.state, 'sending');
  await recordOutcomes(db, [attemptResult(live)], 5);
});

test('lease recovery takes at most its batch, the longest expired first, the rest at its next pass', async () => {
  const db = database.db;
  const app = await seedApp(db, 'recovery-batch');
  for (let i = 0; i < 3; i++) await seedEndpoint(db, app.id, `http://127.0.0.1:1/b${i}`);
  await seedMessage(db, app.id);
  const claimed = await claimDeliveries(db, { batch: 3, leaseSeconds: 600, afterEndpoint: '' });
  assert.equal(claimed.length, 3);
  // Their worker died; the leases ran out 3, 2 and 1 minutes ago, in the order of `claimed` (the
  // follow trigger carries each delivery's expiry to its slot).
  for (const [i, c] of claimed.entries()) {
    await db.query(`update delivery set lease_expires_at = now() - $2::interval where id = $1`, [
      c.deliveryId,
      `${3 - i} minutes`,
    ]);
  }
  const first = await recoverExpiredLeases(db, noWaits(5), 2);
  assert.deepEqual(
    first.map((r) => r.deliveryId),
    claimed.slice(0, 2).map((c) => c.deliveryId),
  );
  const second = await recoverExpiredLeases(db, noWaits(5), 2);
  assert.deepEqual(
    second.map((r) => r.deliveryId),
    [claimed[2]!.deliveryId],
  );
  const outcomes = await db.query<{ outcome: string }>(
    'select outcome from attempt where delivery_id = any($1::text[])',
    [claimed.map((c) => c.deliveryId)],
  );
  assert.deepEqual(
    outcomes.rows.map((r) => r.outcome),
    ['unknown', 'unknown', 'unknown'],
  );
  await assertFollows(app.id, 'recovery in two passes', { due: 3, leased: 0, failed: 0 });
});

test('a resend queued behind an attempt in flight starts its cycle whatever ends the attempt, and the queue follows', async () => {
  // A database of its own: the claims below must take this test's deliveries only.
  const own = await freshDatabase('delivery_queue_resends');
  after(() => own.drop());
  const db = own.db;
  const app = await seedApp(db, 'queued-resends');
  for (let i = 0; i < 4; i++) await seedEndpoint(db, app.id, 'http://127.0.0.1:1/r');
  await seedMessage(db, app.id);
  const leased = await claimDeliveries(db, { batch: 4, leaseSeconds: 600, afterEndpoint: '' });
  assert.equal(leased.length, 4);
  for (const d of leased) assert.equal(await resendDelivery(db, app.id, d.messageId, d.endpointId), 'queued');
  await assertFollows(app.id, 'resends queued', { due: 0, leased: 4, failed: 0 }, db);

  // Ended by a success, by a final failure, by a lease given back unsent, by lease recovery.
  const [succeeded, failed, givenBack, expired] = leased as [
    (typeof leased)[0],
    (typeof leased)[0],
    (typeof leased)[0],
    (typeof leased)[0],
  ];
  await recordOutcomes(
    db,
    [attemptResult(succeeded, 'success', null), attemptResult(failed, 'failure', null)],
    100,
  );
  assert.equal(await releaseUnsent(db, givenBack), true);
  // Recovered on an endpoint that is not idempotent, whose delivery recovery would park for
  // review: the resend asked for a second request, and a person asked.
  await db.query('update endpoint set idempotent = false where id = $1', [expired.endpointId]);
  await db.query(`update delivery set lease_expires_at = now() - interval '1 second' where id = $1`, [
    expired.deliveryId,
  ]);
  await db.query(
    `update delivery_lease set lease_expires_at = now() - interval '1 second' where delivery_id = $1`,
    [expired.deliveryId],
  );
  assert.equal((await recoverExpiredLeases(db, noWaits(5))).length, 1);
  await assertFollows(app.id, 'the attempts ended', { due: 4, leased: 0, failed: 0 }, db);
  // Unknown stays unknown (invariant 6): the restart follows the attempt's record, not instead of it.
  const recovered = await db.query<{ outcome: string; responseClass: string }>(
    'select outcome, response_class as "responseClass" from attempt where delivery_id = $1',
    [expired.deliveryId],
  );
  assert.deepEqual(recovered.rows, [{ outcome: 'unknown', responseClass: 'lease_expired' }]);

  const { rows } = await db.query<{
    id: string;
    state: string;
    cycle: number;
    trigger: string;
    marked: boolean;
  }>(
    `select id, state, cycle, trigger, resend_requested_at is not null as marked from delivery
      where app_id = $1 order by id`,
    [app.id],
  );
  for (const row of rows) {
    // The lease given back was its cycle's only attempt, never made: that cycle is the one that
    // starts again. The others start a second.
    const cycle = row.id === givenBack.deliveryId ? 1 : 2;
    assert.deepEqual(
      { state: row.state, cycle: row.cycle, trigger: row.trigger, marked: row.marked },
      { state: 'pending', cycle, trigger: 'manual', marked: false },
      row.id,
    );
  }
  // Due now: the next claim takes all four again.
  assert.equal((await claimDeliveries(db, { batch: 4, leaseSeconds: 600, afterEndpoint: '' })).length, 4);
});

test('a slot another writer changes while its attempt ends (a lift, tending clearing a mark) is still emptied: the endpoint is not blocked for good', async () => {
  // Its own database: every claim here is of this test's endpoints.
  await withOwnDatabase('slot_changed', async (own, holder) => {
    const db = own.db;
    const enders = {
      outcome: {
        statement: 'herald_record_outcomes',
        end: (d: ClaimedDelivery) => recordOutcomes(db, [attemptResult(d)], 5),
      },
      'give-back': { statement: 'herald_release_unsent', end: (d: ClaimedDelivery) => releaseUnsent(db, d) },
      // Its lease run out (the slot's too, which recovery looks for) before the lift below.
      recovery: {
        statement: 'herald_recover_expired_leases',
        end: (_d: ClaimedDelivery) => recoverExpiredLeases(db, noWaits(5)),
      },
    };
    for (const [name, { statement, end }] of Object.entries(enders)) {
      // An app each: a message goes to every endpoint of its app.
      const app = await seedApp(db, `slot-changed-${name}`);
      const endpoint = await seedEndpoint(db, app.id, `http://127.0.0.1:1/${name}`);
      await seedMessage(db, app.id);
      await seedMessage(db, app.id);
      const [claimed] = await claimDeliveries(db, { batch: 1, leaseSeconds: 600, afterEndpoint: '' });
      assert.equal(claimed?.endpointId, endpoint.id, name);
      if (name === 'recovery') {
        await db.query(`update delivery set lease_expires_at = now() - interval '1 minute' where id = $1`, [
          claimed!.deliveryId,
        ]);
        await db.query(
          `update delivery_lease set lease_expires_at = now() - interval '1 minute' where endpoint_id = $1`,
          [endpoint.id],
        );
      }
      // A lift of the endpoint's rest under way: the filled slot is updated, and locked, meanwhile.
      await holder.query('begin');
      await holder.query('update delivery_lease set next_start_at = now() where endpoint_id = $1', [
        endpoint.id,
      ]);
      const ending = end(claimed!);
      await waitForLockWaiter(db, statement);
      await holder.query('commit');
      await ending;
      const { rows } = await db.query<{ delivery_id: string | null }>(
        'select delivery_id from delivery_lease where endpoint_id = $1',
        [endpoint.id],
      );
      assert.deepEqual(rows, [{ delivery_id: null }], `${name}: the slot is empty`);
      // The endpoint's next delivery (or this one again) is claimed.
      const next = await claimDeliveries(db, { batch: 5, leaseSeconds: 600, afterEndpoint: '' });
      assert.ok(
        next.some((d) => d.endpointId === endpoint.id),
        `${name}: the endpoint is served again`,
      );
      // Its work delivered, for the next case's claims to be of its own endpoint.
      for (let batch = next; batch.length > 0; ) {
        await recordOutcomes(
          db,
          batch.map((d) => attemptResult(d)),
          5,
        );
        batch = await claimDeliveries(db, { batch: 5, leaseSeconds: 600, afterEndpoint: '' });
      }
    }
  });
});

test('lease recovery empties a slot left filled by a finished delivery (as the write before 0036 could leave one): its endpoint is claimed again', async () => {
  const app = await seedApp(database.db, 'left-filled');
  const endpoint = await seedEndpoint(database.db, app.id, 'http://127.0.0.1:1/left-filled');
  await seedMessage(database.db, app.id);
  await seedMessage(database.db, app.id);
  const { rows: deliveries } = await database.db.query<{ id: string }>(
    'select id from delivery where endpoint_id = $1 order by id',
    [endpoint.id],
  );
  // The first finished (succeeded, as the outcome write left it) with its slot still filled, its
  // lease run out.
  await database.db.query(`update delivery set state = 'succeeded', next_attempt_at = null where id = $1`, [
    deliveries[0]!.id,
  ]);
  await database.db.query(
    `insert into delivery_lease (endpoint_id, delivery_id, lease_expires_at)
     values ($1, $2, now() - interval '1 minute')
     on conflict (endpoint_id) do update set delivery_id = excluded.delivery_id, lease_expires_at = excluded.lease_expires_at`,
    [endpoint.id, deliveries[0]!.id],
  );
  const blocked = await claimDeliveries(database.db, { batch: 50, leaseSeconds: 600, afterEndpoint: '' });
  assert.ok(
    !blocked.some((d) => d.endpointId === endpoint.id),
    'a filled slot keeps its endpoint from claims',
  );
  await recordOutcomes(
    database.db,
    blocked.map((d) => attemptResult(d)),
    5,
  );

  // Nothing to recover (the delivery is finished: no attempt becomes unknown); the slot is emptied.
  const recovered = await recoverExpiredLeases(database.db, noWaits(5));
  assert.ok(!recovered.some((r) => r.endpointId === endpoint.id), JSON.stringify(recovered));
  const { rows: slot } = await database.db.query(
    'select delivery_id from delivery_lease where endpoint_id = $1',
    [endpoint.id],
  );
  assert.deepEqual(slot, [{ delivery_id: null }]);
  const claimed = await claimDeliveries(database.db, { batch: 50, leaseSeconds: 600, afterEndpoint: '' });
  assert.deepEqual(
    claimed.filter((d) => d.endpointId === endpoint.id).map((d) => d.deliveryId),
    [deliveries[1]!.id],
  );
  await recordOutcomes(
    database.db,
    claimed.map((d) => attemptResult(d)),
    5,
  );
});

test('a failed row changed while a resend reads it is removed all the same (by key): the delivery parks again later', async () => {
  await withOwnDatabase('delivery_queue_failed_changed', async (own, holder) => {
    const db = own.db;
    const app = await seedApp(db, 'failed-changed');
    const endpoint = await seedEndpoint(db, app.id, 'http://127.0.0.1:1/failed-changed');
    const messageId = await seedMessage(db, app.id);
    const park = () =>
      db.query(`update delivery set state = 'failed', next_attempt_at = null where message_id = $1`, [
        messageId,
      ]);
    await park();
    const failedRows = async () =>
      (await db.query('select 1 from delivery_failed where endpoint_id = $1', [endpoint.id])).rowCount;
    assert.equal(await failedRows(), 1);
    // An acknowledgment of its unknown attempts under way: the failed row is rewritten, and locked.
    await holder.query('begin');
    await holder.query('update delivery_failed set unknown_attempts = 0 where endpoint_id = $1', [
      endpoint.id,
    ]);
    const resent = resendDelivery(db, app.id, messageId, endpoint.id);
    await waitForLockWaiter(db, 'sendable');
    await holder.query('commit');
    assert.equal(await resent, 'resent');
    assert.equal(await failedRows(), 0, 'the resend removed the failed row');
    // Parked again (as its next cycle's last failure would), it has one failed row, not a clash.
    await park();
    assert.equal(await failedRows(), 1);
  });
});

test('lease recovery empties an expired slot whose delivery no longer exists: its endpoint is claimed again', async () => {
  const app = await seedApp(database.db, 'slot-of-gone');
  const endpoint = await seedEndpoint(database.db, app.id, 'http://127.0.0.1:1/slot-of-gone');
  await seedMessage(database.db, app.id);
  // As a write before 0036 could leave it, and history retention then removed its delivery.
  await database.db.query(
    `insert into delivery_lease (endpoint_id, delivery_id, lease_expires_at)
     values ($1, 'dlv_removed_by_retention', now() - interval '1 minute')
     on conflict (endpoint_id) do update set delivery_id = excluded.delivery_id, lease_expires_at = excluded.lease_expires_at`,
    [endpoint.id],
  );
  await recoverExpiredLeases(database.db, noWaits(5));
  const { rows: slot } = await database.db.query(
    'select delivery_id from delivery_lease where endpoint_id = $1',
    [endpoint.id],
  );
  assert.deepEqual(slot, [{ delivery_id: null }]);
  const claimed = await claimDeliveries(database.db, { batch: 50, leaseSeconds: 600, afterEndpoint: '' });
  assert.ok(
    claimed.some((d) => d.endpointId === endpoint.id),
    'the endpoint is served again',
  );
  await recordOutcomes(
    database.db,
    claimed.map((d) => attemptResult(d)),
    5,
  );
});

test('an acknowledgment beside a parking waits for it, and leaves nothing counted as awaiting review', async () => {
  await withOwnDatabase('delivery_queue_acknowledged_parking', async (own, parker) => {
    const db = own.db;
    const app = await seedApp(db, 'acknowledged-parking');
    const endpoint = await seedEndpoint(db, app.id, 'http://127.0.0.1:1/acknowledged-parking');
    const messageId = await seedMessage(db, app.id);
    // An attempt whose outcome is unknown, on the delivery about to be parked.
    await db.query(
      `insert into attempt (app_id, delivery_id, message_id, endpoint_id, cycle, lease_token, trigger, url,
                          finished_at, outcome)
     select d.app_id, d.id, d.message_id, d.endpoint_id, 1, gen_random_uuid(), 'scheduled', 'http://127.0.0.1:1/x',
            now(), 'unknown'
       from delivery d where d.message_id = $1`,
      [messageId],
    );
    // The parking under way: the delivery is failed and its failed row counts the unknown attempt.
    await parker.query('begin');
    await parker.query(`update delivery set state = 'failed', next_attempt_at = null where message_id = $1`, [
      messageId,
    ]);
    const acknowledged = db.transaction((tx) => acknowledgeUnknownOutcomes(tx, messageId));
    await waitForLockWaiter(db, 'for no key update');
    await parker.query('commit');
    assert.equal((await acknowledged).length, 1);
    const { rows } = await db.query<{ unknown_attempts: number }>(
      'select unknown_attempts from delivery_failed where endpoint_id = $1',
      [endpoint.id],
    );
    assert.deepEqual(rows, [{ unknown_attempts: 0 }]);
  });
});
