// `herald doctor`, from the real CLI: healthy on a fresh database; each stuck state makes it exit 2
// naming that state (and nothing else); the operator's repair makes it pass again. States that
// herald cannot reach on its own (a claim without its message, a lost fan-out) are made in SQL;
// ages are made by moving timestamps back, so the default thresholds are the ones tested.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { recoverExpiredLeases } from '../src/db/deliveries.ts';
import { pruneFinishedHistory } from '../src/db/retention.ts';
import { DOCTOR_CHECKS } from '../src/ops/doctor.ts';
import { createApp, createEndpoint, publishVia } from './support/fixtures.ts';
import { startTestHerald, type TestHerald, testEnv } from './support/herald.ts';
import { idMintedAt } from './support/ids.ts';
import { noWaits } from './support/outcomes.ts';
import { killAll, runHerald } from './support/processes.ts';
import { type Receiver, startReceiver } from './support/receiver.ts';
import { waitFor } from './support/wait.ts';

let t: TestHerald;
let receiver: Receiver;
let app: string;

before(async () => {
  // No worker: the test decides when work is done, so stuck states stay stuck until repaired.
  t = await startTestHerald('doctor', { worker: false });
  receiver = await startReceiver();
  app = await createApp(t, 'clinic');
});
after(async () => {
  await killAll();
  await t.close();
  await receiver.close();
});

const sql = <R = Record<string, unknown>>(text: string, params: unknown[] = []) =>
  t.database.db.query<R>(text, params);

async function doctor(...args: string[]) {
  return runHerald(['doctor', ...args], testEnv(t.database.url));
}

async function assertHealthy() {
  const run = await doctor();
  assert.equal(run.code, 0, `${run.stdout}\n${run.stderr}`);
  assert.doesNotMatch(run.stdout, /FAIL/);
}

/** Exactly `check` fails, with `count` cases, and the output names `id`. */
async function assertFails(check: string, id: string, count = 1) {
  const run = await doctor();
  assert.equal(run.code, 2, `${run.stdout}\n${run.stderr}`);
  assert.match(run.stdout, new RegExp(`^FAIL ${check}: ${count} `, 'm'));
  assert.equal(run.stdout.match(/^FAIL /gm)?.length, 1, run.stdout);
  assert.ok(run.stdout.includes(id), `${id} is named in\n${run.stdout}`);
}

test('a fresh database is healthy: exit 0, every check ok', async () => {
  const run = await doctor();
  assert.equal(run.code, 0, run.stderr);
  assert.equal(DOCTOR_CHECKS.length, 8, 'a new check needs its own stuck-state test below');
  for (const check of DOCTOR_CHECKS) {
    assert.match(run.stdout, new RegExp(`^ok +${check}$`, 'm'));
  }
  const json = await doctor('--json');
  assert.equal(json.code, 0);
  assert.deepEqual(JSON.parse(json.stdout), []);
});

test('an intake claim that never produced a message', async () => {
  const source = await t.call('POST', '/api/v1/source', {
    uid: 'labs',
    scheme: 'standard-webhooks',
    secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
    app: 'clinic',
    eventType: 'lab.result',
  });
  assert.equal(source.status, 201, JSON.stringify(source.body));
  const intake = (
    await sql<{ id: string }>(
      `insert into intake (source_id, app_id, delivery_id, business_key, body_sha256)
       values ($1, $2, 'evt_lost', 'evt_lost', '\\x00') returning id`,
      [source.body.id, app],
    )
  ).rows[0]!.id;
  // Younger than the settle period: it might still be mid-write, so it is not judged yet.
  await assertHealthy();

  await sql(`update intake set claimed_at = now() - interval '2 minutes' where id = $1`, [intake]);
  await assertFails('intake_without_message', intake);
  const json = await doctor('--json');
  assert.equal(json.code, 2);
  const [finding] = JSON.parse(json.stdout);
  assert.equal(finding.check, 'intake_without_message');
  assert.deepEqual(finding.examples, [intake]);
  assert.ok(finding.oldestSeconds >= 120);

  // Repair: the event is published by hand and the claim linked to it.
  const message = await publishVia(t, app, { eventType: 'lab.result', payload: { by: 'hand' } });
  await sql(`update intake set message_id = $2 where id = $1`, [intake, message]);
  await assertHealthy();
});

