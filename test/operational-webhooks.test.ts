// Operational webhooks: with HERALD_OPERATOR_WEBHOOK_URL set, herald ensures its operator app at
// start-up and tells the operator about endpoint changes and delivery trouble — signed, in Svix's
// event shapes, published through herald's own pipeline in the transaction of the change that
// caused them. Changes to the operator's own endpoint report nothing (no feedback loop).

import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import pino from 'pino';
import { Webhook } from 'svix';
import { loadConfig } from '../src/config.ts';
import { findApp } from '../src/db/apps.ts';
import { OPERATOR_APP_UID } from '../src/engine/apps.ts';
import { LIBRARY_ACTOR } from '../src/engine/core.ts';
import { createEndpoint as createEndpointInTx } from '../src/engine/endpoints.ts';
import { createHerald, createLogger } from '../src/herald.ts';
import { emitEndpointEvent, emitOutcomeEvents } from '../src/ops/operational-webhooks.ts';
import { ensureOperatorWebhooks } from '../src/ops/operator-app.ts';
import { EndpointIn } from '../src/schemas/svix.ts';
import { attemptsOf, createApp, createEndpoint, deliveryOf, publishVia } from './support/fixtures.ts';
import { startTestHerald, type TestHerald, testEnv } from './support/herald.ts';
import { attemptResult } from './support/outcomes.ts';
import { type Receiver, startReceiver } from './support/receiver.ts';
import { waitFor } from './support/wait.ts';

const SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const verifier = new Webhook(SECRET);
/** The operator's receiver refuses its first requests: the operator's own delivery trouble. */
const OPERATOR_FAILS_FIRST = 4;

let t: TestHerald;
let operatorReceiver: Receiver;
let receiver: Receiver;
let env: Record<string, string>;
let operator: { appId: string; endpointId: string };
let operatorPing: string;

interface OperationalEvent {
  type: string;
  timestamp: string;
  data: Record<string, unknown> & {
    lastAttempt?: { id: string; responseStatusCode: number; timestamp: string };
  };
}

/** Every distinct event the operator's receiver got, each verified against the secret. */
function received(): (OperationalEvent & { webhookId: string })[] {
  const byId = new Map<string, OperationalEvent & { webhookId: string }>();
  for (const request of operatorReceiver.requests) {
    const headers = {
      'webhook-id': String(request.headers['webhook-id']),
      'webhook-timestamp': String(request.headers['webhook-timestamp']),
      'webhook-signature': String(request.headers['webhook-signature']),
    };
    // Throws on a bad signature: every request must verify.
    const event = verifier.verify(request.body, headers) as OperationalEvent;
    byId.set(headers['webhook-id'], { ...event, webhookId: headers['webhook-id'] });
  }
  return [...byId.values()];
}

function eventFor(type: string, match: Record<string, unknown>) {
  return waitFor(`a ${type} event for ${JSON.stringify(match)}`, () =>
    received().find((e) => e.type === type && Object.entries(match).every(([k, v]) => e.data?.[k] === v)),
  );
}

/** Operational messages in the database (committed with their cause), by type, about `match`. */
async function storedEvents(match: Record<string, string>): Promise<OperationalEvent[]> {
  const result = await t.database.db.query<{ payload: string }>(
    'select payload from message where app_id = $1 order by id',
    [operator.appId],
  );
  return result.rows
    .map((r) => JSON.parse(r.payload) as OperationalEvent)
    .filter((e) => e.data !== undefined && Object.entries(match).every(([k, v]) => e.data[k] === v));
}

async function deliveryOfId(id: string) {
  const result = await t.database.db.query<{ endpoint_id: string }>(
    'select endpoint_id from delivery where id = $1',
    [id],
  );
  return result.rows[0]!;
}

function assertShape(event: OperationalEvent, type: string) {
  assert.equal(event.type, type);
  assert.ok(!Number.isNaN(Date.parse(event.timestamp)), `timestamp ${event.timestamp}`);
  assert.equal(typeof event.data['appId'], 'string');
  assert.equal(typeof event.data['endpointId'], 'string');
}

