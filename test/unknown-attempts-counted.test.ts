// A failed delivery counts its attempts with an unknown outcome as it is parked (migration 0019),
// whichever writer parks it, and the gauge herald_unknown_outcomes_parked sums those counts: the
// outcome write, lease recovery, a resend that takes the delivery out, and a database upgraded
// with such deliveries already parked.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import pg from 'pg';
import {
  type AttemptResult,
  recordOutcomes,
  recoverExpiredLeases,
  resendDelivery,
  restartDeliveries,
} from '../src/db/deliveries.ts';
import { migrate, readMigrations } from '../src/db/migrate.ts';
import type { Queryable } from '../src/db/port.ts';
import { runDoctor } from '../src/ops/doctor.ts';
import { createMetrics } from '../src/ops/metrics.ts';
import { freshDatabase, type TestDatabase } from './support/database.ts';
import { attemptResult, noWaits } from './support/outcomes.ts';
import { type ClaimedForTest, claimForTest, seedApp, seedEndpoint, seedMessage } from './support/seed.ts';

let database: TestDatabase;
before(async () => {
  database = await freshDatabase('unknown_attempts');
});
after(async () => {
  await database.drop();
});

/** A request that left and lost its connection, with no retry: the endpoint has no idempotency contract. */
const unknownParked = (claim: ClaimedForTest): AttemptResult => ({
  ...attemptResult(claim, 'failure'),
  outcome: 'unknown',
  statusCode: null,
  responseClass: 'connection_lost',
});

async function parkedGauge(db: Queryable): Promise<number> {
  const scraped = await createMetrics(db).scrape();
  const line = /^herald_unknown_outcomes_parked (\S+)$/m.exec(scraped);
  assert.ok(line, 'the gauge is scraped');
  return Number(line[1]);
}

async function counted(db: Queryable, deliveryId: string): Promise<number | null> {
  const result = await db.query<{ n: number }>(
    'select unknown_attempts as n from delivery_failed where delivery_id = $1',
    [deliveryId],
  );
  return result.rows[0]?.n ?? null;
}

async function claimOne(db: Queryable): Promise<ClaimedForTest> {
  const claimed = await claimForTest(db);
  assert.equal(claimed.length, 1);
  return claimed[0]!;
}

test('each parking counts the unknown attempts of every cycle; a resend takes them out', async () => {
  const { db } = database;
  const app = await seedApp(db, 'unknown_attempts');
  const risky = await seedEndpoint(db, app.id, 'http://127.0.0.1:9/risky', false);
  await seedMessage(db, app.id);
  assert.equal(await parkedGauge(db), 0);

  // Cycle 1: the outcome write parks it, its one attempt unknown.
  const first = await claimOne(db);
  await recordOutcomes(db, [unknownParked(first)], 5);
  assert.equal(await counted(db, first.deliveryId), 1);
  assert.equal(await parkedGauge(db), 1);

  // Reviewed and resent: no longer parked.
  await resendDelivery(db, app.id, first.messageId, risky.id);
  assert.equal(await counted(db, first.deliveryId), null);
  assert.equal(await parkedGauge(db), 0);

  // Cycle 2: its worker dies and lease recovery parks it (the follow trigger's path). Both cycles'
  // unknown attempts are counted.
  const second = await claimOne(db);
  await db.query(`update delivery set lease_expires_at = now() - interval '1 second' where id = $1`, [
    second.deliveryId,
  ]);
  assert.equal((await recoverExpiredLeases(db, noWaits(8))).length, 1);
  assert.equal(await counted(db, second.deliveryId), 2);
  assert.equal(await parkedGauge(db), 2);

  // Parked after a known failure: nothing to review.
  const plain = await seedEndpoint(db, app.id, 'http://127.0.0.1:9/plain');
  await seedMessage(db, app.id);
  const claimed = await claimForTest(db);
  const failing = claimed.find((c) => c.endpointId === plain.id);
  assert.ok(failing, 'the plain endpoint has a delivery');
  await recordOutcomes(
    db,
    claimed.map((c) => (c === failing ? attemptResult(c, 'failure') : attemptResult(c))),
    5,
  );
  assert.equal(await counted(db, failing.deliveryId), 0);
  assert.equal(await parkedGauge(db), 2);
});

