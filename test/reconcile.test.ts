// `herald reconcile`: the evidence about an uncertain outcome, from the real CLI.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { createApp, createEndpoint } from './support/fixtures.ts';
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
});
