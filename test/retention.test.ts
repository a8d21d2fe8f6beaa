// Retention: payloads go after their period (per message, else per source, else per app, else
// 90 days); the message, its deliveries, attempts and intake records stay, until the opt-in
// history retention deletes finished messages whole, with their old claims.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { restartDeliveries } from '../src/db/deliveries.ts';
import { asQueryable } from '../src/db/port.ts';
import {
  expireOldPayloads,
  newHistoryWalk,
  pruneFinishedHistory,
  pruneHistoryBatch,
  pruneOldClaims,
  retentionPass,
} from '../src/db/retention.ts';
import { steadyNow } from '../src/domain/steady-clock.ts';
import { runDoctor } from '../src/ops/doctor.ts';
import { createApp, createEndpoint, publishVia } from './support/fixtures.ts';
import { startTestHerald, type TestHerald } from './support/herald.ts';
import { idMintedAt } from './support/ids.ts';
import { type Receiver, startReceiver } from './support/receiver.ts';
import { waitFor, waitForLockWaiter } from './support/wait.ts';

let t: TestHerald;
let receiver: Receiver;
before(async () => {
  t = await startTestHerald('retention');
  receiver = await startReceiver();
});
after(async () => {
  await t.close();
  await receiver.close();
});

/** The id of a message published 40 days ago: an id begins with its creation time, and pruning walks the ids. */
const fortyDaysOld = (n: number) => idMintedAt('msg', Date.now() - 40 * 86_400_000, n);

const retentionOf = async (messageId: string) =>
  (
    await t.database.db.query<{ days: number }>(
      `select round(extract(epoch from payload_expires_at - created_at) / 86400)::int as days from message where id = $1`,
      [messageId],
    )
  ).rows[0]!.days;

test('the retention period comes from the message (null: none of its own), else the app, else 90 days', async () => {
  const app = await t.call('POST', '/api/v1/app', { name: 'keep', uid: 'keep', retentionDays: 7 });
  assert.equal(app.status, 201);
  assert.equal(app.body.retentionDays, 7);
  const plain = await t.call('POST', '/api/v1/app', { name: 'plain', uid: 'plain' });
  assert.equal(await retentionOf(await publishVia(t, 'keep', { eventType: 'e', payload: {} })), 7);
  assert.equal(
    await retentionOf(
      await publishVia(t, 'keep', { eventType: 'e', payload: {}, payloadRetentionPeriod: 30 }),
    ),
    30,
  );
  // null, as the SDKs' types allow it, is no period of the message's own.
  assert.equal(
    await retentionOf(
      await publishVia(t, 'keep', { eventType: 'e', payload: {}, payloadRetentionPeriod: null }),
    ),
    7,
  );
  assert.equal(await retentionOf(await publishVia(t, plain.body.id, { eventType: 'e', payload: {} })), 90);

  // A PUT without retentionDays (as every Svix SDK's update sends it) keeps the app's; null resets it.
  const updated = await t.call('PUT', '/api/v1/app/keep', { name: 'keep renamed' });
  assert.equal(updated.status, 200);
  assert.equal(updated.body.retentionDays, 7);
  assert.equal(await retentionOf(await publishVia(t, 'keep', { eventType: 'e', payload: {} })), 7);
  const reset = await t.call('PUT', '/api/v1/app/keep', { name: 'keep renamed', retentionDays: null });
  assert.equal(reset.body.retentionDays, null);
  assert.equal(await retentionOf(await publishVia(t, 'keep', { eventType: 'e', payload: {} })), 90);
});