function assertAttemptShape(event: OperationalEvent, type: string) {
  assertShape(event, type);
  assert.deepEqual(Object.keys(event.data).sort(), [
    'appId',
    'appUid',
    'endpointId',
    'lastAttempt',
    'msgEventId',
    'msgId',
  ]);
  const last = event.data.lastAttempt!;
  assert.match(last.id, /^atmpt_/);
  assert.equal(typeof last.responseStatusCode, 'number');
  assert.ok(!Number.isNaN(Date.parse(last.timestamp)));
}

before(async () => {
  operatorReceiver = await startReceiver((request) => {
    const seen = operatorReceiver.requests.filter((r) => r.path === request.path).length;
    return { status: seen <= OPERATOR_FAILS_FIRST ? 500 : 204 };
  });
  receiver = await startReceiver((request) => {
    const seen = receiver.requests.filter((r) => r.path === request.path).length;
    if (request.path === '/flaky') return { status: seen <= 4 ? 500 : 204 };
    if (request.path === '/blip') return { status: seen <= 1 ? 500 : 204 };
    if (request.path === '/dead') return { status: 500 };
    return { status: 204 };
  });
  env = {
    HERALD_OPERATOR_WEBHOOK_URL: `${operatorReceiver.url}/operator`,
    HERALD_OPERATOR_WEBHOOK_SECRET: SECRET,
    // Five attempts per cycle; five consecutive failures disable an endpoint.
    HERALD_RETRY_SCHEDULE: '0.05,0.05,0.05,0.05',
    HERALD_DISABLE_AFTER_FAILURES: '5',
  };
  // Its worker starts before the set-up below: it finds the operator endpoint on its maintenance
  // clock, as a worker that another process's start-up set the endpoint up for.
  t = await startTestHerald('operational_webhooks', { env });
  // The test harness opens herald without its set-up step; a real start-up (migrate, then ensure)
  // is what `herald serve`, `api` and `worker` do.
  const config = loadConfig(testEnv(t.database.url, env));
  const started = await createHerald({ config, logger: createLogger('silent') });
  await started.close();
  const app = await findApp(t.database.db, OPERATOR_APP_UID);
  assert.ok(app, 'the operator app exists after start-up');
  const endpoints = await t.database.db.query<{ id: string; url: string }>(
    'select id, url from endpoint where app_id = $1',
    [app.id],
  );
  assert.equal(endpoints.rows.length, 1);
  assert.equal(endpoints.rows[0]!.url, env['HERALD_OPERATOR_WEBHOOK_URL']);
  operator = { appId: app.id, endpointId: endpoints.rows[0]!.id };
  // A message of the operator's own, while its receiver refuses the first requests: four failures
  // and a success, which for any other endpoint would be `failing` and `recovered` events.
  operatorPing = await publishVia(t, OPERATOR_APP_UID, { eventType: 'ping', payload: { ping: true } });
  await waitFor(
    'the ping to reach the operator',
    async () => (await deliveryOf(t, operatorPing, operator.endpointId))?.state === 'succeeded',
  );
});

after(async () => {
  await t.close();
  await operatorReceiver.close();
  await receiver.close();
});

