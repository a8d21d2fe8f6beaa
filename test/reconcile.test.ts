// `herald reconcile`: the evidence about an uncertain outcome, from the real CLI.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { claimDeliveries } from '../src/db/deliveries.ts';
import type { Queryable } from '../src/db/port.ts';
import { type Reconciliation, reconcileWindow } from '../src/ops/reconcile.ts';
import { createApp, createEndpoint, publishVia } from './support/fixtures.ts';
import { startTestHerald, type TestHerald, testEnv } from './support/herald.ts';
import { killAll, runHerald } from './support/processes.ts';
import { type Receiver, startReceiver } from './support/receiver.ts';
import { waitFor } from './support/wait.ts';

const SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
let t: TestHerald;
let receiver: Receiver;

before(async () => {
  t = await startTestHerald('reconcile');
  // The receiver takes the request and drops the connection: nobody knows if it was applied.
  receiver = await startReceiver(() => 'destroy');
});
after(async () => {
  await killAll();
  await t.close();
  await receiver.close();
});

test('an unknown outcome is reported with its intake, deliveries and attempts; exit code 3', async () => {
  const app = await createApp(t, 'shop');
  await createEndpoint(t, app, { url: `${receiver.url}/orders`, idempotent: false });
  const source = await t.call('POST', '/api/v1/source', {
    uid: 'payments',
    scheme: 'standard-webhooks',
    secret: SECRET,
    app: 'shop',
    eventType: 'payment.settled',
    businessKey: '{{body.payment}}',
  });
  assert.equal(source.status, 201);
  const body = '{"payment":"pay_77"}';
  const signer = new Webhook(SECRET.slice('whsec_'.length));
  for (let i = 0; i < 2; i++) {
    const now = new Date();
    const response = await fetch(`${t.url}/ingest/payments`, {
      method: 'POST',
      body,
      headers: {
        'webhook-id': 'evt_pay_77',
        'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
        'webhook-signature': signer.sign('evt_pay_77', now, body),
      },
    });
    assert.equal(response.status, 204);
  }
  const messageId = (
    await t.database.db.query<{ message_id: string }>(
      `select message_id from intake where delivery_id = 'evt_pay_77'`,
    )
  ).rows[0]!.message_id;
  await waitFor('the parked unknown', async () => {
    const rows = await t.database.db.query(
      `select 1 from delivery where message_id = $1 and state = 'failed'`,
      [messageId],
    );
    return rows.rowCount === 1;
  });

  const env = testEnv(t.database.url);
  const text = await runHerald(['reconcile', '--message', messageId], env);
  assert.equal(text.code, 3, text.stderr);
  assert.match(text.stdout, new RegExp(`message ${messageId}`));
  assert.match(text.stdout, /business key pay_77/);
  assert.match(text.stdout, /delivery id evt_pay_77/);
  assert.match(text.stdout, /observed .* first/);
  assert.match(text.stdout, /observed .* duplicate/);
  assert.match(text.stdout, /unknown\s+- connection_lost/);
  assert.match(text.stdout, /UNKNOWN: 1 attempt/);
  // The endpoint by its origin: a URL's path may be its credential, and reports are pasted around.
  assert.match(text.stdout, new RegExp(`\\(${new URL(receiver.url).origin}/…\\)`));
  assert.doesNotMatch(text.stdout, /\/orders/);

  const json = await runHerald(
    ['reconcile', '--since', '2000-01-01T00:00:00Z', '--unknown-only', '--json'],
    env,
  );
  assert.equal(json.code, 3);
  const report = JSON.parse(json.stdout);
  assert.deepEqual(
    report.map((r: { message: { id: string } }) => r.message.id),
    [messageId],
  );
  assert.equal(report[0].intake[0].observations.length, 2);
  assert.equal(report[0].unknown[0].responseClass, 'connection_lost');
  // Every time in the report in one form, UTC to the millisecond, nested ones too.
  const utc = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
  for (const time of [
    report[0].message.createdAt,
    report[0].intake[0].claimedAt,
    report[0].intake[0].observations[0].observedAt,
    report[0].unknown[0].startedAt,
    report[0].unknown[0].finishedAt,
  ]) {
    assert.match(time, utc);
  }

  // Looked into and left: no longer awaiting review, audited, still unknown in the history.
  const parked = `select coalesce(sum(f.unknown_attempts), 0)::int as n from delivery_failed f
                    join delivery d on d.id = f.delivery_id where d.message_id = $1`;
  assert.equal((await t.database.db.query<{ n: number }>(parked, [messageId])).rows[0]!.n, 1);
  const acknowledged = await runHerald(['reconcile', '--message', messageId, '--acknowledge'], env);
  assert.equal(acknowledged.code, 0, acknowledged.stderr);
  assert.match(acknowledged.stdout, /^acknowledged 1 unknown attempt\(s\) on dlv_/);
  assert.equal((await t.database.db.query<{ n: number }>(parked, [messageId])).rows[0]!.n, 0);
  const audit = await t.database.db.query<{ actor: string }>(
    `select actor from audit_entry where target_id = $1 and action = 'message.unknown_acknowledged'`,
    [messageId],
  );
  assert.deepEqual(
    audit.rows.map((r) => r.actor),
    ['cli'],
  );
  const again = await runHerald(['reconcile', '--message', messageId, '--acknowledge'], env);
  assert.match(again.stdout, /no unknown outcome of .* awaits review/);
  const reviewed = await runHerald(['reconcile', '--message', messageId], env);
  assert.equal(reviewed.code, 0, 'nothing unknown awaits anyone');
  assert.match(reviewed.stdout, /unknown\s+- connection_lost/, 'the attempt is still unknown in the history');
  assert.match(reviewed.stdout, /acknowledged: 1 attempt\(s\) unknown, looked into and left/);
  const window = await runHerald(
    ['reconcile', '--since', '2000-01-01T00:00:00Z', '--unknown-only', '--json'],
    env,
  );
  assert.deepEqual(JSON.parse(window.stdout), [], 'no longer listed as unknown');

  // Resent, and unknown again: the new attempt awaits review, the acknowledged one does not.
  const delivery = (
    await t.database.db.query<{ app: string; endpoint: string }>(
      'select app_id as app, endpoint_id as endpoint from delivery where message_id = $1',
      [messageId],
    )
  ).rows[0]!;
  const resent = await t.call(
    'POST',
    `/api/v1/app/${delivery.app}/msg/${messageId}/endpoint/${delivery.endpoint}/resend`,
  );
  assert.equal(resent.status, 202, JSON.stringify(resent.body));
  await waitFor('the resent delivery parked again', async () => {
    const rows = await t.database.db.query(
      `select 1 from delivery where message_id = $1 and state = 'failed' and cycle = 2`,
      [messageId],
    );
    return rows.rowCount === 1;
  });
  assert.equal((await t.database.db.query<{ n: number }>(parked, [messageId])).rows[0]!.n, 1);
  const nowhere = await runHerald(['reconcile', '--message', 'msg_nowhere', '--acknowledge'], env);
  assert.notEqual(nowhere.code, 0);
  assert.match(nowhere.stderr, /no message msg_nowhere/);
});