test('an expired payload is removed; the history stays and reads as {"expired": true}, as in Svix', async () => {
  await t.call('POST', '/api/v1/app', { name: 'old', uid: 'old' });
  const ep = await createEndpoint(t, 'old', { url: `${receiver.url}/old` });
  const msg = await publishVia(
    t,
    'old',
    { eventType: 'e', payload: { secret: 'customer data' } },
    { 'idempotency-key': 'old-1' },
  );
  await waitFor('the delivery', async () => {
    const rows = await t.database.db.query(
      `select 1 from delivery where message_id = $1 and state = 'succeeded'`,
      [msg],
    );
    return rows.rowCount === 1;
  });
  await t.database.db.query(
    `update message set payload_expires_at = now() - interval '1 second' where id = $1`,
    [msg],
  );
  assert.ok((await expireOldPayloads(t.database.db)) >= 1);
  const stored = await t.database.db.query<{ payload: string | null; request_hash: string | null }>(
    'select payload, request_hash from message where id = $1',
    [msg],
  );
  assert.equal(stored.rows[0]!.payload, null);
  assert.equal(stored.rows[0]!.request_hash, null, 'no digest of the content is kept either');
  const got = await t.call('GET', `/api/v1/app/old/msg/${msg}`);
  assert.deepEqual(got.body.payload, { expired: true });
  const attempts = await t.call('GET', `/api/v1/app/old/attempt/endpoint/${ep}`);
  assert.equal(attempts.body.data.length, 1, 'the attempt history outlives the content');
  assert.equal(await expireOldPayloads(t.database.db), 0, 'nothing left to expire');
});

test('history pruning removes old finished messages with their attempts, never unfinished ones', async () => {
  const appId = await createApp(t, 'prune');
  const ep = await createEndpoint(t, 'prune', { url: `${receiver.url}/prune` });
  const [finished, waiting] = [fortyDaysOld(1), fortyDaysOld(2)];
  await t.database.db.query(
    `with m as (
       insert into message (id, app_id, event_type, payload, payload_expires_at, created_at)
       select id, $1, 'e', '{}', now() + interval '1 day', now() - interval '40 days' from unnest($3::text[]) id
       returning id
     ), d as (
       insert into delivery (app_id, message_id, endpoint_id, state, next_attempt_at, attempts_in_cycle, attempts_total)
       select $1, m.id, $2, case when m.id = $4 then 'succeeded' else 'pending' end,
              case when m.id = $4 then null else now() + interval '1 day' end, 1, 1
         from m
       returning id, message_id
     )
     insert into attempt (app_id, delivery_id, message_id, endpoint_id, cycle, lease_token, trigger, url,
                          finished_at, outcome, status_code)
     select $1, d.id, d.message_id, $2, 1, gen_random_uuid(), 'scheduled', 'http://127.0.0.1:1/x', now(), 'success', 204
       from d`,
    [appId, ep, [finished, waiting], finished],
  );
  // A message created just now is never old, whatever its row says.
  const recent = await publishVia(t, 'prune', { eventType: 'e', payload: {} });
  await t.database.db.query(`update message set created_at = now() - interval '40 days' where id = $1`, [
    recent,
  ]);
  await waitFor('the recent delivery', async () => {
    const rows = await t.database.db.query(
      `select 1 from delivery where message_id = $1 and state = 'succeeded'`,
      [recent],
    );
    return rows.rowCount === 1;
  });

  assert.equal(await t.database.db.transaction((tx) => pruneFinishedHistory(tx, 30)), 1);
  const left = await t.database.db.query<{ id: string }>(
    'select id from message where id = any($1) order by id',
    [[finished, waiting, recent]],
  );
  assert.deepEqual(
    left.rows.map((r) => r.id),
    [waiting, recent],
    'the waiting delivery keeps its message; the recent one is not old',
  );
  const attempts = await t.database.db.query('select 1 from attempt where message_id = $1', [finished]);
  assert.equal(attempts.rowCount, 0, 'attempts go with their message');
});

test('a replay under way keeps its message from history pruning, and the delivery it restarted stays', async () => {
  const appId = await createApp(t, 'prune-race');
  const ep = await createEndpoint(t, 'prune-race', { url: `${receiver.url}/prune-race` });
  const message = fortyDaysOld(7);
  const delivery = (
    await t.database.db.query<{ id: string }>(
      `with m as (
         insert into message (id, app_id, event_type, payload, payload_expires_at, created_at)
         values ($3, $1, 'e', '{}', now() + interval '1 day', now() - interval '40 days')
         returning id
       )
       insert into delivery (app_id, message_id, endpoint_id, state, attempts_in_cycle, attempts_total)
       select $1, m.id, $2, 'failed', 8, 8 from m
       returning id`,
      [appId, ep, message],
    )
  ).rows[0]!.id;

  // The replay restarts the failed delivery and has not committed when pruning runs.
  const replay = new pg.Client({ connectionString: t.database.url });
  await replay.connect();
  try {
    await replay.query('begin');
    assert.equal((await restartDeliveries(asQueryable(replay), [delivery])).length, 1);
    const pruning = t.database.db.transaction((tx) => pruneFinishedHistory(tx, 30));
    // Either pruning passes the message by, or it waits for the replay's lock on the delivery.
    await Promise.race([pruning, waitForLockWaiter(t.database.db, 'delete from message')]);
    await replay.query('commit');
    assert.equal(await pruning, 0, 'a message under a replay is not pruned');
  } finally {
    await replay.end();
  }
  const kept = await t.database.db.query<{ state: string }>('select state from delivery where id = $1', [
    delivery,
  ]);
  assert.equal(kept.rowCount, 1, 'the restarted delivery is still there');
  assert.notEqual(kept.rows[0]!.state, 'failed');
  // Finished again, the message is old and goes at the next pass.
  await waitFor(
    'the restarted delivery',
    async () =>
      (await t.database.db.query(`select 1 from delivery where id = $1 and state = 'succeeded'`, [delivery]))
        .rowCount === 1,
  );
  assert.equal(await t.database.db.transaction((tx) => pruneFinishedHistory(tx, 30)), 1);
});

