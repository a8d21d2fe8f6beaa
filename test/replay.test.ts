// Replay as a business action: a dry run lists exactly what the real run restarts; the real run
// starts one new cycle per selected delivery (same delivery, lifetime history kept), never touches
// deliveries that are waiting or in flight, refuses a selection above its cap, needs the admin
// scope (within its apps for a restricted key), and leaves one audit entry naming the actor. The
// CLI does the same through the same code.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import { type AuditRow, listAuditForTarget } from '../src/db/audit.ts';
import { restartDeliveries } from '../src/db/deliveries.ts';
import { asQueryable } from '../src/db/port.ts';
import { attemptsOf, createApp, createEndpoint, publishVia } from './support/fixtures.ts';
import { startTestHerald, type TestHerald, testEnv } from './support/herald.ts';
import { killAll, runHerald } from './support/processes.ts';
import { type Receiver, type Respond, startReceiver } from './support/receiver.ts';
import { waitFor, waitForLockWaiter } from './support/wait.ts';

let t: TestHerald;
let receiver: Receiver;
/** Per-path answers; a path with no entry gets 204. */
const answers = new Map<string, ReturnType<Respond>>();
/** An admin key of our own, so audit entries can be checked for their actor. */
let admin: { id: string; key: string };

let shop: string;
let epOk: string;
let epDown: string;
let epHeld: string;
const messages: string[] = [];

interface DeliveryRow {
  id: string;
  message_id: string;
  endpoint_id: string;
  state: string;
  cycle: number;
  attempts_in_cycle: number;
  attempts_total: number;
}

async function deliveriesOf(endpointId: string): Promise<DeliveryRow[]> {
  const result = await t.database.db.query<DeliveryRow>(
    `select id, message_id, endpoint_id, state, cycle, attempts_in_cycle, attempts_total
       from delivery where endpoint_id = $1 order by message_id`,
    [endpointId],
  );
  return result.rows;
}

async function replayAuditEntries(): Promise<AuditRow[]> {
  const ids = await t.database.db.query<{ target_id: string }>(
    `select target_id from audit_entry where action in ('replay.planned', 'replay.started') order by id`,
  );
  const rows: AuditRow[] = [];
  for (const { target_id } of ids.rows) rows.push(...(await listAuditForTarget(t.database.db, target_id)));
  return rows;
}

/** Whether the endpoint's one delivery failed with unknown outcomes counted. */
async function failedWithUnknown(endpointId: string): Promise<boolean> {
  const rows = await t.database.db.query(
    'select 1 from delivery_failed f where f.endpoint_id = $1 and f.unknown_attempts > 0',
    [endpointId],
  );
  return rows.rowCount === 1;
}

const asAdmin = (body: unknown) =>
  t.call('POST', '/api/v1/replay', body, { authorization: `Bearer ${admin.key}` });

before(async () => {
  receiver = await startReceiver((request) => answers.get(request.path) ?? { status: 204 });
  // Two attempts per cycle, and no auto-disable: failed deliveries end `failed`, not waiting.
  t = await startTestHerald('replay', {
    env: { HERALD_RETRY_SCHEDULE: '0.05', HERALD_DISABLE_AFTER_FAILURES: '1000' },
  });
  const key = await t.call('POST', '/api/v1/api-key', { name: 'replayer', scopes: ['admin'] });
  assert.equal(key.status, 201);
  admin = { id: key.body.id, key: key.body.key };

  answers.set('/down', { status: 500 });
  shop = await createApp(t, 'shop');
  epOk = await createEndpoint(t, shop, { url: `${receiver.url}/ok` });
  epDown = await createEndpoint(t, shop, { url: `${receiver.url}/down` });
  // Disabled from the start: its deliveries wait (pending), which replay must never touch.
  epHeld = await createEndpoint(t, shop, { url: `${receiver.url}/held`, disabled: true });
  for (let i = 0; i < 3; i++) {
    messages.push(await publishVia(t, shop, { eventType: 'order.paid', payload: { order: i } }));
  }
  await waitFor('every delivery of the shop to finish', async () => {
    const ok = await deliveriesOf(epOk);
    const down = await deliveriesOf(epDown);
    return (
      ok.length === 3 &&
      ok.every((d) => d.state === 'succeeded') &&
      down.length === 3 &&
      down.every((d) => d.state === 'failed' && d.attempts_total === 2)
    );
  });
});