let endpoint: string;
let message: string;

/**
 * A source `uid` relaying into `app`, a message of `eventType` published there, and the inbound
 * claim `deliveryId` that made it, two minutes old (past the settle period).
 */
async function relayedClaim(uid: string, app: string, eventType: string, deliveryId: string) {
  const source = await t.call('POST', '/api/v1/source', {
    uid,
    scheme: 'standard-webhooks',
    secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
    app,
    eventType,
  });
  assert.equal(source.status, 201, JSON.stringify(source.body));
  const message = await publishVia(t, app, { eventType, payload: { n: 1 } });
  const claim = await sql<{ id: string }>(
    `insert into intake (source_id, app_id, delivery_id, business_key, body_sha256, message_id, claimed_at)
     values ($1, $2, $3, $3, '\\x00', $4, now() - interval '2 minutes') returning id`,
    [source.body.id, app, deliveryId, message],
  );
  return { intake: claim.rows[0]!.id, message };
}

test('history retention deletes a claim with its message, and its observations: nothing is left that looks like a claim that never produced one', async () => {
  const quiet = await createApp(t, 'archive');
  const { intake } = await relayedClaim('archive-feed', quiet, 'archive.entry', 'evt_archived');
  await sql(
    `insert into intake_observation (intake_id, app_id, duplicate, body_sha256)
     values ($1, $2, false, '\\x00'), ($1, $2, true, '\\x00')`,
    [intake, quiet],
  );
  // The app has no endpoint: its message is finished at once, and a pass with no retention
  // period left takes it (with any other finished message of the tests before).
  assert.ok((await t.database.db.transaction((tx) => pruneFinishedHistory(tx, 0))) >= 1);
  const left = await sql<{ claims: number; observations: number }>(
    `select (select count(*) from intake where id = $1)::int as claims,
            (select count(*) from intake_observation where intake_id = $1)::int as observations`,
    [intake],
  );
  assert.deepEqual(left.rows[0], { claims: 0, observations: 0 });
  await assertHealthy();
});

test('an app deleted with its messages leaves no claim that looks as if it never produced one', async () => {
  // A source relayed into this app, then moved to another; the app's deletion took its messages.
  const gone = await createApp(t, 'closed-clinic');
  await relayedClaim('moved-feed', gone, 'lab.result', 'evt_moved');
  const moved = await t.call('PATCH', '/api/v1/source/moved-feed', { app: 'clinic' });
  assert.equal(moved.status, 200, JSON.stringify(moved.body));
  assert.equal((await t.call('DELETE', `/api/v1/app/${gone}`)).status, 204);
  const left = await sql<{ messageId: string | null }>(
    `select message_id as "messageId" from intake where delivery_id = 'evt_moved'`,
  );
  assert.deepEqual(left.rows, [{ messageId: null }], 'the claim stays, its message gone with the app');
  await assertHealthy();
});