test('history pruning passes by a message whose delivery another transaction holds, and never waits for it', async () => {
  // An endpoint's deletion holds the finished deliveries it purges until it commits: pruning, in
  // the worker's maintenance with lease recovery, must not wait that long.
  const appId = await createApp(t, 'prune-held');
  const ep = await createEndpoint(t, 'prune-held', { url: `${receiver.url}/prune-held` });
  const [held, free] = [fortyDaysOld(21), fortyDaysOld(22)];
  const deliveries = await t.database.db.query<{ id: string; message_id: string }>(
    `with m as (
       insert into message (id, app_id, event_type, payload, payload_expires_at, created_at)
       select id, $1, 'e', '{}', now() + interval '1 day', now() - interval '40 days' from unnest($3::text[]) id
       returning id
     )
     insert into delivery (app_id, message_id, endpoint_id, state, attempts_in_cycle, attempts_total)
     select $1, m.id, $2, 'succeeded', 1, 1 from m
     returning id, message_id`,
    [appId, ep, [held, free]],
  );
  const heldDelivery = deliveries.rows.find((d) => d.message_id === held)!.id;
  const holder = new pg.Client({ connectionString: t.database.url });
  await holder.connect();
  try {
    await holder.query('begin');
    await holder.query('select 1 from delivery where id = $1 for update', [heldDelivery]);
    const pruned = await t.database.db.transaction(async (tx) => {
      await tx.query(`set local lock_timeout = '200ms'`);
      return pruneFinishedHistory(tx, 30);
    });
    assert.equal(pruned, 1, 'the free message goes, the held one is passed by');
    await holder.query('rollback');
  } finally {
    await holder.end();
  }
  assert.equal(await t.database.db.transaction((tx) => pruneFinishedHistory(tx, 30)), 1, 'released, it goes');
  const left = await t.database.db.query('select 1 from message where id = any($1)', [[held, free]]);
  assert.equal(left.rowCount, 0);
});

test('a retention pass works off a backlog batch after batch, within its time; one out of time says it is behind', async () => {
  const appId = await createApp(t, 'backlog');
  const expiredPayloads = () =>
    t.database.db.query<{ n: number }>(
      `select count(*)::int as n from message where app_id = $1 and payload is not null and payload_expires_at < now()`,
      [appId],
    );
  const seed = (n: number) =>
    t.database.db.query(
      `insert into message (app_id, event_type, payload, payload_expires_at)
       select $1, 'e', '{}', now() - interval '1 minute' from generate_series(1, $2)`,
      [appId, n],
    );
  await seed(25);
  const outOfTime = await retentionPass(t.database.db, {
    historyRetentionDays: undefined,
    budgetMs: 0,
    batch: 10,
  });
  assert.deepEqual(outOfTime, { expired: 10, pruned: 0, claims: 0, behind: true });
  const rest = await retentionPass(t.database.db, {
    historyRetentionDays: undefined,
    budgetMs: 60_000,
    batch: 10,
  });
  assert.deepEqual(rest, { expired: 15, pruned: 0, claims: 0, behind: false });
  assert.equal((await expiredPayloads()).rows[0]!.n, 0);
});

