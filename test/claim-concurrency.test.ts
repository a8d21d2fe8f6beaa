// Invariants 3–6 under real concurrency: competing claimers on separate connections never share
// a delivery, never hold two leases on one endpoint, and lease recovery never takes a live lease.
// Half the claimers record as a worker does (the outcome write claims the next batch in the same
// call, herald_record_and_claim), half with separate calls, so both paths compete.

import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { after, before, test } from 'node:test';
import pg from 'pg';
import pino from 'pino';
import {
  type ClaimedDelivery,
  claimDeliveries,
  type RecordedOutcome,
  recordOutcomes,
  recordOutcomesAndClaim,
  recoverExpiredLeases,
  releaseClaim,
  releaseUnsent,
} from '../src/db/deliveries.ts';
import { createPgDb } from '../src/db/pg-pool.ts';
import type { Db } from '../src/db/port.ts';
import { createFinalizer } from '../src/worker/finalizer.ts';
import { freshDatabase, type TestDatabase } from './support/database.ts';
import { attemptResult, noWaits } from './support/outcomes.ts';
import { seedApp, seedEndpoint, seedMessage } from './support/seed.ts';
import { waitFor, waitForLockWaiter } from './support/wait.ts';

let database: TestDatabase;
const claimers: Db[] = [];

before(async () => {
  database = await freshDatabase('claims');
  for (let i = 0; i < 6; i++) claimers.push(createPgDb({ connectionString: database.url, max: 2 }));
});
after(async () => {
  await Promise.all(claimers.map((c) => c.close()));
  await database.drop();
});

async function seed(appUid: string, endpoints: number, messages: number): Promise<void> {
  const app = await seedApp(database.db, appUid);
  for (let e = 0; e < endpoints; e++) await seedEndpoint(database.db, app.id, `http://127.0.0.1:1/${e}`);
  for (let m = 0; m < messages; m++) await seedMessage(database.db, app.id);
}

const tick = () => new Promise((resolve) => setImmediate(resolve));

/**
 * Records the outcomes of `claimed`; claimers of even rank claim their next batch in the same
 * call (what a worker does), the others record only. Returns what was recorded and claimed.
 */
async function recordAs(
  me: number,
  db: Db,
  claimed: ClaimedDelivery[],
  claim: { batch: number; leaseSeconds: number },
): Promise<{ recorded: RecordedOutcome[]; claimed: ClaimedDelivery[] }> {
  const results = claimed.map((c) => attemptResult(c));
  if (me % 2 === 0) return recordOutcomesAndClaim(db, results, 5, { ...claim, afterEndpoint: '' });
  return { recorded: await recordOutcomes(db, results, 5), claimed: [] };
}

test('competing claimers never share a delivery or an endpoint', async () => {
  await seed('compete', 12, 25); // 300 deliveries over 12 endpoints
  const holderOfEndpoint = new Map<string, number>();
  const everClaimed = new Set<string>();
  let successes = 0;

  await Promise.all(
    claimers.map(async (db, me) => {
      let claimed: ClaimedDelivery[] = [];
      for (;;) {
        if (claimed.length === 0)
          claimed = await claimDeliveries(db, { batch: 4, leaseSeconds: 30, afterEndpoint: '' });
        if (claimed.length === 0) {
          const left = await db.query<{ n: number }>(
            `select count(*)::int as n from delivery where state <> 'succeeded'`,
          );
          if (left.rows[0]!.n === 0) return;
          await tick();
          continue;
        }
        for (const c of claimed) {
          assert.ok(!everClaimed.has(`${c.deliveryId}/${c.leaseToken}`));
          everClaimed.add(`${c.deliveryId}/${c.leaseToken}`);
          const holder = holderOfEndpoint.get(c.endpointId);
          assert.equal(holder, undefined, `endpoint ${c.endpointId} already held by claimer ${holder}`);
          holderOfEndpoint.set(c.endpointId, me);
        }
        await tick();
        // Release the endpoint before recording: the moment the outcome commits, another
        // claimer may legitimately take the endpoint's next delivery.
        for (const c of claimed) holderOfEndpoint.delete(c.endpointId);
        const written = await recordAs(me, db, claimed, { batch: 4, leaseSeconds: 30 });
        assert.ok(written.recorded.every((r) => r.recorded));
        successes += written.recorded.length;
        claimed = written.claimed;
      }
    }),
  );

  assert.equal(successes, 300, 'every delivery succeeded exactly once');
  const attempts = await database.db.query<{ n: number; d: number }>(
    `select count(*)::int as n, count(distinct delivery_id)::int as d from attempt a
       join delivery dl on dl.id = a.delivery_id join app on app.id = dl.app_id where app.uid = 'compete'`,
  );
  assert.deepEqual(attempts.rows[0], { n: 300, d: 300 }, 'one attempt per delivery, none claimed twice');
});

