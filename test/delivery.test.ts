// Delivery behaviour end to end through a real worker and a real receiver: signatures, retries,
// auto-disable, held backlogs, resend cycles (invariants 8 and 9).

import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import { Webhook as StandardWebhook } from 'standardwebhooks';
import { Webhook as SvixWebhook } from 'svix';
import { findApp } from '../src/db/apps.ts';
import { findEndpoint } from '../src/db/endpoints.ts';
import { LIBRARY_ACTOR } from '../src/engine/core.ts';
import { patchToUpdate, replaceEndpoint } from '../src/engine/endpoints.ts';
import { attemptsOf, createApp, createEndpoint, deliveryOf, publishVia } from './support/fixtures.ts';
import { startTestHerald, type TestHerald } from './support/herald.ts';
import { type Receiver, type Respond, startReceiver } from './support/receiver.ts';
import { waitFor, waitForLockWaiter } from './support/wait.ts';

let t: TestHerald;
let receiver: Receiver;
const SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';

// Per-path behaviour: each test owns a path prefix and decides how its receiver answers.
const behaviour = new Map<string, (n: number) => ReturnType<Respond>>();

before(async () => {
  // HERALD_DISABLE_AFTER_FAILURES left at its default (5), which the tests below rely on.
  t = await startTestHerald('delivery');
  receiver = await startReceiver((request) => {
    const decide = behaviour.get(request.path) ?? (() => ({ status: 204 }));
    const seen = receiver.requests.filter((r) => r.path === request.path).length;
    return decide(seen);
  });
});
after(async () => {
  await t.close();
  await receiver.close();
});

const requestsTo = (path: string) => receiver.requests.filter((r) => r.path === path);

describe('signing', () => {
  test('requests verify with the standardwebhooks and svix libraries; a changed byte fails', async () => {
    const app = await createApp(t, 'signing');
    await createEndpoint(t, app, { url: `${receiver.url}/sig`, secret: SECRET, headers: undefined });
    const msg = await publishVia(t, app, { eventType: 'user.created', payload: { name: 'Ada', n: 1 } });
    const [request] = await waitFor(
      'the signed request',
      () => requestsTo('/sig').length === 1 && requestsTo('/sig'),
    );
    const headers = {
      'webhook-id': String(request!.headers['webhook-id']),
      'webhook-timestamp': String(request!.headers['webhook-timestamp']),
      'webhook-signature': String(request!.headers['webhook-signature']),
    };
    assert.equal(headers['webhook-id'], msg);
    assert.equal(request!.headers['content-type'], 'application/json');
    assert.deepEqual(new StandardWebhook(SECRET.slice('whsec_'.length)).verify(request!.body, headers), {
      name: 'Ada',
      n: 1,
    });
    assert.deepEqual(new SvixWebhook(SECRET).verify(request!.body, headers), { name: 'Ada', n: 1 });
    const tampered = request!.body.replace('Ada', 'Adb');
    assert.throws(() => new StandardWebhook(SECRET.slice('whsec_'.length)).verify(tampered, headers));
    assert.throws(() => new SvixWebhook(SECRET).verify(tampered, headers));
  });

  test('custom endpoint headers are sent, herald’s own headers cannot be overridden', async () => {
    const app = await createApp(t, 'headers');
    const ep = await createEndpoint(t, app, { url: `${receiver.url}/hdr` });
    const put = await t.call('PUT', `/api/v1/app/${app}/endpoint/${ep}/headers`, {
      headers: {
        'X-Tenant': 'acme',
        'X-Monkey': 'not a key',
        Authorization: 'Bearer downstream',
        'X-Auth-Token': 'downstream',
        'X-Webhook-Token': 'downstream',
        'Api-Key': 'downstream',
        'X-Shopify-Access-Token': 'downstream',
        X_API_KEY: 'downstream',
        'X-AccessToken': 'downstream',
        'x-apitoken': 'downstream',
        ClientSecret: 'downstream',
        'X-JWT': 'downstream',
        'X-Passphrase': 'downstream',
        apikey: 'downstream',
        'X-Vercel-Protection-Bypass': 'downstream',
        'X-Api-Keys': 'downstream',
        'X-Hmac': 'downstream',
        'X-Pwd': 'downstream',
        'X-Passcode': 'downstream',
        'X-Pin': 'downstream',
        'X-Otp': 'downstream',
        Code: 'downstream',
      },
    });
    assert.equal(put.status, 204);
    const reserved = await t.call('PUT', `/api/v1/app/${app}/endpoint/${ep}/headers`, {
      headers: { 'webhook-id': 'forged' },
    });
    assert.equal(reserved.status, 422);
    await publishVia(t, app, { eventType: 'e', payload: {} });
    const [request] = await waitFor(
      'the request',
      () => requestsTo('/hdr').length === 1 && requestsTo('/hdr'),
    );
    assert.equal(request!.headers['x-tenant'], 'acme');
    assert.equal(request!.headers['authorization'], 'Bearer downstream');
    const got = await t.call('GET', `/api/v1/app/${app}/endpoint/${ep}/headers`);
    // Credentials are named, never shown.
    assert.deepEqual(got.body.headers, { 'X-Tenant': 'acme', 'X-Monkey': 'not a key' });
    assert.deepEqual(got.body.sensitive.sort(), [
      'Api-Key',
      'Authorization',
      'ClientSecret',
      'Code',
      'X-AccessToken',
      'X-Api-Keys',
      'X-Auth-Token',
      'X-Hmac',
      'X-JWT',
      'X-Otp',
      'X-Passcode',
      'X-Passphrase',
      'X-Pin',
      'X-Pwd',
      'X-Shopify-Access-Token',
      'X-Vercel-Protection-Bypass',
      'X-Webhook-Token',
      'X_API_KEY',
      'apikey',
      'x-apitoken',
    ]);
  });
});