test("an idempotent endpoint's failed delivery keeps its unknown attempts' count, but awaits no review", async () => {
  const { db } = database;
  const app = await seedApp(db, 'unknown_idempotent');
  const safe = await seedEndpoint(db, app.id, 'http://127.0.0.1:9/safe');
  await seedMessage(db, app.id);
  // An unknown outcome is retried (the receiver dedupes a repeat); the retry fails and spends
  // the budget.
  const first = await claimOne(db);
  assert.equal(first.endpointId, safe.id);
  await recordOutcomes(db, [{ ...unknownParked(first), nextAttemptAt: new Date() }], 5);
  const second = await claimOne(db);
  await recordOutcomes(db, [attemptResult(second, 'failure')], 5);
  assert.equal(await counted(db, second.deliveryId), 1);
  const awaitingReview = async () => {
    const findings = await runDoctor(db, {
      settleSeconds: 0,
      dueSeconds: 3600,
      leaseGraceSeconds: 3600,
      unknownReviewSeconds: 0,
      lookbackSeconds: 86_400,
    });
    const unreviewed = findings.find((f) => f.check === 'unknown_outcomes_unreviewed')?.count ?? 0;
    return { gauge: await parkedGauge(db), doctor: unreviewed };
  };
  const before = await awaitingReview();

  // Replay and recover send it again, as nothing of it awaits review. Once its endpoint is no
  // longer idempotent they leave it for review, and the gauge and doctor count it, as they
  // count every delivery replay and recover leave.
  await db.query('update endpoint set idempotent = false where id = $1', [safe.id]);
  assert.deepEqual(await awaitingReview(), { gauge: before.gauge + 1, doctor: before.doctor + 1 });
});

test('a database upgraded with failed deliveries already parked counts their unknown attempts', async () => {
  const old = await freshDatabase('unknown_attempts_upgrade', { upTo: 18 });
  try {
    const app = await seedApp(old.db, 'unknown_attempts_upgrade');
    const risky = await seedEndpoint(old.db, app.id, 'http://127.0.0.1:9/risky', false);
    const plain = await seedEndpoint(old.db, app.id, 'http://127.0.0.1:9/plain');
    await seedMessage(old.db, app.id);
    const claimed = await claimForTest(old.db);
    assert.equal(claimed.length, 2);
    await recordOutcomes(
      old.db,
      claimed.map((c) => (c.endpointId === risky.id ? unknownParked(c) : attemptResult(c, 'failure'))),
      5,
    );
    const upgrade = readMigrations().filter((m) => m.version === 19);
    assert.deepEqual(await migrate(old.db, upgrade), [19], 'the upgrade ran 0019');
    const byEndpoint = new Map(claimed.map((c) => [c.endpointId, c.deliveryId]));
    assert.equal(await counted(old.db, byEndpoint.get(risky.id)!), 1);
    assert.equal(await counted(old.db, byEndpoint.get(plain.id)!), 0);
    // What the gauge sums, read as 0019 left it (the gauge's query reads later migrations' columns).
    const parked = await old.db.query<{ n: number }>(
      'select sum(unknown_attempts)::int as n from delivery_failed',
    );
    assert.equal(parked.rows[0]!.n, 1);
  } finally {
    await old.drop();
  }
});

test('a delivery parked while the upgrade counted, or parked again, is counted again under its lock', async () => {
  const old = await freshDatabase('unknown_attempts_race', { upTo: 18 });
  const migrating = new pg.Client({ connectionString: old.url });
  await migrating.connect();
  try {
    const app = await seedApp(old.db, 'unknown_attempts_race');
    await seedEndpoint(old.db, app.id, 'http://127.0.0.1:9/risky', false);
    await seedMessage(old.db, app.id);
    const first = await claimOne(old.db);
    await recordOutcomes(old.db, [unknownParked(first)], 5);

    // 0019 as the runner applies it, in one transaction, stopped before the ALTER takes its lock.
    const sql = readMigrations().find((m) => m.version === 19)!.sql;
    const lockAt = sql.indexOf('alter table delivery_failed add column');
    await migrating.query('begin');
    await migrating.query(sql.slice(0, lockAt));

    // Meanwhile, committed by a worker of the version before: the first delivery is resent and
    // parked again with a second unknown attempt, and a second one is parked for the first time.
    // (A restart as that version's resend made it: today's queues a resend in flight on a column
    // this database does not have yet.)
    assert.equal((await restartDeliveries(old.db, [first.deliveryId])).length, 1);
    const again = await claimOne(old.db);
    await recordOutcomes(old.db, [unknownParked(again)], 5);
    await seedMessage(old.db, app.id);
    const second = await claimOne(old.db);
    await recordOutcomes(old.db, [unknownParked(second)], 5);

    await migrating.query(sql.slice(lockAt));
    await migrating.query('commit');
    assert.equal(await counted(old.db, first.deliveryId), 2, 'parked again: both unknown attempts');
    assert.equal(await counted(old.db, second.deliveryId), 1, 'parked meanwhile');
  } finally {
    await migrating.end();
    await old.drop();
  }
});