test('lease recovery under competition takes only expired leases, each once', async () => {
  await seed('recover', 8, 10); // 80 deliveries
  const recoveredTokens: string[] = [];
  const liveTokens = new Map<string, Date>();
  let recordedLate = 0;
  let done = false;

  const recoverers = claimers.slice(0, 3).map(async (db) => {
    while (!done) {
      const recovered = await recoverExpiredLeases(db, noWaits(8));
      const now = Date.now();
      for (const r of recovered) {
        recoveredTokens.push(r.leaseToken);
        const expiresAt = liveTokens.get(r.leaseToken);
        assert.ok(expiresAt, 'a recovered lease was one somebody claimed');
        assert.ok(expiresAt.getTime() <= now, `lease ${r.leaseToken} was recovered while still live`);
      }
      await tick();
    }
  });

  const workers = claimers.slice(3).map(async (db, me) => {
    let claimed: ClaimedDelivery[] = [];
    for (;;) {
      // Leases of 0.2 s; every third worker round stalls past its lease before recording.
      if (claimed.length === 0)
        claimed = await claimDeliveries(db, { batch: 3, leaseSeconds: 0.2, afterEndpoint: '' });
      for (const c of claimed) liveTokens.set(c.leaseToken, c.leaseExpiresAt);
      const left = await db.query<{ n: number }>(
        `select count(*)::int as n from delivery d join app on app.id = d.app_id
          where app.uid = 'recover' and d.state <> 'succeeded'`,
      );
      if (left.rows[0]!.n === 0) return;
      if (claimed.length === 0) {
        await tick();
        continue;
      }
      const stall = (me + claimed[0]!.attemptsInCycle) % 3 === 0;
      if (stall) await new Promise((resolve) => setTimeout(resolve, 300));
      const written = await recordAs(me, db, claimed, { batch: 3, leaseSeconds: 0.2 });
      recordedLate += written.recorded.filter((r) => !r.recorded).length;
      claimed = written.claimed;
    }
  });

  await Promise.all(workers);
  done = true;
  await Promise.all(recoverers);

  assert.ok(recoveredTokens.length > 0, 'stalled workers lost leases to recovery');
  assert.equal(new Set(recoveredTokens).size, recoveredTokens.length, 'no lease recovered twice');
  const outcomes = await database.db.query<{ outcome: string; n: number }>(
    `select a.outcome, count(*)::int as n from attempt a join app on app.id = a.app_id
      where app.uid = 'recover' group by a.outcome order by a.outcome`,
  );
  const byOutcome = Object.fromEntries(outcomes.rows.map((r) => [r.outcome, r.n]));
  assert.equal(byOutcome['success'], 80, 'every delivery has exactly one success');
  assert.equal(
    byOutcome['unknown'] ?? 0,
    recoveredTokens.length,
    'every recovered lease left one unknown attempt',
  );
  assert.equal(recordedLate, recoveredTokens.length, 'a late result under a recovered lease is discarded');
  const open = await database.db.query(
    `select 1 from attempt a join app on app.id = a.app_id where app.uid = 'recover' and a.outcome is null`,
  );
  assert.equal(open.rowCount, 0);
});

test('the database itself refuses a second lease on one endpoint', async () => {
  await seed('constraint', 1, 2);
  const rows = await database.db.query<{ id: string }>(
    `select d.id from delivery d join app on app.id = d.app_id where app.uid = 'constraint'`,
  );
  const [a, b] = rows.rows.map((r) => r.id);
  await database.db.query(
    `update delivery set state = 'sending', next_attempt_at = null, lease_token = gen_random_uuid(),
       lease_expires_at = now() + interval '1 minute' where id = $1`,
    [a],
  );
  await assert.rejects(
    database.db.query(
      `update delivery set state = 'sending', next_attempt_at = null, lease_token = gen_random_uuid(),
         lease_expires_at = now() + interval '1 minute' where id = $1`,
      [b],
    ),
    /delivery_one_in_flight/,
  );
});

test('an expired lease on an endpoint without an idempotency contract is parked, not retried', async () => {
  await seed('parked', 1, 1);
  await database.db.query(
    `update endpoint set idempotent = false where app_id = (select id from app where uid = 'parked')`,
  );
  const [claim] = await claimDeliveries(database.db, { batch: 1, leaseSeconds: 0.05, afterEndpoint: '' });
  assert.ok(claim);
  await waitFor('the lease to expire and be recovered', async () =>
    (await recoverExpiredLeases(database.db, noWaits(8))).some((r) => r.deliveryId === claim.deliveryId),
  );
  const delivery = await database.db.query<{ state: string; next_attempt_at: Date | null }>(
    'select state, next_attempt_at from delivery where id = $1',
    [claim.deliveryId],
  );
  assert.deepEqual(delivery.rows[0], { state: 'failed', next_attempt_at: null });
  const attempt = await database.db.query<{ outcome: string }>(
    'select outcome from attempt where lease_token = $1',
    [claim.leaseToken],
  );
  assert.equal(attempt.rows[0]!.outcome, 'unknown');
});