describe('endpoint headers', () => {
  test('two header PATCHes at once each keep what the other set', async () => {
    const app = await createApp(t, 'headers-at-once');
    const ep = await createEndpoint(t, app, { url: `${receiver.url}/headers-at-once` });
    const locker = new pg.Client({ connectionString: t.database.url });
    await locker.connect();
    try {
      // Both PATCHes wait behind this lock on the endpoint's row, having read it before.
      await locker.query('begin');
      await locker.query('select 1 from endpoint where id = $1 for update', [ep]);
      const path = `/api/v1/app/${app}/endpoint/${ep}/headers`;
      const patches = [
        t.call('PATCH', path, { headers: { 'X-A': 'a' } }),
        t.call('PATCH', path, { headers: { 'X-B': 'b' } }),
      ];
      await waitFor('both PATCHes to wait for the lock', async () => {
        const { rows } = await t.database.db.query<{ n: number }>(
          `select count(*)::int as n from pg_stat_activity
            where datname = current_database() and wait_event_type = 'Lock' and query ilike '%endpoint%'`,
        );
        return rows[0]!.n >= 2;
      });
      await locker.query('rollback');
      for (const answer of await Promise.all(patches))
        assert.equal(answer.status, 204, JSON.stringify(answer.body));
    } finally {
      await locker.end();
    }
    const headers = await t.call('GET', `/api/v1/app/${app}/endpoint/${ep}/headers`);
    assert.deepEqual(headers.body.headers, { 'X-A': 'a', 'X-B': 'b' });
  });
});

describe('endpoint headers that would outgrow a receiver’s buffers', () => {
  test('a value over 4 KiB, or over 8 KiB in all once merged, is a 422 naming headers; nothing changes', async () => {
    const app = await createApp(t, 'headers-size');
    const ep = await createEndpoint(t, app, { url: `${receiver.url}/headers-size` });
    const path = `/api/v1/app/${app}/endpoint/${ep}/headers`;
    const big = await t.call('PUT', path, { headers: { 'X-Big': 'a'.repeat(4097) } });
    assert.equal(big.status, 422, JSON.stringify(big.body));
    assert.deepEqual(big.body.detail[0].loc, ['body', 'headers', 'X-Big']);
    assert.equal((await t.call('PUT', path, { headers: { 'X-A': 'a'.repeat(4000) } })).status, 204);
    assert.equal((await t.call('PATCH', path, { headers: { 'X-B': 'b'.repeat(4000) } })).status, 204);
    // Each under the limit, the merged set over it.
    const merged = await t.call('PATCH', path, { headers: { 'X-C': 'c'.repeat(500) } });
    assert.equal(merged.status, 422, JSON.stringify(merged.body));
    assert.deepEqual(merged.body.detail[0].loc, ['body', 'headers']);
    const kept = await t.call('GET', path);
    assert.deepEqual(Object.keys(kept.body.headers).sort(), ['X-A', 'X-B']);
  });
});

describe('endpoint PUT', () => {
  test('a PUT without version keeps it, and a filter or channel named twice is kept once', async () => {
    const app = await createApp(t, 'put-version');
    const made = await t.call('POST', `/api/v1/app/${app}/endpoint`, {
      url: `${receiver.url}/put-version`,
      version: 3,
      filterTypes: ['a.b', 'a.b', 'c.d'],
      channels: ['eu', 'eu'],
    });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    assert.deepEqual(made.body.filterTypes, ['a.b', 'c.d']);
    assert.deepEqual(made.body.channels, ['eu']);
    // What an SDK's update sends: no version.
    const put = await t.call('PUT', `/api/v1/app/${app}/endpoint/${made.body.id}`, {
      url: `${receiver.url}/put-version-2`,
    });
    assert.equal(put.status, 200, JSON.stringify(put.body));
    assert.equal(put.body.version, 3);
  });
});