test('a message whose fan-out is missing; a message no endpoint wanted is not one', async () => {
  endpoint = await createEndpoint(t, app, { url: `${receiver.url}/lab`, filterTypes: ['lab.ready'] });
  message = await publishVia(t, app, { eventType: 'lab.ready', payload: { sample: 1 } });
  const unwanted = await publishVia(t, app, { eventType: 'lab.other', payload: {} });
  // The fan-out is lost (as no code path does, but a defect or a hand edit could).
  await sql(`delete from delivery where message_id = $1`, [message]);
  // Young message, young endpoint: not judged yet.
  await assertHealthy();

  // The endpoint existed unchanged well before both messages; only the one it matches counts.
  await sql(
    `update endpoint set created_at = now() - interval '10 minutes', updated_at = now() - interval '10 minutes'
      where id = $1`,
    [endpoint],
  );
  await sql(`update message set created_at = now() - interval '2 minutes' where id = any($1)`, [
    [message, unwanted],
  ]);
  await assertFails('message_without_deliveries', message);

  // Repair: resend the message to the endpoint, which creates its delivery.
  const resent = await t.call('POST', `/api/v1/app/${app}/msg/${message}/endpoint/${endpoint}/resend`);
  assert.equal(resent.status, 202);
  await assertHealthy();
});

test('a message sent as an example to an endpoint deleted since is not a lost fan-out', async () => {
  // `endpoint` (the test before) takes lab.ready, and existed unchanged before the message.
  const eventType = await t.call('POST', '/api/v1/event-type', {
    name: 'lab.ready',
    description: 'a sample is ready',
  });
  assert.equal(eventType.status, 201, JSON.stringify(eventType.body));
  const scratch = await createEndpoint(t, app, { url: `${receiver.url}/scratch` });
  const example = await t.call('POST', `/api/v1/app/${app}/endpoint/${scratch}/send-example`, {
    eventType: 'lab.ready',
  });
  assert.equal(example.status, 200, JSON.stringify(example.body));
  assert.equal((await t.call('DELETE', `/api/v1/app/${app}/endpoint/${scratch}`)).status, 204);
  await sql(`update message set created_at = now() - interval '2 minutes' where id = $1`, [example.body.id]);
  await sql(
    `update endpoint set created_at = now() - interval '10 minutes', updated_at = now() - interval '10 minutes'
      where id = $1`,
    [endpoint],
  );
  // Sending it to `endpoint` now would send example data to a real receiver.
  await assertHealthy();
});

test('the checks of the history look back HERALD_DOCTOR_LOOKBACK_SECONDS, by id', async () => {
  // A message published two days ago (its id says so) whose fan-out is missing, to an endpoint
  // that was subscribed days before it.
  const ep = await createEndpoint(t, app, { url: `${receiver.url}/archive`, filterTypes: ['lab.archived'] });
  await sql(
    `update endpoint set created_at = now() - interval '5 days', updated_at = now() - interval '5 days'
              where id = $1`,
    [ep],
  );
  const appId = (await sql<{ id: string }>(`select id from app where uid = 'clinic'`)).rows[0]!.id;
  const old = idMintedAt('msg', Date.now() - 2 * 86_400_000);
  await sql(
    `insert into message (id, app_id, event_type, payload, payload_expires_at, created_at)
     values ($1, $2, 'lab.archived', '{}', now() + interval '1 day', now() - interval '2 days')`,
    [old, appId],
  );
  // The default window is a day: each run reads the last day of messages, not all of them.
  await assertHealthy();
  const wider = await runHerald(
    ['doctor'],
    testEnv(t.database.url, { HERALD_DOCTOR_LOOKBACK_SECONDS: String(3 * 86_400) }),
  );
  assert.equal(wider.code, 2, `${wider.stdout}\n${wider.stderr}`);
  assert.match(wider.stdout, /^FAIL message_without_deliveries: 1 /m);
  assert.ok(wider.stdout.includes(old), wider.stdout);

  // Repair: resent to the endpoint.
  const resent = await t.call('POST', `/api/v1/app/${app}/msg/${old}/endpoint/${ep}/resend`);
  assert.equal(resent.status, 202);
  await assertHealthy();
});

