// A change to an endpoint reaches the requests a worker has claimed but not yet sent: they wait for
// a place at their origin (here one connection, held by a slow request), and one whose endpoint
// was deleted, disabled, moved or had its secret revoked is given back unsent when its turn comes,
// to go out as the endpoint is now — or not at all (migration 0045).

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Webhook } from 'svix';
import { steadyNow } from '../src/domain/steady-clock.ts';
import { createEndpointChanges } from '../src/worker/endpoint-changes.ts';
import { createApp, createEndpoint, deliveryOf, publishVia } from './support/fixtures.ts';
import { startTestHerald, type TestHerald } from './support/herald.ts';
import { type Receiver, startReceiver } from './support/receiver.ts';
import { waitFor } from './support/wait.ts';

const OLD_SECRET = 'whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD';
const NEW_SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';

let t: TestHerald;
let receiver: Receiver;

before(async () => {
  // The first request to /slow is held until the test lets it go: it keeps the origin's one
  // connection, and every other request claimed meanwhile waits behind it.
  receiver = await startReceiver((request) =>
    request.path === '/slow' && receiver.requests.filter((r) => r.path === '/slow').length === 1
      ? 'hold'
      : { status: 204 },
  );
  t = await startTestHerald('endpoint_changes', { env: { HERALD_CONNECTIONS_PER_ORIGIN: '1' } });
});
after(async () => {
  await t.close();
  await receiver.close();
});

const paths = () => receiver.requests.map((r) => r.path);

test('requests waiting for their origin go out as their endpoint is now: not deleted, not disabled, not to an old URL, not under a revoked secret', async () => {
  const app = await createApp(t, 'changes');
  await createEndpoint(t, app, { url: `${receiver.url}/slow` });
  const main = { filterTypes: ['e.main'] };
  const deleted = await createEndpoint(t, app, { ...main, url: `${receiver.url}/deleted` });
  const moved = await createEndpoint(t, app, { ...main, url: `${receiver.url}/moved-old` });
  const rotated = await createEndpoint(t, app, {
    ...main,
    url: `${receiver.url}/rotated`,
    secret: OLD_SECRET,
  });
  const disabled = await createEndpoint(t, app, { ...main, url: `${receiver.url}/disabled` });

  await publishVia(t, app, { eventType: 'e.slow', payload: {} });
  await waitFor('the slow request to hold the connection', () => paths().includes('/slow'));
  const msg = await publishVia(t, app, { eventType: 'e.main', payload: { n: 1 } });
  await waitFor('the four deliveries to be claimed and waiting', async () => {
    const states = await Promise.all([deleted, moved, rotated, disabled].map((ep) => deliveryOf(t, msg, ep)));
    return states.every((d) => d?.state === 'sending');
  });

  const answers = await Promise.all([
    t.call('DELETE', `/api/v1/app/${app}/endpoint/${deleted}`),
    t.call('PATCH', `/api/v1/app/${app}/endpoint/${moved}`, { url: `${receiver.url}/moved-new` }),
    t.call('POST', `/api/v1/app/${app}/endpoint/${rotated}/secret/rotate`, {
      key: NEW_SECRET,
      gracePeriodSeconds: 0,
    }),
    t.call('PATCH', `/api/v1/app/${app}/endpoint/${disabled}`, { disabled: true }),
  ]);
  assert.deepEqual(
    answers.map((a) => a.status),
    [204, 200, 204, 200],
  );
  assert.deepEqual(paths(), ['/slow'], 'nothing else left while the connection was held');
  receiver.release();

  const toRotated = await waitFor('the rotated endpoint’s request', () =>
    receiver.requests.find((r) => r.path === '/rotated'),
  );
  await waitFor('the moved endpoint’s request', () => paths().includes('/moved-new'));
  const headers = Object.fromEntries(
    ['webhook-id', 'webhook-timestamp', 'webhook-signature'].map((h) => [h, String(toRotated.headers[h])]),
  );
  assert.deepEqual(new Webhook(NEW_SECRET).verify(toRotated.body, headers), { n: 1 });
  assert.throws(
    () => new Webhook(OLD_SECRET).verify(toRotated.body, headers),
    'the revoked secret signs nothing',
  );

  // The disabled endpoint's delivery waits, its budget whole: enabled, it goes out, once.
  await waitFor(
    'the disabled endpoint’s lease given back',
    async () => (await deliveryOf(t, msg, disabled))?.state === 'pending',
  );
  assert.equal(
    (await t.call('PATCH', `/api/v1/app/${app}/endpoint/${disabled}`, { disabled: false })).status,
    200,
  );
  await waitFor('the enabled endpoint’s request', () => paths().includes('/disabled'));
  const sent = await waitFor('its attempt recorded', async () => {
    const d = await deliveryOf(t, msg, disabled);
    return d?.state === 'succeeded' && d;
  });
  assert.equal(sent.attempts_total, 1, 'the withdrawn request left no attempt behind');

  assert.deepEqual(
    paths().filter((p) => p === '/deleted' || p === '/moved-old'),
    [],
    'nothing went to a deleted endpoint or an old URL',
  );
  const scraped = await t.herald.core.metrics.scrape();
  assert.match(scraped, /herald_attempts_not_sent_total\{reason="endpoint_changed"\} 4\b/);
});

test('what a worker heard: a change counts for claims sent before it; a listener back from a loss counts as every endpoint changed; old changes are forgotten after a lease', async () => {
  const changes = createEndpointChanges(50);
  const before = steadyNow();
  changes.heard('ep_a');
  assert.equal(changes.changedSince('ep_a', before), true, 'a claim sent before the change');
  assert.equal(changes.changedSince('ep_b', before), false, 'another endpoint');
  await waitFor('a moment to pass', () => steadyNow() > before + 1);
  assert.equal(changes.changedSince('ep_a', steadyNow()), false, 'a claim sent after it');
  const beforeLoss = steadyNow();
  changes.heard('');
  assert.equal(
    changes.changedSince('ep_b', beforeLoss),
    true,
    'whatever changed while it was away went unheard',
  );
  await waitFor('a lease to pass', () => steadyNow() > beforeLoss + 60);
  changes.forgetOld();
  assert.equal(changes.changedSince('ep_a', before), true, 'still covered by the loss');
  const fresh = createEndpointChanges(50);
  const heardAt = steadyNow();
  fresh.heard('ep_a');
  await waitFor('a lease to pass', () => steadyNow() > heardAt + 60);
  fresh.forgetOld();
  assert.equal(fresh.changedSince('ep_a', heardAt), false, 'forgotten: no lease is that old');
});