describe('event types', () => {
  test('a PATCH racing an archive keeps the archive: the type is merged onto its row read under lock', async () => {
    const made = await t.call('POST', '/api/v1/event-type', { name: 'race.archived', description: 'first' });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const locker = new pg.Client({ connectionString: t.database.url });
    await locker.connect();
    try {
      // The archive holds the row while the PATCH comes in, then commits.
      await locker.query('begin');
      await locker.query(`update event_type set archived = true where name = 'race.archived'`);
      const patch = t.call('PATCH', '/api/v1/event-type/race.archived', { description: 'second' });
      await waitForLockWaiter(t.database.db, ['from event_type where name', 'insert into event_type']);
      await locker.query('commit');
      const patched = await patch;
      assert.equal(patched.status, 200, JSON.stringify(patched.body));
      assert.equal(patched.body.description, 'second');
      assert.equal(patched.body.archived, true, 'the archive that committed first stays');
    } finally {
      await locker.end();
    }
  });
});

describe('while a request is out', () => {
  test('the worker holds no transaction and no lock (invariant 3): its claim committed before the send', async () => {
    behaviour.set('/held-out', () => 'hold');
    try {
      const app = await createApp(t, 'held-out');
      const ep = await createEndpoint(t, app, { url: `${receiver.url}/held-out` });
      const msg = await publishVia(t, app, { eventType: 'e', payload: { held: true } });
      await waitFor('the request to arrive', () => requestsTo('/held-out').length === 1);
      // Held for a while: a transaction that lived across the send would be as old as the request.
      await waitFor('the request to be out for 300 ms', async () => {
        const { rows } = await t.database.db.query<{ out: boolean }>(
          `select now() - started_at > interval '300 ms' as out from attempt where message_id = $1`,
          [msg],
        );
        return rows[0]?.out === true;
      });
      // Only transactions that began before the request arrived and are open still: a claim round
      // polling meanwhile is none of them. (The database runs on this host: one clock.)
      const arrivedAt = new Date(requestsTo('/held-out')[0]!.startedAt);
      const acrossTheSend = `from pg_stat_activity s
         where s.datname = current_database() and s.backend_type = 'client backend'
           and s.pid <> pg_backend_pid() and s.xact_start <= $1`;
      const open = await t.database.db.query<{ state: string; query: string }>(
        `select s.state, s.query ${acrossTheSend}`,
        [arrivedAt],
      );
      assert.deepEqual(open.rows, [], 'no transaction open across the send');
      const locks = await t.database.db.query<{ relname: string }>(
        `select c.relname from pg_locks l join pg_class c on c.oid = l.relation
          where c.relname in ('delivery', 'delivery_lease', 'endpoint', 'attempt')
            and l.pid in (select s.pid ${acrossTheSend})`,
        [arrivedAt],
      );
      assert.deepEqual(locks.rows, [], 'no lock held on the delivery tables across the send');
      receiver.release();
      await waitFor(
        'the delivery to succeed',
        async () => (await deliveryOf(t, msg, ep))?.state === 'succeeded',
      );
    } finally {
      receiver.release();
    }
  });
});