describe('operator app', () => {
  test('ensured idempotently, also by concurrent start-ups; a changed URL is applied', async () => {
    const again = await Promise.all([1, 2, 3].map(() => ensureOperatorWebhooks(t.herald.core)));
    for (const ensured of again) assert.deepEqual(ensured, operator);
    const apps = await t.database.db.query('select id from app where uid = $1', [OPERATOR_APP_UID]);
    assert.equal(apps.rowCount, 1);
    const endpoints = await t.database.db.query('select id from endpoint where app_id = $1', [
      operator.appId,
    ]);
    assert.equal(endpoints.rowCount, 1);

    const moved = `${operatorReceiver.url}/operator-moved`;
    const core = t.herald.core;
    await ensureOperatorWebhooks({ ...core, config: { ...core.config, operatorWebhookUrl: moved } });
    const url = async () =>
      (
        await t.database.db.query<{ url: string }>('select url from endpoint where id = $1', [
          operator.endpointId,
        ])
      ).rows[0]!.url;
    assert.equal(await url(), moved);
    await ensureOperatorWebhooks(core);
    assert.equal(await url(), env['HERALD_OPERATOR_WEBHOOK_URL']);
    // Its own endpoint's changes report nothing.
    assert.deepEqual(await storedEvents({ endpointId: operator.endpointId }), []);
  });

  test('the endpoint has the configured secret', async () => {
    const secret = await t.call(
      'GET',
      `/api/v1/app/${OPERATOR_APP_UID}/endpoint/${operator.endpointId}/secret`,
    );
    assert.equal(secret.status, 200);
    assert.equal(secret.body.key, SECRET);
  });
  test('no caller but herald gives an app its uid: a key restricted to its app cannot take the operator’s events', async () => {
    const tenant = await createApp(t, 'tenant-app');
    const key = await t.call('POST', '/api/v1/api-key', {
      name: 'tenant',
      scopes: ['admin'],
      apps: [tenant],
    });
    assert.equal(key.status, 201, JSON.stringify(key.body));
    const asTenant = { authorization: `Bearer ${key.body.key}` };
    const reserved = (answer: { status: number; body: { detail: { loc: string[] }[] } }, loc: string[]) => {
      assert.equal(answer.status, 422, JSON.stringify(answer.body));
      assert.deepEqual(answer.body.detail[0]!.loc, loc);
    };
    const uid = { uid: OPERATOR_APP_UID };
    reserved(await t.call('PATCH', `/api/v1/app/${tenant}`, uid, asTenant), ['body', 'uid']);
    reserved(await t.call('PUT', `/api/v1/app/${tenant}`, { name: 'x', ...uid }, asTenant), ['body', 'uid']);
    // Nor an unrestricted key, by any way that names an app.
    reserved(await t.call('POST', '/api/v1/app', { name: 'x', ...uid }), ['body', 'uid']);
    assert.equal((await findApp(t.database.db, tenant))!.uid, 'tenant-app');
    assert.equal((await findApp(t.database.db, OPERATOR_APP_UID))!.id, operator.appId);
    // The operator app keeps its uid through an update.
    const kept = await t.call('PUT', `/api/v1/app/${OPERATOR_APP_UID}`, { name: 'herald operator' });
    assert.equal(kept.status, 200, JSON.stringify(kept.body));
    assert.equal(kept.body.uid, OPERATOR_APP_UID);
  });

  test("a publish key cannot post to the operator app: its messages would be signed as herald's alerts", async () => {
    const key = await t.call('POST', '/api/v1/api-key', { name: 'product', scopes: ['publish'] });
    assert.equal(key.status, 201, JSON.stringify(key.body));
    const asProduct = { authorization: `Bearer ${key.body.key}` };
    const before = await t.database.db.query('select id from message where app_id = $1', [operator.appId]);
    const forged = {
      eventType: 'endpoint.disabled',
      payload: { type: 'endpoint.disabled', data: { appId: 'app_x', endpointId: 'ep_x' } },
    };
    for (const body of [forged, { ...forged, application: { name: 'herald operator' } }]) {
      const refused = await t.call('POST', `/api/v1/app/${OPERATOR_APP_UID}/msg`, body, asProduct);
      assert.equal(refused.status, 403, JSON.stringify(refused.body));
      assert.equal(refused.body.code, 'insufficient_access');
    }
    const after = await t.database.db.query('select id from message where app_id = $1', [operator.appId]);
    assert.equal(after.rowCount, before.rowCount, 'nothing was published to the operator app');
    // The same key publishes to any other app; an admin key (which can read the secret) may post here.
    const tenant = await createApp(t, 'product-app');
    const ping = { eventType: 'ping', payload: { ping: true } };
    assert.equal((await t.call('POST', `/api/v1/app/${tenant}/msg`, ping, asProduct)).status, 202);
    assert.equal((await t.call('POST', `/api/v1/app/${OPERATOR_APP_UID}/msg`, ping)).status, 202);
  });

  test('a bad URL or secret stops start-up naming the variable', () => {
    const base = testEnv(t.database.url);
    assert.throws(
      () => loadConfig({ ...base, HERALD_OPERATOR_WEBHOOK_URL: 'ftp://example.com/x' }),
      /HERALD_OPERATOR_WEBHOOK_URL/,
    );
    assert.throws(
      () =>
        loadConfig({
          ...base,
          HERALD_OPERATOR_WEBHOOK_URL: 'https://ops.example',
          HERALD_OPERATOR_WEBHOOK_SECRET: 'x',
        }),
      /HERALD_OPERATOR_WEBHOOK_SECRET/,
    );
    assert.throws(
      () => loadConfig({ ...base, HERALD_OPERATOR_WEBHOOK_SECRET: SECRET }),
      /HERALD_OPERATOR_WEBHOOK_URL/,
    );
  });
});