test('a threshold a healthy system would fail is refused, naming the variable', async () => {
  const run = await runHerald(['doctor'], testEnv(t.database.url, { HERALD_DOCTOR_DUE_SECONDS: '0' }));
  assert.equal(run.code, 1, `${run.stdout}\n${run.stderr}`);
  assert.match(run.stderr, /HERALD_DOCTOR_DUE_SECONDS: expected at least 10 for herald doctor/);
  assert.doesNotMatch(run.stdout, /ok|FAIL/);
});

test('a window no longer than the settle period is refused, naming the variable', async () => {
  const run = await runHerald(
    ['doctor'],
    testEnv(t.database.url, { HERALD_DOCTOR_SETTLE_SECONDS: '600', HERALD_DOCTOR_LOOKBACK_SECONDS: '600' }),
  );
  assert.equal(run.code, 1, `${run.stdout}\n${run.stderr}`);
  assert.match(
    run.stderr,
    /HERALD_DOCTOR_LOOKBACK_SECONDS: expected more than HERALD_DOCTOR_SETTLE_SECONDS \(600\)/,
  );
  assert.doesNotMatch(run.stdout, /ok|FAIL/);
});

test('a delivery due for longer than HERALD_DOCTOR_DUE_SECONDS', async () => {
  const delivery = (
    await sql<{ id: string }>(
      `update delivery set next_attempt_at = now() - interval '10 minutes'
        where message_id = $1 and state = 'pending' returning id`,
      [message],
    )
  ).rows[0]!.id;
  // Behind a throttle, a backlog waits its turn: not overdue while the endpoint's slot opened
  // lately (its last start plus the spacing), overdue once nobody has served it for as long.
  const endpoint = `(select endpoint_id from delivery where id = $1)`;
  await sql(`update endpoint set throttle_rate = 1 where id = ${endpoint}`, [delivery]);
  const slotOpened = (ago: string) =>
    sql(
      `insert into delivery_lease (endpoint_id, next_start_at) select ${endpoint}, now() - $2::interval
       on conflict (endpoint_id) do update set next_start_at = excluded.next_start_at`,
      [delivery, ago],
    );
  await slotOpened('1 second');
  await assertHealthy();
  await slotOpened('10 minutes');
  await assertFails('deliveries_overdue', delivery);
  await sql(`update endpoint set throttle_rate = null where id = ${endpoint}`, [delivery]);

  // A backlog draining one request at a time to a slow receiver: its endpoint has had an attempt
  // start within the window, so it is being served — at the receiver's pace, no worker's fault.
  const served = await sql<{ id: string }>(
    `insert into attempt (id, app_id, delivery_id, message_id, endpoint_id, cycle, lease_token, trigger, url,
                          started_at, finished_at, outcome, status_code)
     select $2, d.app_id, d.id, d.message_id, d.endpoint_id, 1, gen_random_uuid(), 'scheduled',
            'http://127.0.0.1:9/slow', now() - interval '1 minute', now(), 'success', 204
       from delivery d where d.id = $1 returning id`,
    [delivery, idMintedAt('atmpt', Date.now() - 60_000)],
  );
  await assertHealthy();
  await sql('delete from attempt where id = $1', [served.rows[0]!.id]);
  await assertFails('deliveries_overdue', delivery);

  // A backlog a disabled endpoint held waited on purpose: just enabled, it is not overdue.
  await sql(`update endpoint set disabled = true, disabled_reason = 'operator' where id = ${endpoint}`, [
    delivery,
  ]);
  await sql(`update endpoint set disabled = false, disabled_reason = null where id = ${endpoint}`, [
    delivery,
  ]);
  await assertHealthy();
  await sql(`update endpoint set enabled_at = now() - interval '10 minutes' where id = ${endpoint}`, [
    delivery,
  ]);
  await assertFails('deliveries_overdue', delivery);

  // Repair: a worker runs and delivers it.
  const worker = await t.herald.startWorker();
  try {
    await waitFor('the overdue delivery to succeed', async () => {
      const rows = await sql(`select 1 from delivery where id = $1 and state = 'succeeded'`, [delivery]);
      return rows.rowCount === 1;
    });
  } finally {
    await worker.stop();
  }
  await assertHealthy();
});