describe('retries', () => {
  test('failures are retried with the same webhook-id until success; bodies are stored truncated', async () => {
    behaviour.set('/retry', (n) =>
      n <= 2 ? { status: 500, body: 'x'.repeat(10_000) } : { status: 200, body: 'ok' },
    );
    const app = await createApp(t, 'retry');
    const ep = await createEndpoint(t, app, { url: `${receiver.url}/retry` });
    const msg = await publishVia(t, app, { eventType: 'e', payload: { r: 1 } });
    await waitFor(
      'success on the third attempt',
      async () => (await deliveryOf(t, msg, ep))?.state === 'succeeded',
    );
    const ids = requestsTo('/retry').map((r) => r.headers['webhook-id']);
    assert.deepEqual(ids, [msg, msg, msg]);
    const delivery = (await deliveryOf(t, msg, ep))!;
    const attempts = await attemptsOf(t, delivery.id);
    assert.deepEqual(
      attempts.map((a) => [a.outcome, a.status_code]),
      [
        ['failure', 500],
        ['failure', 500],
        ['success', 200],
      ],
    );
    assert.ok(attempts[0]!.response_body!.length <= 4096, 'response bodies are truncated');
    assert.equal(attempts[2]!.response_body, 'ok');
    const endpoint = await t.call('GET', `/api/v1/app/${app}/endpoint/${ep}`);
    assert.equal(endpoint.body.disabled, false, 'two failures and a success do not disable');
  });

  test('five consecutive known failures disable the endpoint; its deliveries wait; re-enabling releases them', async () => {
    let healthy = false;
    behaviour.set('/flaky', () => (healthy ? { status: 204 } : { status: 503 }));
    const app = await createApp(t, 'autodisable');
    const ep = await createEndpoint(t, app, { url: `${receiver.url}/flaky` });
    const first = await publishVia(t, app, { eventType: 'e', payload: { i: 1 } });
    await waitFor(
      'auto-disable',
      async () => (await t.call('GET', `/api/v1/app/${app}/endpoint/${ep}`)).body.disabled,
    );
    const endpoint = await t.call('GET', `/api/v1/app/${app}/endpoint/${ep}`);
    assert.equal(endpoint.body.disabledReason, 'failures');
    const held = (await deliveryOf(t, first, ep))!;
    assert.equal(held.state, 'pending', 'the delivery waits with budget left');
    assert.equal(held.attempts_in_cycle, 5);
    assert.equal(requestsTo('/flaky').length, 5);

    // New messages still get their deliveries (the snapshot includes disabled endpoints), and wait.
    const second = await publishVia(t, app, { eventType: 'e', payload: { i: 2 } });
    assert.equal((await deliveryOf(t, second, ep))!.state, 'pending');
    const stats = await t.call('GET', `/api/v1/app/${app}/endpoint/${ep}/stats`);
    assert.equal(stats.body.pending, 2);

    // Its retry an hour ahead, as the schedule's later steps put one: re-enabling sends it now.
    await t.database.db.query(
      `update delivery set next_attempt_at = now() + interval '1 hour' where id = $1`,
      [held.id],
    );
    healthy = true;
    const enabled = await t.call('PATCH', `/api/v1/app/${app}/endpoint/${ep}`, { disabled: false });
    assert.equal(enabled.status, 200);
    await waitFor('the backlog to drain', async () => {
      const [a, b] = [await deliveryOf(t, first, ep), await deliveryOf(t, second, ep)];
      return a?.state === 'succeeded' && b?.state === 'succeeded';
    });
    const released = (await deliveryOf(t, first, ep))!;
    assert.equal(released.attempts_in_cycle, 6, 're-enabling does not reset the budget');
    assert.equal(released.cycle, 1);
  });

  test('a change made from a row read before an auto-disable keeps the endpoint disabled', async () => {
    const app = await createApp(t, 'stale-patch');
    const ep = await createEndpoint(t, app, { url: `${receiver.url}/stale` });
    const application = (await findApp(t.database.db, app))!;
    const stale = (await findEndpoint(t.database.db, application.id, ep))!;
    assert.equal(stale.disabled, false);
    // The worker disables the endpoint after the API read it, before its transaction.
    await t.database.db.query(
      `update endpoint set disabled = true, disabled_reason = 'failures', consecutive_failures = 5 where id = $1`,
      [ep],
    );
    const patched = await t.database.db.transaction((tx) =>
      replaceEndpoint(t.herald.core, tx, LIBRARY_ACTOR, stale, (current) =>
        patchToUpdate(current, { description: 'renamed' }),
      ),
    );
    assert.equal(patched.description, 'renamed');
    assert.equal(patched.disabled, true, 'the description changed, not the auto-disable');
    assert.equal(patched.disabledReason, 'failures');
    // Enabling from the same stale row is an enabling, and audited as one.
    const enabled = await t.database.db.transaction((tx) =>
      replaceEndpoint(t.herald.core, tx, LIBRARY_ACTOR, stale, (current) =>
        patchToUpdate(current, { disabled: false }),
      ),
    );
    assert.equal(enabled.disabled, false);
    const audited = await t.database.db.query<{ action: string }>(
      `select action from audit_entry where target_id = $1 and action like 'endpoint.%abled' order by id`,
      [ep],
    );
    assert.deepEqual(
      audited.rows.map((r) => r.action),
      ['endpoint.enabled'],
    );
  });

  test('an operator-disabled endpoint holds its backlog until enabled', async () => {
    const app = await createApp(t, 'held');
    const ep = await createEndpoint(t, app, { url: `${receiver.url}/held`, disabled: true });
    const msgs = [];
    for (let i = 0; i < 3; i++) msgs.push(await publishVia(t, app, { eventType: 'e', payload: { i } }));
    // Publish to a second, enabled endpoint and wait for it: the worker has had its chance.
    const probe = await createEndpoint(t, app, { url: `${receiver.url}/held-probe` });
    const last = await publishVia(t, app, { eventType: 'e', payload: { probe: true } });
    await waitFor(
      'the probe delivery',
      async () => (await deliveryOf(t, last, probe))?.state === 'succeeded',
    );
    assert.equal(requestsTo('/held').length, 0);
    for (const m of msgs) assert.equal((await deliveryOf(t, m, ep))!.state, 'pending');
    // Waiting, with no next attempt to show while the endpoint is disabled (not one long past).
    const held = await t.call('GET', `/api/v1/app/${app}/endpoint/${ep}/msg`);
    assert.equal(held.status, 200, JSON.stringify(held.body));
    assert.deepEqual(
      held.body.data.map((m: { status: number; nextAttempt: string | null }) => [m.status, m.nextAttempt]),
      Array(4).fill([1, null]),
    );
    const destinations = await t.call('GET', `/api/v1/app/${app}/msg/${msgs[0]}/endpoint`);
    assert.deepEqual(
      destinations.body.data.map((d: { id: string; nextAttempt: string | null }) => [d.id, d.nextAttempt]),
      [[ep, null]],
    );
    await t.call('PATCH', `/api/v1/app/${app}/endpoint/${ep}`, { disabled: false });
    await waitFor('the held backlog', () => requestsTo('/held').length === 4);
  });

  test('410 Gone disables the endpoint at once', async () => {
    behaviour.set('/gone', () => ({ status: 410 }));
    const app = await createApp(t, 'gone');
    const ep = await createEndpoint(t, app, { url: `${receiver.url}/gone` });
    await publishVia(t, app, { eventType: 'e', payload: {} });
    await waitFor(
      'disable on 410',
      async () => (await t.call('GET', `/api/v1/app/${app}/endpoint/${ep}`)).body.disabled,
    );
    assert.equal((await t.call('GET', `/api/v1/app/${app}/endpoint/${ep}`)).body.disabledReason, 'gone');
    assert.equal(requestsTo('/gone').length, 1);
  });
});