describe('endpoint events', () => {
  test('created, updated (an operator disabling is an update), deleted: signed, in Svix shape', async () => {
    const app = await createApp(t, 'tenant');
    const ep = await createEndpoint(t, app, { url: `${receiver.url}/hook`, uid: 'ep-one' });
    const expected = { appId: app, appUid: 'tenant', endpointId: ep, endpointUid: 'ep-one' };

    const created = await eventFor('endpoint.created', { endpointId: ep });
    assertShape(created, 'endpoint.created');
    assert.deepEqual(created.data, expected);

    const patched = await t.call('PATCH', `/api/v1/app/${app}/endpoint/${ep}`, { description: 'changed' });
    assert.equal(patched.status, 200);
    await waitFor('the first endpoint.updated', () =>
      received().some((e) => e.type === 'endpoint.updated' && e.data?.['endpointId'] === ep),
    );
    const disabled = await t.call('PATCH', `/api/v1/app/${app}/endpoint/${ep}`, { disabled: true });
    assert.equal(disabled.status, 200);
    const updates = await waitFor('two endpoint.updated events', () => {
      const found = received().filter((e) => e.type === 'endpoint.updated' && e.data?.['endpointId'] === ep);
      return found.length === 2 && found;
    });
    for (const update of updates) {
      assertShape(update, 'endpoint.updated');
      assert.deepEqual(update.data, expected);
    }

    const deleted = await t.call('DELETE', `/api/v1/app/${app}/endpoint/${ep}`);
    assert.equal(deleted.status, 204);
    const gone = await eventFor('endpoint.deleted', { endpointId: ep });
    assertShape(gone, 'endpoint.deleted');
    assert.deepEqual(gone.data, expected);

    // Svix's endpoint.disabled is for automatic disabling only.
    assert.deepEqual(
      (await storedEvents({ endpointId: ep })).map((e) => e.type),
      ['endpoint.created', 'endpoint.updated', 'endpoint.updated', 'endpoint.deleted'],
    );
  });

  test('an app deleted with its endpoints: endpoint.deleted for each, as if each had been deleted', async () => {
    const app = await createApp(t, 'doomed-tenant');
    const named = await createEndpoint(t, app, { url: `${receiver.url}/doomed-1`, uid: 'doomed-ep' });
    const plain = await createEndpoint(t, app, { url: `${receiver.url}/doomed-2` });
    await publishVia(t, app, { eventType: 'e', payload: { pending: true } });
    assert.equal((await t.call('DELETE', `/api/v1/app/${app}`)).status, 204);
    for (const [endpointId, endpointUid] of [
      [named, 'doomed-ep'],
      [plain, null],
    ] as const) {
      const gone = await eventFor('endpoint.deleted', { endpointId });
      assertShape(gone, 'endpoint.deleted');
      assert.deepEqual(gone.data, { appId: app, appUid: 'doomed-tenant', endpointId, endpointUid });
      assert.deepEqual(
        (await storedEvents({ endpointId })).map((e) => e.type),
        ['endpoint.created', 'endpoint.deleted'],
      );
    }
  });

  test('a change that rolls back publishes nothing: the event is in its transaction', async () => {
    const app = await findApp(t.database.db, 'tenant');
    let endpointId = '';
    await assert.rejects(
      t.herald.core.db.transaction(async (tx) => {
        const endpoint = await createEndpointInTx(
          t.herald.core,
          tx,
          LIBRARY_ACTOR,
          app!,
          EndpointIn.parse({ url: `${receiver.url}/never` }),
        );
        endpointId = endpoint.id;
        // Published inside this transaction, visible to it...
        const inside = await tx.query('select 1 from message where app_id = $1 and payload like $2', [
          operator.appId,
          `%${endpoint.id}%`,
        ]);
        assert.equal(inside.rowCount, 1);
        throw new Error('roll back');
      }),
      /roll back/,
    );
    // ...and gone with it.
    assert.match(endpointId, /^ep_/);
    assert.deepEqual(await storedEvents({ endpointId }), []);
  });
});