after(async () => {
  await t.close();
  await receiver.close();
  await killAll();
});

describe('replay', () => {
  test('a dry run lists what the real run restarts; one new cycle each, history kept, one audit entry', async () => {
    const selection = { status: 'failed', app: 'shop', cap: 3 };
    const heldBefore = await deliveriesOf(epHeld);
    const okBefore = await deliveriesOf(epOk);
    const downBefore = await deliveriesOf(epDown);
    const auditBefore = (await replayAuditEntries()).length;

    const dry = await asAdmin({ ...selection, dryRun: true });
    assert.equal(dry.status, 200, JSON.stringify(dry.body));
    assert.equal(dry.body.dryRun, true);
    assert.equal(dry.body.count, 3);
    assert.equal(dry.body.exceedsCap, false);
    assert.deepEqual(
      dry.body.deliveries.map((d: { messageId: string; endpointId: string }) => [d.messageId, d.endpointId]),
      [...messages].sort().map((m) => [m, epDown]),
    );
    // A dry run changes no delivery.
    assert.deepEqual(await deliveriesOf(epDown), downBefore);

    answers.set('/down', { status: 204 });
    const real = await asAdmin(selection);
    assert.equal(real.status, 202, JSON.stringify(real.body));
    assert.equal(real.body.dryRun, false);
    assert.equal(real.body.count, dry.body.count);
    assert.deepEqual(real.body.deliveries, dry.body.deliveries);

    // Exactly one new cycle each, at once; attempts_total and the attempt rows of cycle 1 stay.
    const restarted = await deliveriesOf(epDown);
    for (const [i, d] of restarted.entries()) {
      assert.equal(d.id, downBefore[i]!.id, 'the same delivery');
      assert.equal(d.cycle, 2, 'one new cycle');
      assert.ok(d.attempts_total >= 2, 'lifetime attempts kept');
    }
    await waitFor('the replayed deliveries to succeed', async () =>
      (await deliveriesOf(epDown)).every((d) => d.state === 'succeeded'),
    );
    for (const d of await deliveriesOf(epDown)) {
      assert.equal(d.cycle, 2);
      assert.equal(d.attempts_total, 3);
      const attempts = await attemptsOf(t, d.id);
      assert.deepEqual(
        attempts.map((a) => [a.cycle, a.outcome]),
        [
          [1, 'failure'],
          [1, 'failure'],
          [2, 'success'],
        ],
      );
    }
    // Same webhook-id on the replayed request as on the first ones.
    const seen = receiver.requests.filter((r) => r.path === '/down').map((r) => r.headers['webhook-id']);
    for (const m of messages) assert.equal(seen.filter((id) => id === m).length, 3);

    // Waiting and other finished deliveries are untouched.
    assert.deepEqual(await deliveriesOf(epHeld), heldBefore);
    assert.deepEqual(await deliveriesOf(epOk), okBefore);

    const audit = (await replayAuditEntries()).slice(auditBefore);
    assert.equal(audit.length, 2, 'one entry per call: the dry run and the real run');
    const [dryEntry, realEntry] = audit;
    for (const entry of [dryEntry!, realEntry!]) {
      assert.equal(entry.actor, admin.id);
      assert.equal(entry.targetType, 'replay');
      assert.equal(entry.appId, shop);
      assert.equal(entry.details['count'], 3);
      assert.equal(entry.details['cap'], 3);
      assert.deepEqual(entry.details['filters'], {
        status: 'failed',
        app: 'shop',
        endpoint: null,
        since: null,
        until: null,
        messageIds: null,
        includeUnreviewed: false,
      });
      // Ids and counts only: no payload reaches the audit log.
      assert.doesNotMatch(JSON.stringify(entry.details), /order/);
    }
    assert.equal(dryEntry!.action, 'replay.planned', 'a dry run starts nothing');
    assert.equal(dryEntry!.details['dryRun'], true);
    assert.equal(realEntry!.action, 'replay.started');
    assert.equal(realEntry!.details['dryRun'], false);
    assert.equal(realEntry!.targetId, real.body.id);
  });

  test('filters combine: endpoint, message ids, status, time window', async () => {
    const plan = (body: Record<string, unknown>) => asAdmin({ cap: 100, dryRun: true, ...body });
    const byEndpoint = await plan({
      status: 'all-finished',
      endpoint: epOk,
      messageIds: messages.slice(0, 2),
    });
    assert.equal(byEndpoint.status, 200, JSON.stringify(byEndpoint.body));
    assert.equal(byEndpoint.body.count, 2);
    assert.ok(byEndpoint.body.deliveries.every((d: { endpointId: string }) => d.endpointId === epOk));

    // Everything in the shop is finished except the held deliveries, which never count.
    assert.equal((await plan({ status: 'all-finished', app: shop })).body.count, 6);
    assert.equal((await plan({ status: 'failed', app: shop })).body.count, 0);

    const future = new Date(Date.now() + 3_600_000).toISOString();
    const past = new Date(Date.now() - 3_600_000).toISOString();
    assert.equal((await plan({ status: 'succeeded', app: shop, since: future })).body.count, 0);
    assert.equal((await plan({ status: 'succeeded', app: shop, since: past, until: future })).body.count, 6);

    const typo = await plan({ status: 'succeeded', endpointId: epOk });
    assert.equal(typo.status, 422, 'an unknown filter is refused, not ignored');
    const inFlight = await plan({ status: 'pending' });
    assert.equal(inFlight.status, 422, 'waiting or in-flight deliveries cannot be selected');
    const noCap = await asAdmin({ status: 'failed', dryRun: true });
    assert.equal(noCap.status, 422, 'the cap is required');
    const unknownEndpoint = await plan({ status: 'failed', endpoint: 'ep_nope' });
    assert.equal(unknownEndpoint.status, 422);
  });

  test('a delivery whose payload is gone is left as it is, and counted apart', async () => {
    const app = await createApp(t, 'archived');
    answers.set('/archived', { status: 500 });
    const ep = await createEndpoint(t, app, { url: `${receiver.url}/archived` });
    const kept = await publishVia(t, app, { eventType: 'e', payload: { n: 1 } });
    const expired = await publishVia(t, app, { eventType: 'e', payload: { n: 2 } });
    const expunged = await publishVia(t, app, { eventType: 'e', payload: { n: 3 } });
    await waitFor('the deliveries to fail', async () => {
      const deliveries = await deliveriesOf(ep);
      return (
        deliveries.length === 3 && deliveries.every((d) => d.state === 'failed' && d.attempts_total === 2)
      );
    });
    // Past its retention: what payload retention does to it.
    await t.database.db.query('update message set payload = null where id = $1', [expired]);
    const deleted = await t.call('DELETE', `/api/v1/app/${app}/msg/${expunged}/content`);
    assert.equal(deleted.status, 204, JSON.stringify(deleted.body));

    const dry = await asAdmin({ status: 'failed', app: 'archived', cap: 10, dryRun: true });
    assert.equal(dry.status, 200, JSON.stringify(dry.body));
    assert.deepEqual(
      {
        count: dry.body.count,
        payloadGone: dry.body.payloadGone,
        messages: dry.body.deliveries.map((d: { messageId: string }) => d.messageId),
      },
      { count: 1, payloadGone: 2, messages: [kept] },
    );
    // The CLI names both causes, as the API does: the data does not tell them apart.
    const cli = await runHerald(
      ['replay', '--status', 'failed', '--app', 'archived', '--cap', '10', '--dry-run'],
      testEnv(t.database.url),
    );
    assert.equal(cli.code, 0, cli.stderr);
    assert.match(
      cli.stderr,
      /^2 more matched but were left: their payload is gone \(retention or a content delete\)$/m,
    );
    const real = await asAdmin({ status: 'failed', app: 'archived', cap: 10 });
    assert.equal(real.status, 202, JSON.stringify(real.body));
    assert.equal(real.body.count, 1);
    assert.equal(real.body.payloadGone, 2);
    const byMessage = new Map((await deliveriesOf(ep)).map((d) => [d.message_id, d]));
    assert.equal(byMessage.get(kept)!.cycle, 2, 'the one with its payload starts a new cycle');
    for (const gone of [expired, expunged]) {
      assert.deepEqual(
        { state: byMessage.get(gone)!.state, cycle: byMessage.get(gone)!.cycle },
        { state: 'failed', cycle: 1 },
        'those without are left as they were',
      );
    }
  });

  test('a delivery whose unknown outcome awaits review is left, counted apart, unless included; recover leaves it too', async () => {
    // The receiver takes the request and drops the connection: an endpoint with no idempotency
    // contract parks the delivery as failed for review, since sending it again could apply it twice.
    const app = await createApp(t, 'uncertain');
    answers.set('/uncertain', 'destroy');
    const ep = await createEndpoint(t, app, { url: `${receiver.url}/uncertain`, idempotent: false });
    await publishVia(t, app, { eventType: 'e', payload: { n: 1 } });
    await waitFor('the delivery parked for review', () => failedWithUnknown(ep));
    const left = { state: 'failed', cycle: 1 };
    const stateOf = async () => {
      const [d] = await deliveriesOf(ep);
      return { state: d!.state, cycle: d!.cycle };
    };

    const dry = await asAdmin({ status: 'failed', app: 'uncertain', cap: 10, dryRun: true });
    assert.equal(dry.status, 200, JSON.stringify(dry.body));
    assert.deepEqual({ count: dry.body.count, unreviewed: dry.body.unreviewed }, { count: 0, unreviewed: 1 });
    const real = await asAdmin({ status: 'failed', app: 'uncertain', cap: 10 });
    assert.equal(real.status, 202, JSON.stringify(real.body));
    assert.deepEqual(
      { count: real.body.count, unreviewed: real.body.unreviewed },
      { count: 0, unreviewed: 1 },
    );
    assert.deepEqual(await stateOf(), left);

    // Svix's endpoint recovery, a routine bulk action, leaves it too.
    const recovered = await t.call('POST', `/api/v1/app/${app}/endpoint/${ep}/recover`, {
      since: new Date(Date.now() - 3_600_000).toISOString(),
    });
    assert.equal(recovered.status, 202, JSON.stringify(recovered.body));
    assert.deepEqual(await stateOf(), left);
    const [recoveredEntry] = (await listAuditForTarget(t.database.db, ep)).filter(
      (e) => e.action === 'endpoint.recovered',
    );
    assert.deepEqual(
      { deliveries: recoveredEntry!.details['deliveries'], left: recoveredEntry!.details['leftForReview'] },
      { deliveries: 0, left: 1 },
    );

    // Asked for by name, it is replayed, and the review it awaited is on record as bypassed.
    answers.set('/uncertain', { status: 204 });
    const included = await asAdmin({ status: 'failed', app: 'uncertain', cap: 10, includeUnreviewed: true });
    assert.equal(included.status, 202, JSON.stringify(included.body));
    assert.deepEqual(
      { count: included.body.count, unreviewed: included.body.unreviewed },
      { count: 1, unreviewed: 1 },
    );
    const entries = await listAuditForTarget(t.database.db, included.body.id);
    assert.equal((entries[0]!.details['filters'] as { includeUnreviewed: boolean }).includeUnreviewed, true);
    assert.equal(entries[0]!.details['unreviewed'], 1, 'how many reviews it bypassed');
    await waitFor('the replayed delivery to succeed', async () => (await stateOf()).state === 'succeeded');

    // An idempotent endpoint was retried through its unknown outcomes, and dedupes a request sent
    // again: its failed delivery is nobody's to review, and replay and recover restart it.
    const dedupes = await createApp(t, 'uncertain-idempotent');
    answers.set('/dedupes', 'destroy');
    const epIdem = await createEndpoint(t, dedupes, { url: `${receiver.url}/dedupes`, idempotent: true });
    await publishVia(t, dedupes, { eventType: 'e', payload: { n: 2 } });
    await waitFor('the idempotent delivery to fail with its unknown outcomes', () =>
      failedWithUnknown(epIdem),
    );
    const idemDry = await asAdmin({ status: 'failed', app: 'uncertain-idempotent', cap: 10, dryRun: true });
    assert.deepEqual(
      { count: idemDry.body.count, unreviewed: idemDry.body.unreviewed },
      { count: 1, unreviewed: 0 },
    );
    answers.set('/dedupes', { status: 204 });
    const idemRecovered = await t.call('POST', `/api/v1/app/${dedupes}/endpoint/${epIdem}/recover`, {
      since: new Date(Date.now() - 3_600_000).toISOString(),
    });
    assert.equal(idemRecovered.status, 202, JSON.stringify(idemRecovered.body));
    await waitFor(
      'the recovered delivery to succeed',
      async () => (await deliveriesOf(epIdem))[0]!.state === 'succeeded',
    );
  });

  test('a selection above the cap is refused with 422 and changes nothing', async () => {
    const before = [...(await deliveriesOf(epOk)), ...(await deliveriesOf(epDown))];
    const auditBefore = (await replayAuditEntries()).length;
    const refused = await asAdmin({ status: 'succeeded', app: shop, cap: 5 });
    assert.equal(refused.status, 422, JSON.stringify(refused.body));
    assert.equal(refused.body.code, 'validation');
    assert.match(JSON.stringify(refused.body.detail), /6 deliveries/);
    assert.deepEqual([...(await deliveriesOf(epOk)), ...(await deliveriesOf(epDown))], before);
    assert.equal((await replayAuditEntries()).length, auditBefore, 'a refused replay is rolled back whole');

    // The dry run says so up front instead of refusing.
    const dry = await asAdmin({ status: 'succeeded', app: shop, cap: 5, dryRun: true });
    assert.equal(dry.status, 200);
    assert.equal(dry.body.count, 6);
    assert.equal(dry.body.exceedsCap, true);
  });

  test('rows restarted by another action while a replay locks its batch do not cut its selection short', async () => {
    const app = await createApp(t, 'raced');
    const ep = await createEndpoint(t, app, { url: `${receiver.url}/raced`, disabled: true });
    // Six failed deliveries, one per message, in id order.
    const seeded = await t.database.db.query<{ id: string; message_id: string }>(
      `with m as (
         insert into message (app_id, event_type, payload, payload_expires_at)
         select $1, 'e', '{}', now() + interval '1 day' from generate_series(1, 6)
         returning id
       )
       insert into delivery (app_id, message_id, endpoint_id, state, attempts_in_cycle, attempts_total)
       select $1, m.id, $2, 'failed', 2, 2 from m
       returning id, message_id`,
      [app, ep],
    );
    const ids = seeded.rows.toSorted((a, b) => (a.message_id < b.message_id ? -1 : 1)).map((r) => r.id);
    // A resend of the second and third has restarted them and not committed when the replay runs.
    const resend = new pg.Client({ connectionString: t.database.url });
    await resend.connect();
    try {
      await resend.query('begin');
      assert.equal((await restartDeliveries(asQueryable(resend), [ids[1]!, ids[2]!])).length, 2);
      // Its first batch (the cap and one more: five) holds them; they are restarted by the time it
      // locks its rows, so four are left to replay: the cap, and the sixth among them.
      const replayed = asAdmin({ status: 'failed', app, cap: 4 });
      // (By their beginnings: pg_stat_activity keeps the first 1 KiB of a statement.)
      await waitForLockWaiter(t.database.db, [
        'select m.id from delivery d join message m',
        'select d.id as "deliveryId"',
      ]);
      await resend.query('commit');
      const answer = await replayed;
      assert.equal(answer.status, 202, JSON.stringify(answer.body));
      assert.equal(answer.body.count, 4);
    } finally {
      await resend.end();
    }
    const states = await t.database.db.query<{ state: string }>(
      'select state from delivery where id = any($1) and state = $2',
      [ids, 'failed'],
    );
    assert.equal(states.rowCount, 0, 'every delivery the selection still named was restarted');
  });

  test('the rests a replay lifts are lifted after it commits, one by one: no deadlock with an outcome write', async () => {
    const app = await createApp(t, 'lifted');
    // Disabled: what the replay restarts waits, and no worker touches these endpoints' slots.
    const endpoints = [
      await createEndpoint(t, app, { url: `${receiver.url}/lifted-a`, disabled: true }),
      await createEndpoint(t, app, { url: `${receiver.url}/lifted-b`, disabled: true }),
    ].sort();
    await t.database.db.query(
      `with m as (
         insert into message (app_id, event_type, payload, payload_expires_at)
         values ($1, 'e', '{}', now() + interval '1 day') returning id
       )
       insert into delivery (app_id, message_id, endpoint_id, state, attempts_in_cycle, attempts_total)
       select $1, m.id, e, 'failed', 2, 2 from m, unnest($2::text[]) e`,
      [app, endpoints],
    );
    await t.database.db.query(
      `insert into delivery_lease (endpoint_id, next_start_at) select e, now() + interval '1 hour'
         from unnest($1::text[]) e
       on conflict (endpoint_id) do update set next_start_at = excluded.next_start_at`,
      [endpoints],
    );
    // A batch of outcome writes holds the second endpoint's slot, and will want the first's.
    const writer = new pg.Client({ connectionString: t.database.url });
    await writer.connect();
    try {
      await writer.query('begin');
      await writer.query('update delivery_lease set next_start_at = next_start_at where endpoint_id = $1', [
        endpoints[1],
      ]);
      const replayed = asAdmin({ status: 'failed', app, cap: 10 });
      await waitForLockWaiter(t.database.db, 'herald_lift_endpoint_pause');
      // A replay that lifted inside its transaction held the first slot here, and this deadlocked.
      await writer.query('update delivery_lease set next_start_at = next_start_at where endpoint_id = $1', [
        endpoints[0],
      ]);
      await writer.query('commit');
      const answer = await replayed;
      assert.equal(answer.status, 202, JSON.stringify(answer.body));
      assert.equal(answer.body.count, 2);
    } finally {
      await writer.end();
    }
    // Lifted by the time the replay answers, after its commit.
    const resting = await t.database.db.query(
      `select 1 from delivery_lease where endpoint_id = any($1) and next_start_at > now() + interval '1 second'`,
      [endpoints],
    );
    assert.equal(resting.rowCount, 0, 'both rests were lifted');
  });

  test('a delivery in flight is never restarted', async () => {
    const app = await createApp(t, 'inflight');
    answers.set('/slow', 'hang');
    const ep = await createEndpoint(t, app, { url: `${receiver.url}/slow` });
    await publishVia(t, app, { eventType: 'e', payload: {} });
    await waitFor('the request to be in flight', () => receiver.requests.some((r) => r.path === '/slow'));
    const [sending] = await deliveriesOf(ep);
    assert.equal(sending!.state, 'sending');
    for (const status of ['failed', 'succeeded', 'all-finished']) {
      const answer = await asAdmin({ status, app: 'inflight', cap: 10 });
      assert.equal(answer.status, 202, JSON.stringify(answer.body));
      assert.equal(answer.body.count, 0);
    }
    const [after] = await deliveriesOf(ep);
    assert.equal(after!.cycle, 1);
    assert.equal(after!.attempts_total, 1);
    // Let the attempt end (the worker times it out as unknown and retries into a 204).
    answers.set('/slow', { status: 204 });
    await waitFor('the delivery to succeed in its first cycle', async () => {
      const [d] = await deliveriesOf(ep);
      return d!.state === 'succeeded' && d!.cycle === 1;
    });
  });

  test('only admin keys may replay, and a restricted admin key only within its apps', async () => {
    const other = await createApp(t, 'other');
    const keyFor = async (scopes: string[], apps?: string[]) => {
      const created = await t.call('POST', '/api/v1/api-key', { name: 'k', scopes, apps });
      assert.equal(created.status, 201);
      return created.body.key as string;
    };
    const body = { status: 'all-finished', cap: 100, dryRun: true };
    for (const scopes of [['publish'], ['read'], ['publish', 'read']]) {
      const key = await keyFor(scopes);
      const answer = await t.call('POST', '/api/v1/replay', body, { authorization: `Bearer ${key}` });
      assert.equal(answer.status, 403, `${scopes.join('+')}: ${JSON.stringify(answer.body)}`);
    }
    const restricted = await keyFor(['admin'], [other]);
    const as = (b: unknown) => t.call('POST', '/api/v1/replay', b, { authorization: `Bearer ${restricted}` });
    // Another tenant's app and endpoint are not found, as ones nobody has.
    for (const filter of [
      { app: 'shop' },
      { app: 'nobody-has-this' },
      { endpoint: epOk },
      { endpoint: 'ep_nobody' },
    ]) {
      const answer = await as({ ...body, ...filter });
      assert.equal(answer.status, 422, JSON.stringify(answer.body));
      assert.match(answer.body.detail[0].msg, /not found/);
    }
    // An endpoint's uid without its app finds nothing, and the answer says what would.
    const byUid = await t.call('POST', '/api/v1/replay', { ...body, endpoint: 'ep-ok' });
    assert.equal(byUid.status, 422, JSON.stringify(byUid.body));
    assert.match(byUid.body.detail[0].msg, /not found by its id \(an endpoint's uid needs its app\)/);
    // No app filter: the selection stays inside the key's apps (the shop's six are not in it).
    const own = await as(body);
    assert.equal(own.status, 200, JSON.stringify(own.body));
    assert.equal(own.body.count, 0);
    const real = await as({ status: 'all-finished', cap: 100, messageIds: messages });
    assert.equal(real.status, 202);
    assert.equal(real.body.count, 0, "another app's messages are out of reach");
  });

  test('herald replay (CLI): dry run, real run, cap refused', async () => {
    const env = testEnv(t.database.url);
    const before = await deliveriesOf(epDown);
    const dry = await runHerald(
      ['replay', '--status', 'succeeded', '--endpoint', epDown, '--cap', '3', '--dry-run', '--json'],
      env,
    );
    assert.equal(dry.code, 0, dry.stderr);
    const planned = JSON.parse(dry.stdout);
    assert.equal(planned.count, 3);
    assert.deepEqual(await deliveriesOf(epDown), before);

    const tooMany = await runHerald(['replay', '--status', 'succeeded', '--app', 'shop', '--cap', '2'], env);
    assert.equal(tooMany.code, 1);
    assert.match(tooMany.stderr, /more than the cap of 2/);
    const notACount = await runHerald(['replay', '--status', 'succeeded', '--cap', 'abc'], env);
    assert.notEqual(notACount.code, 0);
    assert.match(notACount.stderr, /--cap <n>' argument 'abc' is invalid\. expected a whole number/);
    // What the options become is checked as the API checks it, and said with the flags' names;
    // an id that is no message id selects nothing, and is refused rather than replayed as nothing.
    const misnamed = await runHerald(
      ['replay', '--status', 'failed', '--cap', '3', '--since', '2026-01-01', '--message', 'bogus'],
      env,
    );
    assert.equal(misnamed.code, 1);
    assert.match(misnamed.stderr, /^herald: --since: .+; --message \(0\): a message id: msg_…\n$/);
    // So is what the filters name and the database does not hold.
    for (const [flag, value] of [
      ['--app', 'nosuch'],
      ['--endpoint', 'ep_nosuch'],
    ] as const) {
      const unknown = await runHerald(['replay', '--status', 'failed', '--cap', '3', flag, value], env);
      assert.equal(unknown.code, 1);
      assert.match(unknown.stderr, new RegExp(`^herald: ${flag}: \\w+ ${value} not found`));
    }

    const real = await runHerald(
      ['replay', '--status', 'succeeded', '--endpoint', epDown, '--cap', '3', '--json'],
      env,
    );
    assert.equal(real.code, 0, real.stderr);
    const done = JSON.parse(real.stdout);
    assert.equal(done.count, 3);
    assert.deepEqual(done.deliveries, planned.deliveries);
    for (const d of await deliveriesOf(epDown)) assert.equal(d.cycle, 3);
    const [entry] = await listAuditForTarget(t.database.db, done.id);
    assert.equal(entry!.actor, 'cli');
    assert.equal(entry!.action, 'replay.started');
    assert.equal(entry!.details['dryRun'], false);
    await waitFor('the CLI-replayed deliveries to succeed', async () =>
      (await deliveriesOf(epDown)).every((d) => d.state === 'succeeded' && d.attempts_total === 4),
    );
  });
});
