// An endpoint's throttleRate (Svix's `rateLimit`, requests a second) spaces the starts of its
// requests by 1 / throttleRate, for every worker (the slot the claim fills says when the next may
// start), and the worker comes back for the next delivery then, not at its next poll. An
// endpoint without one is not slowed.

import assert from 'node:assert/strict';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, test } from 'node:test';
import { createApp, createEndpoint, publishVia } from './support/fixtures.ts';
import { startTestHerald, type TestHerald } from './support/herald.ts';
import { type Receiver, startReceiver } from './support/receiver.ts';
import { waitFor } from './support/wait.ts';

const RATE = 5;
const SPACING_MS = 1000 / RATE;
const MESSAGES = 8;

let t: TestHerald;
let receiver: Receiver;

before(async () => {
  // A poll far apart: only the wake-up when the throttled slot opens again can keep the pace (the
  // run takes 1.4 s; its deadline below leaves room for a loaded machine, not for one poll).
  t = await startTestHerald('throttle', { env: { HERALD_POLL_INTERVAL_MS: '60000' } });
  receiver = await startReceiver();
});
after(async () => {
  await t.close();
  await receiver.close();
});

const startsOf = async (endpointId: string) =>
  (
    await t.database.db.query<{ startedAt: Date }>(
      'select started_at as "startedAt" from attempt where endpoint_id = $1 order by started_at',
      [endpointId],
    )
  ).rows.map((r) => r.startedAt.getTime());

const gaps = (times: number[]) => times.slice(1).map((time, i) => time - times[i]!);

test('a throttled endpoint gets its requests 1 / throttleRate apart, at that pace; another endpoint is not slowed', async () => {
  const app = await createApp(t, 'throttled');
  const throttled = await createEndpoint(t, app, { url: `${receiver.url}/throttled`, rateLimit: RATE });
  const free = await createEndpoint(t, app, { url: `${receiver.url}/free` });
  for (let n = 0; n < MESSAGES; n++) await publishVia(t, app, { eventType: 'e', payload: { n } });

  const arrivals = (path: string) => receiver.requests.filter((r) => r.path === path);
  await waitFor(
    `all ${MESSAGES} requests at the throttled endpoint, at its pace (not one per ${60} s poll)`,
    () => arrivals('/throttled').length === MESSAGES,
    30_000,
  );
  await waitFor('all requests at the other endpoint', () => arrivals('/free').length === MESSAGES);

  // By the database's clock, each claim came after the slot opened again.
  const starts = await startsOf(throttled);
  assert.equal(starts.length, MESSAGES);
  for (const gap of gaps(starts)) assert.ok(gap >= SPACING_MS, `attempts ${gap} ms apart`);
  // At the receiver, at that pace: each request leaves right after its claim, give or take the
  // send's own jitter on a busy host, so the whole run is spaced out, one spacing of slack aside.
  const arrived = arrivals('/throttled').map((r) => r.startedAt);
  const span = arrived.at(-1)! - arrived[0]!;
  assert.ok(span >= (MESSAGES - 2) * SPACING_MS, `${MESSAGES} requests over ${span} ms at the receiver`);

  // The other endpoint's slot never closes after its request.
  const { rows } = await t.database.db.query<{ nextStartAt: Date | null }>(
    'select next_start_at as "nextStartAt" from delivery_lease where endpoint_id = $1',
    [free],
  );
  assert.deepEqual(
    rows.map((r) => r.nextStartAt),
    [null],
  );
  assert.ok(
    gaps(await startsOf(free)).some((gap) => gap < SPACING_MS),
    'the endpoint without a throttle is not held to one',
  );
});

test('a request that waited for its origin’s connection is spaced from when it left, not from its claim', async () => {
  // One connection per origin, held by a slow request to another endpoint of the same origin.
  const queued = await startTestHerald('throttle_queued', {
    env: { HERALD_CONNECTIONS_PER_ORIGIN: '1', HERALD_POLL_INTERVAL_MS: '50' },
  });
  const arrivedAt: Record<string, number[]> = { '/slow': [], '/throttled': [] };
  const server = http.createServer((request, response) => {
    arrivedAt[request.url!]?.push(Date.now());
    request.resume();
    setTimeout(() => response.writeHead(204).end(), request.url === '/slow' ? 2000 : 0);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  try {
    const app = await createApp(queued, 'queued');
    await createEndpoint(queued, app, { url: `${origin}/slow`, filterTypes: ['slow'] });
    await createEndpoint(queued, app, { url: `${origin}/throttled`, filterTypes: ['paced'], rateLimit: 1 });
    await publishVia(queued, app, { eventType: 'slow', payload: {} });
    await waitFor('the slow request to hold the connection', () => arrivedAt['/slow']!.length === 1);
    // Claimed now, the first waits two seconds for the connection: its claim's spacing (1 s) has
    // run out by the time it leaves.
    for (const n of [1, 2]) await publishVia(queued, app, { eventType: 'paced', payload: { n } });
    await waitFor('both throttled requests', () => arrivedAt['/throttled']!.length === 2, 20_000);
    const [first, second] = arrivedAt['/throttled']!;
    assert.ok(second! - first! >= 900, `the throttled requests arrived ${second! - first!} ms apart`);
  } finally {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
    await queued.close();
  }
});