/** Publishes to a new app with one endpoint at `path`, waits for the delivery's success, and returns its attempts' outcomes. */
async function deliveredThrough(uid: string, path: string, message: Record<string, unknown>) {
  const app = await createApp(t, uid);
  const ep = await createEndpoint(t, app, { url: `${receiver.url}${path}` });
  const msg = await publishVia(t, app, { eventType: 'order.paid', ...message });
  await waitFor('the delivery to succeed', async () => (await deliveryOf(t, msg, ep))?.state === 'succeeded');
  const attempts = await attemptsOf(t, (await deliveryOf(t, msg, ep))!.id);
  return { app, ep, msg, attempts };
}

describe('delivery events', () => {
  test('one failure, then a success: no event — recovered answers a failing that was sent', async () => {
    const { msg, attempts } = await deliveredThrough('blip-tenant', '/blip', { payload: { n: 8 } });
    assert.deepEqual(
      attempts.map((a) => a.outcome),
      ['failure', 'success'],
    );
    // Committed with the outcomes: the database would hold any event already.
    assert.deepEqual(await storedEvents({ msgId: msg }), []);
  });

  test('four failures, then a success: message.attempt.failing, then message.attempt.recovered', async () => {
    const { app, ep, msg, attempts } = await deliveredThrough('flaky-tenant', '/flaky', {
      eventId: 'order-7',
      payload: { n: 7 },
    });
    assert.deepEqual(
      attempts.map((a) => a.outcome),
      ['failure', 'failure', 'failure', 'failure', 'success'],
    );

    const failing = await eventFor('message.attempt.failing', { msgId: msg });
    assertAttemptShape(failing, 'message.attempt.failing');
    assert.equal(failing.data['appId'], app);
    assert.equal(failing.data['appUid'], 'flaky-tenant');
    assert.equal(failing.data['endpointId'], ep);
    assert.equal(failing.data['msgEventId'], 'order-7');
    assert.equal(failing.data.lastAttempt!.id, attempts[3]!.id, 'sent on the fourth failure');
    assert.equal(failing.data.lastAttempt!.responseStatusCode, 500);

    const recovered = await eventFor('message.attempt.recovered', { msgId: msg });
    assertAttemptShape(recovered, 'message.attempt.recovered');
    assert.equal(recovered.data.lastAttempt!.id, attempts[4]!.id);
    assert.equal(recovered.data.lastAttempt!.responseStatusCode, 204);

    // Committed with the outcomes, so the database already holds all of them: exactly these two.
    assert.deepEqual(
      (await storedEvents({ msgId: msg })).map((e) => e.type),
      ['message.attempt.failing', 'message.attempt.recovered'],
    );
  });

  test('a spent budget: message.attempt.exhausted, and endpoint.disabled when auto-disable triggers', async () => {
    const app = await createApp(t, 'dead-tenant');
    const ep = await createEndpoint(t, app, { url: `${receiver.url}/dead`, uid: 'dead-ep' });
    const msg = await publishVia(t, app, { eventType: 'order.paid', payload: { n: 8 } });
    await waitFor('the delivery to fail', async () => (await deliveryOf(t, msg, ep))?.state === 'failed');
    const attempts = await attemptsOf(t, (await deliveryOf(t, msg, ep))!.id);
    assert.equal(attempts.length, 5);

    const exhausted = await eventFor('message.attempt.exhausted', { msgId: msg });
    assertAttemptShape(exhausted, 'message.attempt.exhausted');
    assert.equal(exhausted.data.lastAttempt!.id, attempts[4]!.id);
    assert.equal(exhausted.data.lastAttempt!.responseStatusCode, 500);
    assert.equal(exhausted.data['msgEventId'], null);

    const disabled = await eventFor('endpoint.disabled', { endpointId: ep });
    assertShape(disabled, 'endpoint.disabled');
    assert.deepEqual(Object.keys(disabled.data).sort(), [
      'appId',
      'appUid',
      'endpointId',
      'endpointUid',
      'failSince',
    ]);
    assert.equal(disabled.data['endpointUid'], 'dead-ep');
    assert.equal(disabled.data['appUid'], 'dead-tenant');
    const firstFailure = await t.database.db.query<{ started_at: Date }>(
      'select started_at from attempt where id = $1',
      [attempts[0]!.id],
    );
    assert.equal(Date.parse(String(disabled.data['failSince'])), firstFailure.rows[0]!.started_at.getTime());

    assert.deepEqual((await storedEvents({ msgId: msg })).map((e) => e.type).sort(), [
      'message.attempt.exhausted',
      'message.attempt.failing',
    ]);
    assert.equal(
      (await storedEvents({ endpointId: ep })).filter((e) => e.type === 'endpoint.disabled').length,
      1,
    );
  });

  test('enabled again, the next endpoint.disabled tells of the run since the enable', async () => {
    const app = await createApp(t, 'relapse-tenant');
    const ep = await createEndpoint(t, app, { url: `${receiver.url}/dead`, uid: 'relapse-ep' });
    const failedOn = async (msg: string) => {
      await waitFor('the delivery to fail', async () => (await deliveryOf(t, msg, ep))?.state === 'failed');
      return attemptsOf(t, (await deliveryOf(t, msg, ep))!.id);
    };
    const disabledEvents = async () =>
      (await storedEvents({ endpointId: ep })).filter((e) => e.type === 'endpoint.disabled');
    await failedOn(await publishVia(t, app, { eventType: 'order.paid', payload: { n: 1 } }));
    await waitFor('the first endpoint.disabled', async () => (await disabledEvents()).length === 1);

    const enabled = await t.call('PATCH', `/api/v1/app/${app}/endpoint/${ep}`, { disabled: false });
    assert.equal(enabled.status, 200, JSON.stringify(enabled.body));
    const second = await failedOn(await publishVia(t, app, { eventType: 'order.paid', payload: { n: 2 } }));
    await waitFor('the second endpoint.disabled', async () => (await disabledEvents()).length === 2);

    // Five failures since the enable disabled it again: its run began with the first of them, not
    // with the failures the enable forgave.
    const [first, again] = await disabledEvents();
    const startedAt = async (id: string) =>
      (await t.database.db.query<{ started_at: Date }>('select started_at from attempt where id = $1', [id]))
        .rows[0]!.started_at;
    assert.ok(Date.parse(String(again!.data['failSince'])) > Date.parse(String(first!.data['failSince'])));
    assert.equal(Date.parse(String(again!.data['failSince'])), (await startedAt(second[0]!.id)).getTime());
  });

  test('fencing and repeats: a lost lease emits nothing, a repeated write emits nothing twice', async () => {
    const app = await findApp(t.database.db, 'dead-tenant');
    const rows = await t.database.db.query<{ deliveryId: string; leaseToken: string; messageId: string }>(
      `select a.delivery_id as "deliveryId", a.lease_token as "leaseToken", a.message_id as "messageId"
         from attempt a where a.app_id = $1 order by a.started_at desc limit 1`,
      [app!.id],
    );
    const last = rows.rows[0]!;
    const result = attemptResult(last, 'failure');
    const before = (await storedEvents({ msgId: last.messageId })).length;
    const outcome = (recorded: boolean) => [
      { deliveryId: last.deliveryId, recorded, endpointDisabled: true },
    ];
    await t.herald.core.db.transaction((tx) => emitOutcomeEvents(tx, [result], outcome(false)));
    assert.equal((await storedEvents({ msgId: last.messageId })).length, before, 'recorded = false: nothing');
    // What a repeat of an outcome write that already committed does: its events exist already.
    await t.herald.core.db.transaction((tx) => emitOutcomeEvents(tx, [result], outcome(true)));
    assert.equal((await storedEvents({ msgId: last.messageId })).length, before, 'a repeat: nothing new');
    const disabled = await storedEvents({ endpointId: (await deliveryOfId(last.deliveryId)).endpoint_id });
    assert.equal(disabled.filter((e) => e.type === 'endpoint.disabled').length, 1);

    // A repeat that comes after later attempts of its delivery were recorded (its first reply was
    // lost for longer than the retry's delay) sees its attempt as it was, not the cycle as it is
    // now: an early failure of a spent cycle ends nothing (no second exhausted), and one before
    // the fourth failure is not the fourth (no second failing).
    for (const uid of ['dead-tenant', 'flaky-tenant']) {
      const attempts = await t.database.db.query<{
        deliveryId: string;
        leaseToken: string;
        messageId: string;
      }>(
        `select a.delivery_id as "deliveryId", a.lease_token as "leaseToken", a.message_id as "messageId"
           from attempt a where a.app_id = $1 order by a.id`,
        [(await findApp(t.database.db, uid))!.id],
      );
      for (const attempt of attempts.rows) {
        const events = (await storedEvents({ msgId: attempt.messageId })).length;
        const repeat = attemptResult(attempt, 'failure');
        await t.herald.core.db.transaction((tx) =>
          emitOutcomeEvents(
            tx,
            [repeat],
            [{ deliveryId: attempt.deliveryId, recorded: true, endpointDisabled: false }],
          ),
        );
        assert.equal(
          (await storedEvents({ msgId: attempt.messageId })).length,
          events,
          `${uid}: a late repeat`,
        );
      }
    }
  });

  test('a lease that expires on the last attempt of a cycle: message.attempt.exhausted, from lease recovery', async () => {
    const app = await createApp(t, 'orphan-tenant');
    // Disabled, so no worker claims it: the test plays a worker that claimed it and died.
    const ep = await createEndpoint(t, app, { url: `${receiver.url}/never`, disabled: true });
    const msg = await publishVia(t, app, { eventType: 'order.paid', payload: { n: 9 } });
    const delivery = (await deliveryOf(t, msg, ep))!;
    const claimed = await t.database.db.query<{ id: string }>(
      `with leased as (
         update delivery set state = 'sending', lease_token = gen_random_uuid(),
                lease_expires_at = now() - interval '1 second', next_attempt_at = null,
                attempts_in_cycle = 5, attempts_total = 5
          where id = $1 returning *
       )
       insert into attempt (app_id, delivery_id, message_id, endpoint_id, cycle, lease_token, trigger, url)
       select app_id, id, message_id, endpoint_id, cycle, lease_token, trigger, $2 from leased
       returning id`,
      [delivery.id, `${receiver.url}/never`],
    );
    const attemptId = claimed.rows[0]!.id;
    await waitFor(
      'lease recovery to end the cycle',
      async () => (await deliveryOf(t, msg, ep))?.state === 'failed',
    );

    const exhausted = await eventFor('message.attempt.exhausted', { msgId: msg });
    assertAttemptShape(exhausted, 'message.attempt.exhausted');
    assert.equal(exhausted.data.lastAttempt!.id, attemptId);
    assert.equal(exhausted.data.lastAttempt!.responseStatusCode, 0, 'no response: the outcome is unknown');
    assert.deepEqual(
      (await storedEvents({ msgId: msg })).map((e) => e.type),
      ['message.attempt.exhausted'],
    );
  });

  test("the operator endpoint's own failures emit nothing (no feedback loop)", async () => {
    const attempts = await attemptsOf(t, (await deliveryOf(t, operatorPing, operator.endpointId))!.id);
    assert.deepEqual(
      attempts.map((a) => a.outcome),
      ['failure', 'failure', 'failure', 'failure', 'success'],
    );
    assert.deepEqual(await storedEvents({ appId: operator.appId }), []);
    assert.deepEqual(await storedEvents({ endpointId: operator.endpointId }), []);
    assert.deepEqual(await storedEvents({ msgId: operatorPing }), []);
  });

  test('the operator endpoint is never auto-disabled: it is the channel that would tell of it; one found disabled by herald is enabled at start-up', async () => {
    const respond = operatorReceiver.respond;
    operatorReceiver.respond = () => ({ status: 500 });
    const failed = async () =>
      (
        await t.database.db.query<{ n: number }>(
          `select count(*)::int as n from attempt where endpoint_id = $1 and outcome = 'failure'`,
          [operator.endpointId],
        )
      ).rows[0]!.n;
    const before = await failed();
    try {
      // Each endpoint created is an event for the operator: more failures in a row than
      // HERALD_DISABLE_AFTER_FAILURES (5) allows any other endpoint.
      const app = await createApp(t, 'quiet-operator');
      for (let i = 0; i < 4; i++) await createEndpoint(t, app, { url: `${receiver.url}/quiet-${i}` });
      await waitFor(
        'eight more failures at the operator endpoint',
        async () => (await failed()) >= before + 8,
      );
    } finally {
      operatorReceiver.respond = respond;
    }
    const state = async () =>
      (
        await t.database.db.query<{ disabled: boolean; failures: number; reason: string | null }>(
          `select disabled, consecutive_failures as failures, disabled_reason as reason from endpoint where id = $1`,
          [operator.endpointId],
        )
      ).rows[0]!;
    assert.deepEqual(await state(), { disabled: false, failures: 0, reason: null });

    // Disabled by a herald of the version before: enabled again at start-up. Disabled by an
    // operator: left as it is.
    await t.database.db.query(
      `update endpoint set disabled = true, disabled_reason = 'failures' where id = $1`,
      [operator.endpointId],
    );
    await ensureOperatorWebhooks(t.herald.core);
    assert.equal((await state()).disabled, false);
    await t.database.db.query(
      `update endpoint set disabled = true, disabled_reason = 'operator' where id = $1`,
      [operator.endpointId],
    );
    await ensureOperatorWebhooks(t.herald.core);
    assert.deepEqual(await state(), { disabled: true, failures: 0, reason: 'operator' });
    await t.database.db.query(`update endpoint set disabled = false, disabled_reason = null where id = $1`, [
      operator.endpointId,
    ]);
  });
});