test('history pruning keeps a message parked with an unknown outcome, and takes the audit entry of a pruned message’s creation', async () => {
  const appId = await createApp(t, 'parked');
  const ep = await createEndpoint(t, 'parked', { url: `${receiver.url}/parked` });
  const [parked, done] = [fortyDaysOld(11), fortyDaysOld(12)];
  await t.database.db.query(
    `with m as (
       insert into message (id, app_id, event_type, payload, payload_expires_at, created_at)
       select id, $1, 'e', '{}', now() + interval '1 day', now() - interval '40 days' from unnest($3::text[]) id
       returning id
     ), a as (
       insert into audit_entry (actor, action, app_id, target_type, target_id)
       select 'test', action, $1, 'message', m.id from m, unnest(array['message.created', 'message.resent']) action
     )
     insert into delivery (app_id, message_id, endpoint_id, state, attempts_in_cycle, attempts_total)
     select $1, m.id, $2, 'failed', 1, 1 from m`,
    [appId, ep, [parked, done]],
  );
  await t.database.db.query(
    `update delivery_failed set unknown_attempts = 1
      where delivery_id = (select id from delivery where message_id = $1)`,
    [parked],
  );
  assert.equal(await t.database.db.transaction((tx) => pruneFinishedHistory(tx, 30)), 1);
  const left = await t.database.db.query<{ id: string }>('select id from message where id = any($1)', [
    [parked, done],
  ]);
  assert.deepEqual(
    left.rows.map((r) => r.id),
    [parked],
    'the unknown outcome awaiting review keeps its message',
  );
  const audit = await t.database.db.query<{ target: string; action: string }>(
    `select target_id as target, action from audit_entry where target_id = any($1) order by target_id, action`,
    [[parked, done]],
  );
  assert.deepEqual(
    audit.rows.map((r) => `${r.target === parked ? 'parked' : 'done'} ${r.action}`),
    // In id order: the parked message's (kept whole), then the pruned one's (its creation gone).
    ['parked message.created', 'parked message.resent', 'done message.resent'],
  );
});

test('retention runs at every maintenance pass even while lease recovery fails', async () => {
  const s = await startTestHerald('retention_alone', { worker: false });
  try {
    const app = await createApp(s, 'alone');
    await createEndpoint(s, app, { url: 'http://127.0.0.1:9/alone', disabled: true });
    const msg = await publishVia(s, app, { eventType: 'e', payload: { a: 1 } });
    await s.database.db.query(
      `update message set payload_expires_at = now() - interval '1 minute' where id = $1`,
      [msg],
    );
    // Lease recovery fails at every pass: its function is gone.
    await s.database.db.query(
      'alter function herald_recover_expired_leases(double precision[], double precision, int) rename to recovery_gone',
    );
    await s.herald.startWorker();
    await waitFor(
      'the expired payload to be removed',
      async () =>
        (await s.database.db.query('select 1 from message where id = $1 and payload is null', [msg]))
          .rowCount === 1,
    );
  } finally {
    await s.close();
  }
});