describe('the receiver’s contract', () => {
  test('an unknown outcome is retried for an idempotent endpoint and parked for one that is not', async () => {
    receiver.respond = (request) => {
      if (request.path.startsWith('/cut')) return 'destroy';
      const decide = behaviour.get(request.path) ?? (() => ({ status: 204 }));
      return decide(requestsTo(request.path).length);
    };
    const app = await createApp(t, 'contract');
    const retried = await createEndpoint(t, app, { url: `${receiver.url}/cut-retry` });
    const parked = await createEndpoint(t, app, { url: `${receiver.url}/cut-park`, idempotent: false });
    const msg = await publishVia(t, app, { eventType: 'e', payload: {} });
    await waitFor(
      'the parked delivery to fail',
      async () => (await deliveryOf(t, msg, parked))?.state === 'failed',
    );
    const parkedAttempts = await attemptsOf(t, (await deliveryOf(t, msg, parked))!.id);
    assert.deepEqual(
      parkedAttempts.map((a) => [a.outcome, a.response_class]),
      [['unknown', 'connection_lost']],
    );
    // Its whole cycle: eight unknown outcomes, past the five known failures that disable.
    await waitFor(
      'the idempotent endpoint to be retried to the end of its cycle',
      async () => (await deliveryOf(t, msg, retried))?.state === 'failed',
    );
    const retriedAttempts = await attemptsOf(t, (await deliveryOf(t, msg, retried))!.id);
    assert.deepEqual(
      retriedAttempts.map((a) => a.outcome),
      Array(8).fill('unknown'),
    );
    const endpoint = await t.call('GET', `/api/v1/app/${app}/endpoint/${retried}`);
    assert.equal(endpoint.body.disabled, false, 'unknown outcomes never count towards auto-disable');
    const { rows } = await t.database.db.query<{ consecutive_failures: number }>(
      'select consecutive_failures from endpoint where id = $1',
      [retried],
    );
    assert.equal(rows[0]!.consecutive_failures, 0, 'nor towards the failures in a row');
  });

  test('dead-letter: a validation 4xx fails the delivery at once; 401 flags the endpoint’s credentials', async () => {
    behaviour.set('/reject', () => ({ status: 422 }));
    behaviour.set('/auth', (n) => (n <= 1 ? { status: 401 } : { status: 204 }));
    const app = await createApp(t, 'deadletter');
    const dead = await createEndpoint(t, app, {
      url: `${receiver.url}/reject`,
      clientErrorPolicy: 'dead-letter',
    });
    const auth = await createEndpoint(t, app, { url: `${receiver.url}/auth` });
    const msg = await publishVia(t, app, { eventType: 'e', payload: {} });
    await waitFor('the dead letter', async () => (await deliveryOf(t, msg, dead))?.state === 'failed');
    assert.equal((await deliveryOf(t, msg, dead))!.attempts_total, 1);
    await waitFor(
      'the flag',
      async () => (await t.call('GET', `/api/v1/app/${app}/endpoint/${auth}`)).body.credentialsRejectedAt,
    );
    await waitFor(
      'the retry to succeed',
      async () => (await deliveryOf(t, msg, auth))?.state === 'succeeded',
    );
    const cleared = await t.call('GET', `/api/v1/app/${app}/endpoint/${auth}`);
    assert.equal(cleared.body.credentialsRejectedAt, null, 'a success clears the flag');
  });
});