test('an expired lease nobody recovered, then its parked unknown outcome left unreviewed', async () => {
  // An endpoint without an idempotency contract: recovery parks its unknown outcomes for review.
  const risky = await createEndpoint(t, app, {
    url: `${receiver.url}/risky`,
    filterTypes: ['lab.risky'],
    idempotent: false,
  });
  const risk = await publishVia(t, app, { eventType: 'lab.risky', payload: {} });
  // A worker claims it and dies: the lease stays, and no worker is left to recover it.
  const claimed = await sql<{ delivery_id: string; attempt_id: string }>(
    `select delivery_id, attempt_id from herald_claim(10, interval '10 seconds', '')`,
  );
  assert.equal(claimed.rows.length, 1);
  const { delivery_id: delivery, attempt_id: attempt } = claimed.rows[0]!;
  // Within the grace after expiry, a live worker would still be about to recover it.
  await sql(`update delivery set lease_expires_at = now() - interval '10 seconds' where id = $1`, [delivery]);
  await assertHealthy();
  await sql(`update delivery set lease_expires_at = now() - interval '5 minutes' where id = $1`, [delivery]);
  await assertFails('leases_expired', delivery);

  // Repair: lease recovery runs. The attempt becomes unknown and, for this endpoint, is parked.
  assert.equal((await recoverExpiredLeases(t.database.db, noWaits(8))).length, 1);
  const parked = await sql(`select 1 from delivery where id = $1 and state = 'failed'`, [delivery]);
  assert.equal(parked.rowCount, 1);
  // Freshly parked: within the review window.
  await assertHealthy();

  // An attempt two days old on a delivery parked just now (its cycle ran on): not yet overdue
  // for review, which counts from the parking.
  await sql(`update attempt set finished_at = now() - interval '2 days' where id = $1`, [attempt]);
  await assertHealthy();
  await sql(`update delivery set updated_at = now() - interval '2 days' where id = $1`, [delivery]);
  await assertFails('unknown_outcomes_unreviewed', attempt);
  // Its hint runs as it is printed, and lists the message to review.
  const hint = (await doctor()).stdout.match(/\(herald (reconcile --since \S+ --unknown-only)\)/);
  assert.ok(hint, 'the hint is a reconcile command with its window');
  const reconciled = await runHerald(hint[1]!.split(' '), testEnv(t.database.url));
  assert.equal(reconciled.code, 3, reconciled.stderr);
  assert.match(reconciled.stdout, new RegExp(`^message ${risk} `, 'm'));
  assert.match(reconciled.stdout, /UNKNOWN: 1 attempt/);

  // Repair: reviewed (the receiver did not apply it), and resent.
  const resent = await t.call('POST', `/api/v1/app/${app}/msg/${risk}/endpoint/${risky}/resend`);
  assert.equal(resent.status, 202);
  await assertHealthy();
});

test('an endpoint disabled after failures; one an operator disabled with nothing waiting is not', async () => {
  const paused = await createEndpoint(t, app, { url: `${receiver.url}/paused`, filterTypes: ['lab.none'] });
  const patched = await t.call('PATCH', `/api/v1/app/${app}/endpoint/${paused}`, { disabled: true });
  assert.equal(patched.status, 200, JSON.stringify(patched.body));
  await assertHealthy();

  // As the worker does after HERALD_DISABLE_AFTER_FAILURES known failures.
  await sql(`update endpoint set disabled = true, disabled_reason = 'failures' where id = $1`, [endpoint]);
  await assertFails('endpoints_disabled', endpoint);
  // A probe that restarts processes skips what needs a person, not a restart.
  const probe = await doctor('--skip', 'endpoints_disabled', '--skip', 'unknown_outcomes_unreviewed');
  assert.equal(probe.code, 0, probe.stdout);
  assert.match(probe.stdout, /^skip endpoints_disabled$/m);
  const unknownCheck = await doctor('--skip', 'endpoint_disabled');
  assert.equal(unknownCheck.code, 1);
  assert.match(unknownCheck.stderr, /not a check that can be skipped: endpoint_disabled/);

  // Repair: the receiver is fixed and the endpoint re-enabled.
  const enabled = await t.call('PATCH', `/api/v1/app/${app}/endpoint/${endpoint}`, { disabled: false });
  assert.equal(enabled.status, 200, JSON.stringify(enabled.body));
  await assertHealthy();
});