test("history pruning takes a message's old claims and their observations; a younger claim stays marked until it is old", async () => {
  const appId = await createApp(t, 'prune-claims');
  const source = await t.call('POST', '/api/v1/source', {
    uid: 'prune-claims',
    scheme: 'standard-webhooks',
    secret: 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw',
    app: 'prune-claims',
    eventType: 'e',
  });
  assert.equal(source.status, 201, JSON.stringify(source.body));
  const message = fortyDaysOld(7);
  await t.database.db.query(
    `insert into message (id, app_id, event_type, payload, payload_expires_at, created_at)
     values ($1, $2, 'e', '{}', now() + interval '1 day', now() - interval '40 days')`,
    [message, appId],
  );
  // The claim that made it, 40 days ago; one that joined it by its business key an hour ago; and
  // one that a version of herald before this one marked when it pruned another message long ago.
  const fortyDays = Date.now() - 40 * 86_400_000;
  const claim = async (
    id: string,
    deliveryId: string,
    claimedAt: string,
    messageId: string | null,
    marked: boolean,
  ) => {
    await t.database.db.query(
      `insert into intake (id, source_id, app_id, delivery_id, business_key, body_sha256, message_id, claimed_at,
                           message_pruned_at)
       values ($1, $2, $3, $4, $4, '\\x00', $5, $6::timestamptz, case when $7 then now() end)`,
      [id, source.body.id, appId, deliveryId, messageId, claimedAt, marked],
    );
    await t.database.db.query(
      `insert into intake_observation (intake_id, app_id, duplicate, body_sha256) values ($1, $2, false, '\\x00')`,
      [id, appId],
    );
  };
  const [first, joined, legacy, lost] = [
    idMintedAt('in', fortyDays, 1),
    idMintedAt('in', Date.now() - 3_600_000, 2),
    idMintedAt('in', fortyDays, 3),
    idMintedAt('in', fortyDays, 4),
  ];
  await claim(first, 'evt_first', new Date(fortyDays).toISOString(), message, false);
  await claim(joined, 'evt_joined', new Date(Date.now() - 3_600_000).toISOString(), message, false);
  await claim(legacy, 'evt_legacy', new Date(fortyDays).toISOString(), null, true);
  // A defect, not a pruned claim: acknowledged, and no message was ever made. It stays.
  await claim(lost, 'evt_lost', new Date(fortyDays).toISOString(), null, false);

  assert.ok((await t.database.db.transaction((tx) => pruneFinishedHistory(tx, 30))) >= 1);
  const left = async () =>
    (
      await t.database.db.query<{ id: string; message_id: string | null; marked: boolean; observed: number }>(
        `select i.id, i.message_id, i.message_pruned_at is not null as marked,
                (select count(*)::int from intake_observation o where o.intake_id = i.id) as observed
           from intake i where i.id = any($1) order by i.id`,
        [[first, joined, legacy, lost]],
      )
    ).rows;
  assert.deepEqual(await left(), [
    { id: legacy, message_id: null, marked: true, observed: 1 },
    { id: lost, message_id: null, marked: false, observed: 1 },
    { id: joined, message_id: null, marked: true, observed: 1 },
  ]);
  // The doctor passes the marked claim by (within its day's window, unlike the 40-day-old ones).
  const findings = await runDoctor(t.database.db, {
    settleSeconds: 0,
    dueSeconds: 3600,
    leaseGraceSeconds: 3600,
    unknownReviewSeconds: 3600,
    lookbackSeconds: 86_400,
  });
  const lostClaims = findings.find((f) => f.check === 'intake_without_message')?.examples ?? [];
  assert.ok(!lostClaims.includes(joined), 'a claim whose message was pruned is no defect');
  // The claims step takes the marked claims once old: the legacy one now, the joined one in 30 days.
  assert.ok((await pruneOldClaims(t.database.db, 30)) >= 1);
  assert.deepEqual(await left(), [
    { id: lost, message_id: null, marked: false, observed: 1 },
    { id: joined, message_id: null, marked: true, observed: 1 },
  ]);
});

test('a batch of history pruning is bounded by its messages’ deliveries too, and never splits a message', async () => {
  const appId = await createApp(t, 'fanned');
  for (let i = 0; i < 5; i++) {
    await createEndpoint(t, 'fanned', { url: `${receiver.url}/fanned/${i}`, disabled: true });
  }
  // Six finished messages of five deliveries each, older than every other message of this file,
  // so that the walk in id order meets them first.
  const fiftyDays = Date.now() - 50 * 86_400_000;
  const messages = [1, 2, 3, 4, 5, 6].map((n) => idMintedAt('msg', fiftyDays, n));
  await t.database.db.query(
    `with m as (
       insert into message (id, app_id, event_type, payload, payload_expires_at, created_at)
       select id, $1, 'e', '{}', now() + interval '1 day', now() - interval '50 days' from unnest($2::text[]) id
       returning id
     )
     insert into delivery (app_id, message_id, endpoint_id, state, attempts_in_cycle, attempts_total)
     select $1, m.id, e.id, 'succeeded', 1, 1 from m cross join endpoint e where e.app_id = $1`,
    [appId, messages],
  );
  const left = async () =>
    (
      await t.database.db.query<{ id: string }>('select id from message where id = any($1) order by id', [
        messages,
      ])
    ).rows.map((r) => r.id);

  // 5 + 5 deliveries are under 12; the third message takes the batch to 15, and the walk stops.
  const prune = (deliveries: number) =>
    t.database.db.transaction((tx) => pruneFinishedHistory(tx, 30, { messages: 100, deliveries }));
  assert.equal(await prune(12), 3);
  assert.deepEqual(await left(), messages.slice(3));
  // A message with more deliveries than the bound goes alone, whole.
  assert.equal(await prune(3), 1);
  assert.deepEqual(await left(), messages.slice(4));
  const deliveries = await t.database.db.query('select 1 from delivery where message_id = any($1)', [
    messages.slice(0, 4),
  ]);
  assert.equal(deliveries.rowCount, 0, 'the pruned messages’ deliveries went with them');

  // A pass goes on batch after batch while they prune something, though none came back full.
  const pass = await retentionPass(t.database.db, { historyRetentionDays: 30, budgetMs: 60_000, batch: 1 });
  assert.ok(pass.pruned >= 2, JSON.stringify(pass));
  assert.equal(pass.behind, false);
  assert.deepEqual(await left(), []);
});