describe("failures of herald's own", () => {
  test('deliveries whose payload expired fail without disabling their endpoint; the next one goes out', async () => {
    const app = await createApp(t, 'expired');
    const ep = await createEndpoint(t, app, { url: `${receiver.url}/expired`, disabled: true });
    // Six held deliveries outlive their payloads, more than the five failures that disable an
    // endpoint: three expunged, three past their retention though the job that removes expired
    // payloads (each minute) has not run yet; then one that still has its payload.
    const expired: string[] = [];
    for (let i = 0; i < 6; i++) expired.push(await publishVia(t, app, { eventType: 'e', payload: { i } }));
    for (const id of expired.slice(0, 3)) {
      assert.equal((await t.call('DELETE', `/api/v1/app/${app}/msg/${id}/content`)).status, 204);
    }
    await t.database.db.query(
      `update message set payload_expires_at = now() - interval '1 minute' where id = any($1::text[])`,
      [expired.slice(3)],
    );
    const kept = await publishVia(t, app, { eventType: 'e', payload: { kept: true } });
    await t.call('PATCH', `/api/v1/app/${app}/endpoint/${ep}`, { disabled: false });
    await waitFor('the kept message', async () => (await deliveryOf(t, kept, ep))?.state === 'succeeded');
    for (const id of expired) {
      const delivery = (await deliveryOf(t, id, ep))!;
      assert.equal(delivery.state, 'failed', 'nothing to send: the cycle ends');
      const attempts = await attemptsOf(t, delivery.id);
      assert.deepEqual(
        attempts.map((a) => [a.outcome, a.response_class]),
        [['failure', 'payload_expired']],
      );
    }
    const endpoint = await t.call('GET', `/api/v1/app/${app}/endpoint/${ep}`);
    assert.equal(endpoint.body.disabled, false);
    assert.equal(requestsTo('/expired').length, 1);
  });

  /**
   * A delivery to an endpoint whose secrets `spoil` made unreadable, as a worker with another
   * HERALD_MASTER_KEY finds them: every attempt of the cycle fails unsent as `responseClass`, on
   * the schedule, and the endpoint is neither disabled nor counted as failing.
   */
  async function failsUnsent(name: string, responseClass: string, spoil: (ep: string) => Promise<unknown>) {
    const app = await createApp(t, name);
    const ep = await createEndpoint(t, app, { url: `${receiver.url}/${name}` });
    await spoil(ep);
    const msg = await publishVia(t, app, { eventType: 'e', payload: {} });
    const delivery = await waitFor('the cycle to end', async () => {
      const d = await deliveryOf(t, msg, ep);
      return d?.state === 'failed' && d;
    });
    const attempts = await attemptsOf(t, delivery.id);
    assert.equal(attempts.length, 8, 'every attempt of the cycle, on the schedule');
    assert.ok(attempts.every((a) => a.outcome === 'failure' && a.response_class === responseClass));
    const endpoint = await t.database.db.query<{ disabled: boolean; consecutive_failures: number }>(
      'select disabled, consecutive_failures from endpoint where id = $1',
      [ep],
    );
    assert.deepEqual(endpoint.rows[0], { disabled: false, consecutive_failures: 0 });
    assert.equal(requestsTo(`/${name}`).length, 0);
  }

  test('an unreadable signing secret fails each attempt on the retry schedule without disabling the endpoint', () =>
    failsUnsent('unreadable', 'no_signing_secret', (ep) =>
      t.database.db.query(`update endpoint_secret set sealed = '\\x00'::bytea where endpoint_id = $1`, [ep]),
    ));

  // Sent without them, the request would lack the receiver's credentials: it is not sent.
  test('headers that cannot be opened fail each attempt unsent, on the schedule, without disabling the endpoint', () =>
    failsUnsent('unreadable-headers', 'headers_unreadable', (ep) =>
      t.database.db.query(`update endpoint set sealed_headers = to_jsonb('AQID'::text) where id = $1`, [ep]),
    ));
});