test('a lease given back unsent leaves no attempt and an untouched budget; a recovered one cannot be given back', async () => {
  await seed('unsent', 2, 1);
  const [claim] = await claimDeliveries(database.db, { batch: 1, leaseSeconds: 30, afterEndpoint: '' });
  assert.ok(claim);
  assert.equal(
    await releaseUnsent(database.db, { deliveryId: claim.deliveryId, leaseToken: crypto.randomUUID() }),
    false,
    'fenced: another token gives nothing back',
  );
  assert.equal(await releaseUnsent(database.db, claim), true);
  const row = await database.db.query<{ state: string; attempts_in_cycle: number; attempts_total: number }>(
    'select state, attempts_in_cycle, attempts_total from delivery where id = $1',
    [claim.deliveryId],
  );
  assert.deepEqual(row.rows[0], { state: 'pending', attempts_in_cycle: 0, attempts_total: 0 });
  const attempts = await database.db.query('select 1 from attempt where lease_token = $1', [
    claim.leaseToken,
  ]);
  assert.equal(attempts.rowCount, 0, 'the attempt that never happened is not in the history');
  assert.equal(await releaseUnsent(database.db, claim), false, 'fenced: the lease is gone');

  const [again] = await claimDeliveries(database.db, { batch: 1, leaseSeconds: 0.05, afterEndpoint: '' });
  assert.ok(again);
  await waitFor('recovery', async () =>
    (await recoverExpiredLeases(database.db, noWaits(8))).some((r) => r.leaseToken === again.leaseToken),
  );
  assert.equal(await releaseUnsent(database.db, again), false);
  const unknown = await database.db.query<{ outcome: string }>(
    'select outcome from attempt where lease_token = $1',
    [again.leaseToken],
  );
  assert.equal(unknown.rows[0]!.outcome, 'unknown', 'recovery’s verdict stands');
});

test("a claim's leases are given back by its id, and the give-back waits for a claim still running", async () => {
  await seed('claim_ids', 3, 1);
  const claimId = crypto.randomUUID();
  // Another claim, in flight: the give-back of the first must not touch it.
  const [other] = await claimDeliveries(database.db, {
    batch: 1,
    leaseSeconds: 30,
    afterEndpoint: '',
    claimId: crypto.randomUUID(),
  });
  assert.ok(other);
  // The claim runs in a transaction that is not committed yet: its worker gave up on it (a
  // client-side timeout), but the server goes on and commits later.
  const running = new pg.Client({ connectionString: database.url });
  await running.connect();
  try {
    await running.query('begin');
    const claimed = await running.query<{ delivery_id: string; attempts_in_cycle: number }>(
      `select delivery_id, attempts_in_cycle from herald_claim(2, interval '30 seconds', '', $1)
        order by delivery_id`,
      [claimId],
    );
    assert.equal(claimed.rowCount, 2);
    const releasing = releaseClaim(database.db, claimId);
    await waitForLockWaiter(database.db, 'herald_release_claim');
    await running.query('commit');
    assert.equal(await releasing, 2, 'both committed leases were given back');
    const rows = await database.db.query<{ state: string; attempts_in_cycle: number }>(
      'select state, attempts_in_cycle from delivery where id = any($1) order by id',
      [claimed.rows.map((r) => r.delivery_id)],
    );
    assert.deepEqual(
      rows.rows.map((r) => [r.state, r.attempts_in_cycle]),
      claimed.rows.map((r) => ['pending', r.attempts_in_cycle - 1]),
      'due again, with the budget they had before the claim',
    );
    const attempts = await database.db.query('select 1 from attempt where claim_id = $1', [claimId]);
    assert.equal(attempts.rowCount, 0, 'the attempts that never happened are not in the history');
    assert.equal(await releaseClaim(database.db, claimId), 0, 'nothing is left to give back');
    const untouched = await database.db.query<{ state: string; lease_token: string }>(
      'select state, lease_token from delivery where id = $1',
      [other.deliveryId],
    );
    assert.deepEqual(untouched.rows[0], { state: 'sending', lease_token: other.leaseToken });
    const otherAttempt = await database.db.query('select 1 from attempt where lease_token = $1', [
      other.leaseToken,
    ]);
    assert.equal(otherAttempt.rowCount, 1, "the other claim's attempt is kept");
    // A claim without an id (as before migration 0010) is never anybody's lost claim.
    const [anonymous] = await claimDeliveries(database.db, { batch: 1, leaseSeconds: 30, afterEndpoint: '' });
    assert.ok(anonymous);
    const none = await database.db.query<{ n: number }>('select herald_release_claim(null) as n');
    assert.equal(none.rows[0]!.n, 0);
    const kept = await database.db.query<{ lease_token: string }>(
      'select lease_token from delivery where id = $1',
      [anonymous.deliveryId],
    );
    assert.equal(kept.rows[0]!.lease_token, anonymous.leaseToken);
  } finally {
    await running.end();
  }
});