test('history pruning walks past the kept messages once a sweep, not at every batch: each batch bounded, the walk resumed from pass to pass', async () => {
  const appId = await createApp(t, 'kept-prefix');
  const ep = await createEndpoint(t, 'kept-prefix', { url: `${receiver.url}/kept-prefix` });
  const daysAgo = (days: number, n: number) => idMintedAt('msg', Date.now() - days * 86_400_000, n);
  // At the old end of the history: 30 messages kept (a delivery waiting a day to retry), then 10
  // finished ones.
  const kept = Array.from({ length: 30 }, (_, i) => daysAgo(70, i));
  const finished = Array.from({ length: 10 }, (_, i) => daysAgo(69, i));
  // And one more, newer, that the walk passes after them whatever other tests left.
  const tail = daysAgo(68, 0);
  await t.database.db.query(
    `with m as (
       insert into message (id, app_id, event_type, payload, payload_expires_at, created_at)
       select id, $1, 'e', '{}', now() + interval '1 day', now() - interval '69 days' from unnest($3::text[]) id
       returning id
     )
     insert into delivery (app_id, message_id, endpoint_id, state, next_attempt_at, attempts_in_cycle, attempts_total)
     select $1, m.id, $2, case when m.id = any($4) then 'pending' else 'succeeded' end,
            case when m.id = any($4) then now() + interval '1 day' end, 1, 1
       from m`,
    [appId, ep, [...kept, ...finished, tail], kept],
  );
  const left = async (ids: string[]) =>
    (await t.database.db.query('select 1 from message where id = any($1)', [ids])).rowCount;
  const batch = { messages: 100, deliveries: 10_000, walk: 20 };
  const from = daysAgo(71, 0);

  // A batch walks past 20 old messages at most: the first 20 kept ones, nothing to prune.
  const first = await t.database.db.transaction((tx) => pruneHistoryBatch(tx, 30, batch, from));
  assert.deepEqual(first, { pruned: 0, walkedTo: kept[19], more: true });
  // The next one goes on from there: the last 10 kept, then the 10 finished.
  const second = await t.database.db.transaction((tx) => pruneHistoryBatch(tx, 30, batch, first.walkedTo!));
  assert.equal(second.pruned, 10);
  assert.equal(second.walkedTo, finished[9]);
  assert.equal(await left(finished), 0);

  // A pass sweeps to the newest old message and keeps its place for the next pass.
  const walk = newHistoryWalk(60_000);
  await retentionPass(t.database.db, { historyRetentionDays: 30, budgetMs: 60_000, historyWalk: walk });
  assert.notEqual(walk.sweptAt, null, 'the sweep reached the newest old message');
  assert.ok(walk.after >= tail, walk.after);
  assert.equal(await left([tail]), 0);
  // The kept messages finish. The passes within the sweep's interval walk on from where it ended.
  await t.database.db.query(
    `update delivery set state = 'succeeded', next_attempt_at = null where message_id = any($1)`,
    [kept],
  );
  await retentionPass(t.database.db, { historyRetentionDays: 30, budgetMs: 60_000, historyWalk: walk });
  assert.equal(await left(kept), 30, 'not walked again before the next sweep');
  // The next sweep starts from the oldest, and takes them.
  walk.sweptAt = steadyNow() - 60_000;
  const swept = await retentionPass(t.database.db, {
    historyRetentionDays: 30,
    budgetMs: 60_000,
    historyWalk: walk,
  });
  assert.ok(swept.pruned >= 30, JSON.stringify(swept));
  assert.equal(await left(kept), 0);
});