describe('resend', () => {
  test('an exhausted delivery fails; resend starts a new cycle keeping ids and history; competing resends start one', async () => {
    let healthy = false;
    behaviour.set('/exhaust', () => (healthy ? { status: 204 } : { status: 500 }));
    const tx = await startTestHerald('resend', {
      env: { HERALD_DISABLE_AFTER_FAILURES: '100', HERALD_RETRY_SCHEDULE: '0.02,0.02' },
    });
    try {
      const app = await createApp(tx, 'resend');
      const ep = await createEndpoint(tx, app, { url: `${receiver.url}/exhaust` });
      const msg = await publishVia(tx, app, { eventType: 'e', payload: {} });
      await waitFor('the cycle to fail', async () => (await deliveryOf(tx, msg, ep))?.state === 'failed');
      const failed = (await deliveryOf(tx, msg, ep))!;
      assert.equal(failed.attempts_in_cycle, 3, 'a schedule of two delays allows three attempts');

      // Hold the endpoint so the race is between the resends alone, not with a fast delivery
      // (a resend that arrives after the new cycle finished rightly starts another).
      await tx.call('PATCH', `/api/v1/app/${app}/endpoint/${ep}`, { disabled: true });
      const responses = await Promise.all(
        Array.from({ length: 10 }, () =>
          tx.call('POST', `/api/v1/app/${app}/msg/${msg}/endpoint/${ep}/resend`),
        ),
      );
      assert.ok(responses.every((r) => r.status === 202));
      const restarted = (await deliveryOf(tx, msg, ep))!;
      assert.deepEqual([restarted.state, restarted.cycle, restarted.attempts_in_cycle], ['pending', 2, 0]);
      healthy = true;
      await tx.call('PATCH', `/api/v1/app/${app}/endpoint/${ep}`, { disabled: false });
      await waitFor(
        'the new cycle to succeed',
        async () => (await deliveryOf(tx, msg, ep))?.state === 'succeeded',
      );
      const after = (await deliveryOf(tx, msg, ep))!;
      assert.equal(after.id, failed.id, 'same delivery');
      assert.equal(after.cycle, 2, 'ten competing resends started exactly one new cycle');
      assert.equal(after.attempts_in_cycle, 1);
      assert.equal(after.attempts_total, 4);
      const attempts = await attemptsOf(tx, after.id);
      assert.deepEqual(
        attempts.map((a) => [a.cycle, a.outcome]),
        [
          [1, 'failure'],
          [1, 'failure'],
          [1, 'failure'],
          [2, 'success'],
        ],
      );
      const listed = await tx.call('GET', `/api/v1/app/${app}/attempt/msg/${msg}`);
      assert.equal(listed.body.data.length, 4);
      assert.equal(listed.body.data[0].triggerType, 1, 'the resent attempt is manual');
      assert.equal(new Set(requestsTo('/exhaust').map((r) => r.headers['webhook-id'])).size, 1);
    } finally {
      await tx.close();
    }
  });
});

describe('resend and recover leave a message whose payload is gone', () => {
  test('resend answers 409 payload_expired; recover restarts only the deliveries it can send', async () => {
    behaviour.set('/gone', () => ({ status: 500 }));
    const tx = await startTestHerald('resend_gone', {
      env: { HERALD_DISABLE_AFTER_FAILURES: '100', HERALD_RETRY_SCHEDULE: '0.02' },
    });
    try {
      const app = await createApp(tx, 'gone');
      const ep = await createEndpoint(tx, app, { url: `${receiver.url}/gone` });
      const kept = await publishVia(tx, app, { eventType: 'e', payload: { n: 1 } });
      const emptied = await publishVia(tx, app, { eventType: 'e', payload: { n: 2 } });
      // Past its retention, though the job that removes expired payloads has not reached it yet.
      const lapsed = await publishVia(tx, app, { eventType: 'e', payload: { n: 3 } });
      await waitFor('the three cycles to fail', async () => {
        const states = await Promise.all([kept, emptied, lapsed].map((m) => deliveryOf(tx, m, ep)));
        return states.every((d) => d?.state === 'failed');
      });
      const deleted = await tx.call('DELETE', `/api/v1/app/${app}/msg/${emptied}/content`);
      assert.equal(deleted.status, 204);
      await tx.database.db.query(
        `update message set payload_expires_at = now() - interval '1 second' where id = $1`,
        [lapsed],
      );

      for (const gone of [emptied, lapsed]) {
        const resent = await tx.call('POST', `/api/v1/app/${app}/msg/${gone}/endpoint/${ep}/resend`);
        assert.equal(resent.status, 409, JSON.stringify(resent.body));
        assert.equal(resent.body.code, 'payload_expired');
        assert.equal((await deliveryOf(tx, gone, ep))!.cycle, 1, 'no new cycle');
        const read = await tx.call('GET', `/api/v1/app/${app}/msg/${gone}`);
        assert.deepEqual(read.body.payload, { expired: true }, 'it reads as it would be sent: gone');
        const endpointPage = await tx.call('GET', `/api/v1/app/${app}/endpoint/${ep}/msg`);
        const listed = endpointPage.body.data.find((m: { id: string }) => m.id === gone);
        assert.deepEqual(listed.payload, { expired: true }, "and so on the endpoint's messages");
      }

      // Held disabled, so that what recover restarted stays pending to be looked at.
      await tx.call('PATCH', `/api/v1/app/${app}/endpoint/${ep}`, { disabled: true });
      const since = new Date(Date.now() - 3600_000).toISOString();
      const recovered = await tx.call('POST', `/api/v1/app/${app}/endpoint/${ep}/recover`, { since });
      assert.equal(recovered.status, 202, JSON.stringify(recovered.body));
      const restarted = (await deliveryOf(tx, kept, ep))!;
      assert.deepEqual([restarted.state, restarted.cycle], ['pending', 2]);
      for (const gone of [emptied, lapsed]) {
        const left = (await deliveryOf(tx, gone, ep))!;
        assert.deepEqual([left.state, left.cycle], ['failed', 1], 'nothing to send: left as it was');
      }
      const { rows } = await tx.database.db.query<{ details: { deliveries: number } }>(
        `select details from audit_entry where action = 'endpoint.recovered' and target_id = $1`,
        [ep],
      );
      assert.deepEqual(
        rows.map((r) => r.details.deliveries),
        [1],
        'the audit counts what was restarted',
      );
    } finally {
      await tx.close();
    }
  });
});