test('processes started with different operator secrets all start: past the rotation limit the secret in use stays, and the log says so', async () => {
  const own = await startTestHerald('operator_secret_flips');
  try {
    const logged: { msg: string; variable?: string }[] = [];
    const logger = pino({ level: 'error' }, { write: (line: string) => void logged.push(JSON.parse(line)) });
    // Seven starts with seven secrets: the first sets it, five rotations fit (each keeps the one
    // before signing for a day), the seventh would pass the limit.
    const secrets = Array.from({ length: 7 }, () => `whsec_${crypto.randomBytes(24).toString('base64')}`);
    for (const secret of secrets) {
      const config = loadConfig(
        testEnv(own.database.url, { ...env, HERALD_OPERATOR_WEBHOOK_SECRET: secret }),
      );
      const started = await createHerald({ config, logger });
      await started.close();
    }
    assert.ok(
      logged.some((line) => line.variable === 'HERALD_OPERATOR_WEBHOOK_SECRET'),
      JSON.stringify(logged),
    );
    // Only the seventh was refused, and the sixth signs on.
    assert.equal(
      logged.filter((line) => line.msg.startsWith('the operational webhooks secret was not changed')).length,
      1,
      JSON.stringify(logged),
    );
    const [operatorEndpoint] = (await own.call('GET', `/api/v1/app/${OPERATOR_APP_UID}/endpoint`)).body.data;
    const inUse = await own.call(
      'GET',
      `/api/v1/app/${OPERATOR_APP_UID}/endpoint/${operatorEndpoint.id}/secret`,
    );
    assert.equal(inUse.body.key, secrets[5]);
  } finally {
    await own.close();
  }
});

test('an operator app being deleted holds up no change that would report to it: that change reports nothing', async () => {
  const app = await createApp(t, 'reporting-while-deleted');
  const ep = await createEndpoint(t, app, { url: `${receiver.url}/ok` });
  const endpoint = { id: ep, appId: (await findApp(t.database.db, app))!.id, uid: null };
  // As its deletion holds it while the cascade runs through its history.
  const deleting = new pg.Client({ connectionString: t.database.url });
  await deleting.connect();
  try {
    await deleting.query('begin');
    await deleting.query('select 1 from app where uid = $1 for update', [OPERATOR_APP_UID]);
    const before = (await storedEvents({ endpointId: ep })).length;
    // Held up, it would wait past this lock timeout and fail (55P03); reporting nothing, it goes on.
    await t.herald.core.db.transaction(async (tx) => {
      await tx.query(`set local lock_timeout = '5s'`);
      await emitEndpointEvent(tx, 'endpoint.updated', endpoint);
    });
    assert.equal((await storedEvents({ endpointId: ep })).length, before, 'nothing reported');
  } finally {
    await deleting.query('rollback');
    await deleting.end();
  }
});