test('a schema behind this build: migrations pending, the other checks skipped', async () => {
  const removed = await sql<{ version: number; name: string }>(
    `delete from herald_migration where version = (select max(version) from herald_migration)
     returning version, name`,
  );
  const { version, name } = removed.rows[0]!;
  try {
    const run = await doctor();
    assert.equal(run.code, 2, run.stderr);
    // No age: a missing migration is missing, not late.
    assert.match(run.stdout, new RegExp(`^FAIL migrations_pending: 1 e\\.g\\. ${version}$`, 'm'));
    assert.match(run.stdout, /^skip deliveries_overdue$/m);
    const json = await doctor('--json');
    assert.deepEqual(
      JSON.parse(json.stdout).map((f: { check: string; oldestSeconds: unknown }) => [
        f.check,
        f.oldestSeconds,
      ]),
      [['migrations_pending', null]],
    );
  } finally {
    await sql(`insert into herald_migration (version, name) values ($1, $2)`, [version, name]);
  }
  await assertHealthy();
});

test('a schema ahead of this build: migrations ahead, named at start and by the doctor; the other checks still run', async () => {
  // What a rollback to an older build finds: a newer build's migration recorded past this build's last.
  const { rows } = await sql<{ version: number }>(
    `insert into herald_migration (version, name)
     select max(version) + 1, 'from_a_newer_build' from herald_migration returning version`,
  );
  const version = rows[0]!.version;
  try {
    const run = await runHerald(['doctor'], { ...testEnv(t.database.url), LOG_LEVEL: 'warn' });
    assert.equal(run.code, 2, run.stderr);
    assert.match(run.stdout, new RegExp(`^FAIL migrations_ahead: 1 e\\.g\\. ${version}$`, 'm'));
    assert.equal(run.stdout.match(/^FAIL /gm)?.length, 1, run.stdout);
    assert.match(run.stdout, /^ok +deliveries_overdue$/m);
    // Every process of this build says so as it starts (the doctor's own log goes to stderr).
    assert.match(run.stderr, /migrations this build does not know/);
    assert.match(run.stderr, new RegExp(`\\b${version}\\b`));
    // A probe that restarts processes skips it: a restart of the same build does not change it.
    const probe = await doctor('--skip', 'migrations_ahead');
    assert.equal(probe.code, 0, probe.stdout);
    assert.match(probe.stdout, /^skip migrations_ahead$/m);
  } finally {
    await sql('delete from herald_migration where version = $1', [version]);
  }
  await assertHealthy();
});

test('in a directory with no embedded database, the read-only commands refuse (exit 1) and make nothing there', async () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'herald-nodb-'));
  const missing = path.join(dataDir, 'not-here');
  try {
    const env = { HERALD_DATA_DIR: missing, LOG_LEVEL: 'silent' };
    for (const args of [['doctor'], ['keys', 'list'], ['reconcile', '--since', '2026-01-01T00:00:00Z']]) {
      const ran = await runHerald(args, env);
      assert.equal(ran.code, 1, `${args.join(' ')}\n${ran.stderr}`);
      assert.match(ran.stderr, /no embedded database in .*not-here/);
      assert.equal(fs.existsSync(missing), false, `${args.join(' ')} made nothing`);
    }
  } finally {
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
});