describe('send-example', () => {
  test('delivers the event type’s example to that endpoint only, whatever its filters', async () => {
    const app = await createApp(t, 'examples');
    const target = await createEndpoint(t, app, {
      url: `${receiver.url}/example-target`,
      filterTypes: ['other'],
    });
    await createEndpoint(t, app, { url: `${receiver.url}/example-bystander` });
    const created = await t.call('POST', '/api/v1/event-type', {
      name: 'example.only',
      description: 'x',
      schemas: { '1': { type: 'object', examples: [{ sample: true }] } },
    });
    assert.equal(created.status, 201);
    const sent = await t.call('POST', `/api/v1/app/${app}/endpoint/${target}/send-example`, {
      eventType: 'example.only',
    });
    assert.equal(sent.status, 200);
    const [request] = await waitFor(
      'the example',
      () => requestsTo('/example-target').length === 1 && requestsTo('/example-target'),
    );
    assert.deepEqual(JSON.parse(request!.body), { sample: true });
    assert.equal(request!.headers['webhook-id'], sent.body.id);
    const deliveries = await t.database.db.query('select endpoint_id from delivery where message_id = $1', [
      sent.body.id,
    ]);
    assert.deepEqual(deliveries.rows, [{ endpoint_id: target }], 'no other endpoint gets the example');
  });

  test('svix.ping, the test event, needs no event type: {"success": true}, as in Svix', async () => {
    const app = await createApp(t, 'ping');
    const target = await createEndpoint(t, app, { url: `${receiver.url}/ping-target` });
    const sent = await t.call('POST', `/api/v1/app/${app}/endpoint/${target}/send-example`, {
      eventType: 'svix.ping',
    });
    assert.equal(sent.status, 200, JSON.stringify(sent.body));
    assert.equal(sent.body.eventType, 'svix.ping');
    const [request] = await waitFor(
      'the ping',
      () => requestsTo('/ping-target').length === 1 && requestsTo('/ping-target'),
    );
    assert.deepEqual(JSON.parse(request!.body), { success: true });
    // Any other name still needs its event type.
    const unknown = await t.call('POST', `/api/v1/app/${app}/endpoint/${target}/send-example`, {
      eventType: 'svix.pong',
    });
    assert.equal(unknown.status, 404);
  });
});

describe('deletion beside an outcome write', () => {
  for (const deleted of ['endpoint', 'app'] as const) {
    test(`an ${deleted} deleted while an outcome is written waits for the write, and neither deadlocks`, async () => {
      // A receiver that keeps the request, so the delivery stays in flight.
      const held = http.createServer(() => {});
      await new Promise<void>((resolve) => held.listen(0, '127.0.0.1', resolve));
      try {
        const app = await createApp(t, `delete-${deleted}-beside-outcome`);
        const ep = await createEndpoint(t, app, {
          url: `http://127.0.0.1:${(held.address() as AddressInfo).port}/held`,
        });
        const msg = await publishVia(t, app, { eventType: 'e', payload: {} });
        const sending = await waitFor('the delivery in flight', async () => {
          const delivery = await deliveryOf(t, msg, ep);
          return delivery?.state === 'sending' && delivery;
        });
        // An outcome write, as herald_record_outcomes takes its locks: the delivery first, then,
        // for a success after failures (or a failure that counts), the endpoint's failure count.
        const writer = new pg.Client({ connectionString: t.database.url });
        await writer.connect();
        try {
          await writer.query('begin');
          // As the outcome write keeps the queue tables itself (herald.queue_kept): no trigger of
          // the delivery's update takes a lock on its endpoint meanwhile.
          await writer.query(`set local herald.queue_kept = 'on'`);
          await writer.query('update delivery set updated_at = now() where id = $1', [sending.id]);
          const deleting = t.call(
            'DELETE',
            deleted === 'endpoint' ? `/api/v1/app/${app}/endpoint/${ep}` : `/api/v1/app/${app}`,
          );
          // The delete waits: for the delivery (now), or, holding the endpoint, in its cascade (before).
          await waitForLockWaiter(t.database.db, [
            "state = 'sending'",
            'delete from endpoint where id',
            'delete from app where id',
          ]);
          // The delete once held the endpoint here, and this update deadlocked with its cascade.
          await writer.query(
            'update endpoint set consecutive_failures = consecutive_failures + 1 where id = $1',
            [ep],
          );
          await writer.query('commit');
          const answer = await deleting;
          assert.equal(answer.status, 204, JSON.stringify(answer.body));
        } finally {
          await writer.end();
        }
        assert.equal(await deliveryOf(t, msg, ep), undefined);
      } finally {
        held.closeAllConnections();
        await new Promise((resolve) => held.close(resolve));
      }
    });
  }
});
