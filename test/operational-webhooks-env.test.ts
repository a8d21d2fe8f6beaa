// Operational webhooks are on once the operator app exists, whichever process's start-up made it:
// a worker or an API process started without HERALD_OPERATOR_WEBHOOK_URL (set on the API
// processes only, say) reports what it causes all the same, instead of leaving the operator
// without the events that matter most.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { loadConfig } from '../src/config.ts';
import { findApp } from '../src/db/apps.ts';
import { OPERATOR_APP_UID } from '../src/engine/apps.ts';
import { createHerald, createLogger } from '../src/herald.ts';
import { createApp, createEndpoint, deliveryOf, publishVia } from './support/fixtures.ts';
import { startTestHerald, type TestHerald, testEnv } from './support/herald.ts';
import { type Receiver, startReceiver } from './support/receiver.ts';
import { waitFor } from './support/wait.ts';

let t: TestHerald;
let receiver: Receiver;
let operatorAppId: string;

before(async () => {
  receiver = await startReceiver((request) => {
    const seen = receiver.requests.filter((r) => r.path === request.path).length;
    return { status: request.path === '/flaky' && seen <= 4 ? 500 : 204 };
  });
  // This herald's API and worker have no HERALD_OPERATOR_WEBHOOK_URL.
  t = await startTestHerald('operator_env', { worker: false });
  assert.equal(t.herald.core.config.operatorWebhookUrl, undefined);
  // Another process's start-up, with the variable, makes the operator app.
  const config = loadConfig(
    testEnv(t.database.url, { HERALD_OPERATOR_WEBHOOK_URL: `${receiver.url}/operator` }),
  );
  const other = await createHerald({ config, logger: createLogger('silent') });
  await other.close();
  operatorAppId = (await findApp(t.database.db, OPERATOR_APP_UID))!.id;
  await t.herald.startWorker();
});
after(async () => {
  await t.close();
  await receiver.close();
});

const storedTypes = async (key: string, value: string) =>
  (
    await t.database.db.query<{ payload: string }>(
      'select payload from message where app_id = $1 order by id',
      [operatorAppId],
    )
  ).rows
    .map((r) => JSON.parse(r.payload) as { type: string; data: Record<string, unknown> })
    .filter((e) => e.data[key] === value)
    .map((e) => e.type);

test('an API process and a worker without the variable report endpoint changes and delivery trouble', async () => {
  const app = await createApp(t, 'tenant');
  const endpoint = await createEndpoint(t, app, { url: `${receiver.url}/flaky` });
  assert.deepEqual(await storedTypes('endpointId', endpoint), ['endpoint.created']);

  const message = await publishVia(t, app, { eventType: 'order.paid', payload: { n: 1 } });
  await waitFor(
    'four failures, then a success',
    async () => (await deliveryOf(t, message, endpoint))?.state === 'succeeded',
  );
  // Committed with the outcomes that caused them.
  assert.deepEqual(await storedTypes('msgId', message), [
    'message.attempt.failing',
    'message.attempt.recovered',
  ]);
  await waitFor('the events at the operator’s receiver', () =>
    receiver.requests.some((r) => r.path === '/operator' && r.body.includes('message.attempt.recovered')),
  );
});