test('an attempt with no outcome yet is not known either: in flight, or its lease expired; every page of a window; --app by uid', async () => {
  // No worker: the leases below are taken here, as a worker that then died would have taken them.
  const s = await startTestHerald('reconcile_open', { worker: false });
  try {
    const app = await createApp(s, 'open-shop');
    await createEndpoint(s, app, { url: 'http://127.0.0.1:9/a' });
    await createEndpoint(s, app, { url: 'http://127.0.0.1:9/b' });
    const message = await publishVia(s, app, { eventType: 'order.paid', payload: { n: 1 } });
    const [expiring] = await claimDeliveries(s.database.db, {
      batch: 1,
      leaseSeconds: 0.05,
      afterEndpoint: '',
    });
    const [live] = await claimDeliveries(s.database.db, { batch: 1, leaseSeconds: 600, afterEndpoint: '' });
    assert.ok(expiring && live && expiring.endpointId !== live.endpointId);
    await waitFor('the first lease to expire', async () => {
      const { rows } = await s.database.db.query<{ expired: boolean }>(
        'select lease_expires_at < now() as expired from delivery where id = $1',
        [expiring.deliveryId],
      );
      return rows[0]!.expired;
    });

    const env = testEnv(s.database.url);
    const text = await runHerald(['reconcile', '--message', message], env);
    assert.equal(text.code, 3, `${text.stdout}\n${text.stderr}`);
    assert.match(text.stdout, /no outcome \(lease expired: recovery will mark it unknown\)/);
    assert.match(text.stdout, /in flight \(lease until /);
    assert.match(text.stdout, /OPEN: 2 attempt/);
    assert.doesNotMatch(text.stdout, /no unknown outcomes/);

    const window = await runHerald(
      ['reconcile', '--since', '2000-01-01T00:00:00Z', '--unknown-only', '--app', 'open-shop', '--json'],
      env,
    );
    assert.equal(window.code, 3, window.stderr);
    assert.deepEqual(
      JSON.parse(window.stdout).map((r: { message: { id: string } }) => r.message.id),
      [message],
    );
    const noSuchApp = await runHerald(['reconcile', '--since', '2000-01-01T00:00:00Z', '--app', 'nope'], env);
    assert.notEqual(noSuchApp.code, 0);
    assert.match(noSuchApp.stderr, /no app nope/);
    const notATime = await runHerald(['reconcile', '--since', 'yesterday'], env);
    assert.notEqual(notATime.code, 0);
    assert.match(
      notATime.stderr,
      /option '--since <time>' argument 'yesterday' is invalid\. expected an ISO time/,
    );
    // A time without its offset would be read in this host's zone; a loose date, as V8 guesses.
    for (const loose of ['2026-11-01T00:00', 'Nov 1']) {
      const refused = await runHerald(['reconcile', '--since', loose], env);
      assert.notEqual(refused.code, 0, loose);
      assert.match(refused.stderr, /expected an ISO time with its offset/, loose);
    }
    // What would be ignored is refused: a window's options with one message, an empty window.
    const mixed = await runHerald(['reconcile', '--message', message, '--app', 'other'], env);
    assert.notEqual(mixed.code, 0);
    assert.match(mixed.stderr, /--message names one message/);
    const inverted = await runHerald(
      ['reconcile', '--since', '2026-01-02T00:00:00Z', '--until', '2026-01-01T00:00:00Z'],
      env,
    );
    assert.notEqual(inverted.code, 0);
    assert.match(inverted.stderr, /--until must be after --since/);

    // A window of more messages than a page holds is read whole.
    const more = [await publishVia(s, app, { eventType: 'order.paid', payload: { n: 2 } })];
    more.push(await publishVia(s, app, { eventType: 'order.paid', payload: { n: 3 } }));
    const all: Reconciliation[] = [];
    const everything = { since: new Date(0), until: null, appId: app, uncertainOnly: false };
    for await (const found of reconcileWindow(s.database.db, everything, 2)) all.push(found);
    assert.deepEqual(
      all.map((r) => r.message.id),
      [message, ...more],
    );
    // Printed as they come, the JSON is still one array, as JSON.stringify would print it whole.
    const printed = await runHerald(
      ['reconcile', '--since', '2000-01-01T00:00:00Z', '--app', 'open-shop', '--json'],
      env,
    );
    assert.equal(printed.code, 3, printed.stderr);
    assert.equal(printed.stdout, `${JSON.stringify(JSON.parse(printed.stdout), null, 2)}\n`);
    assert.deepEqual(
      JSON.parse(printed.stdout).map((r: { message: { id: string } }) => r.message.id),
      [message, ...more],
    );
    // A page's messages are looked up a few at a time, not all at once: a page of 500 at once
    // waited for the pool's connections past its connect timeout, failing the command.
    let running = 0;
    let most = 0;
    const counting: Queryable = {
      async query(text, params, prepareAs) {
        most = Math.max(most, ++running);
        try {
          return await s.database.db.query(text, params, prepareAs);
        } finally {
          running--;
        }
      },
    };
    for (let n = 4; n < 10; n++) await publishVia(s, app, { eventType: 'order.paid', payload: { n } });
    const paged: Reconciliation[] = [];
    for await (const found of reconcileWindow(counting, everything, 500)) paged.push(found);
    assert.equal(paged.length, 9);
    assert.ok(most <= 4, `${most} lookups at once`);
  } finally {
    await s.close();
  }
});

test('an unknown attempt retried to a success is acknowledged too: reconcile then exits 0', async () => {
  const app = await createApp(t, 'retried');
  // Idempotent: the unknown first attempt is retried, and the retry succeeds.
  await createEndpoint(t, app, { url: `${receiver.url}/retried` });
  const dropping = receiver.respond;
  let seen = 0;
  receiver.respond = (request, n) =>
    request.path !== '/retried' ? dropping(request, n) : seen++ === 0 ? 'destroy' : { status: 204 };
  try {
    const messageId = await publishVia(t, app, { eventType: 'e', payload: {} });
    await waitFor('the retry to succeed', async () => {
      const { rows } = await t.database.db.query<{ state: string }>(
        'select state from delivery where message_id = $1',
        [messageId],
      );
      return rows[0]?.state === 'succeeded';
    });
    const env = testEnv(t.database.url);
    const before = await runHerald(['reconcile', '--message', messageId], env);
    assert.equal(before.code, 3, before.stdout);
    assert.match(before.stdout, /UNKNOWN: 1 attempt/);
    const acknowledged = await runHerald(['reconcile', '--message', messageId, '--acknowledge'], env);
    assert.equal(acknowledged.code, 0, acknowledged.stderr);
    assert.match(acknowledged.stdout, /^acknowledged 1 unknown attempt\(s\) on dlv_/);
    const after = await runHerald(['reconcile', '--message', messageId], env);
    assert.equal(after.code, 0, after.stdout);
    assert.match(after.stdout, /acknowledged: 1 attempt\(s\) unknown, looked into and left/);
  } finally {
    receiver.respond = dropping;
  }
});