test('a lease token exists exactly while a delivery is sending: the fencing writes match the token alone', async () => {
  // The outcome write and the give-backs find a delivery by its id and its lease token, without
  // naming the state (invariant 5): the database must refuse a token on any other state, and a
  // sending delivery without one.
  await seed('lease_iff_sending', 1, 1);
  const { rows } = await database.db.query<{ id: string }>(
    `select d.id from delivery d join app on app.id = d.app_id where app.uid = 'lease_iff_sending'`,
  );
  const id = rows[0]!.id;
  await assert.rejects(
    database.db.query(
      `update delivery set lease_token = gen_random_uuid(), lease_expires_at = now() where id = $1`,
      [id],
    ),
    /delivery_lease_iff_sending/,
  );
  await assert.rejects(
    database.db.query(`update delivery set state = 'sending', next_attempt_at = null where id = $1`, [id]),
    /delivery_lease_iff_sending/,
  );
});

test("a stale lease's result and its delivery's live one, handed over together: each is told whether it was recorded", async () => {
  await seed('two-leases', 2, 1);
  // A stalled attempt's lease, recovered; the delivery due again and claimed anew (with the other
  // endpoint's delivery, whose write goes first and gathers the two behind it).
  const [stale] = await claimDeliveries(database.db, { batch: 1, leaseSeconds: 0.05, afterEndpoint: '' });
  assert.ok(stale);
  await waitFor('recovery', async () =>
    (await recoverExpiredLeases(database.db, noWaits(8))).some((r) => r.leaseToken === stale.leaseToken),
  );
  await database.db.query('update delivery_due set next_attempt_at = now() where delivery_id = $1', [
    stale.deliveryId,
  ]);
  const claimed = await claimDeliveries(database.db, { batch: 2, leaseSeconds: 30, afterEndpoint: '' });
  const live = claimed.find((c) => c.deliveryId === stale.deliveryId);
  const other = claimed.find((c) => c.deliveryId !== stale.deliveryId);
  assert.ok(live && other, JSON.stringify(claimed.map((c) => c.deliveryId)));

  // What the finalizer logs, kept: a discarded result is logged (invariant 5), once.
  const logged: { msg: string; deliveryId?: string }[] = [];
  const log = pino({ level: 'warn' }, { write: (line: string) => void logged.push(JSON.parse(line)) });
  const finalizer = createFinalizer({ db: database.db, disableAfter: 5, log });
  const first = finalizer.record(attemptResult(other), other.leaseEndsBy);
  const [staleRecorded, liveRecorded] = await Promise.all([
    finalizer.record(attemptResult(stale), stale.leaseEndsBy),
    finalizer.record(attemptResult(live), live.leaseEndsBy),
  ]);
  assert.equal((await first).outcome?.recorded, true);
  assert.equal(staleRecorded.outcome?.recorded, false, 'the stale lease is fenced off, and told so');
  assert.equal(liveRecorded.outcome?.recorded, true, 'the live lease is recorded, and told so');
  assert.deepEqual(
    logged
      .filter((l) => l.msg === 'lease lost before the outcome was recorded; result discarded')
      .map((l) => l.deliveryId),
    [stale.deliveryId],
    'the discarded result is logged, once, and only it',
  );
});

test('a result whose delivery was deleted while its request was out is discarded and said so at info, not as a lost lease', async () => {
  await seed('deleted-while-out', 1, 1);
  const [claim] = await claimDeliveries(database.db, { batch: 1, leaseSeconds: 30, afterEndpoint: '' });
  assert.ok(claim);
  await database.db.query('delete from endpoint where id = $1', [claim.endpointId]);
  const logged: { level: number; msg: string; deliveryId?: string }[] = [];
  const log = pino({ level: 'info' }, { write: (line: string) => void logged.push(JSON.parse(line)) });
  const finalizer = createFinalizer({ db: database.db, disableAfter: 5, log });
  const { outcome } = await finalizer.record(attemptResult(claim), claim.leaseEndsBy);
  assert.equal(outcome?.recorded, false, 'nothing to record it on');
  assert.deepEqual(
    logged.map((l) => [l.level, l.msg, l.deliveryId]),
    [[30, 'its delivery was deleted while the request was out; result discarded', claim.deliveryId]],
    'once, at info: a delete is routine, a lost lease is not',
  );
});
