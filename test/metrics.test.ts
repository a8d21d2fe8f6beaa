// GET /metrics: counters move by exactly what happened (publishes by face, intake claims, attempts
// by outcome, latencies), the database gauges describe the database, no object id ever appears,
// and an unreachable database leaves the counters readable with the gauges marked unknown.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { buildApi } from '../src/api/server.ts';
import { loadConfig } from '../src/config.ts';
import { insertApp } from '../src/db/apps.ts';
import { createPgDb } from '../src/db/pg-pool.ts';
import { LIBRARY_ACTOR } from '../src/engine/core.ts';
import { createEndpoint as createEndpointIn } from '../src/engine/endpoints.ts';
import { createHerald, createLogger } from '../src/herald.ts';
import { createMetrics, EXACT_COUNT_BELOW } from '../src/ops/metrics.ts';
import { EndpointIn } from '../src/schemas/svix.ts';
import { parseOrThrow } from '../src/schemas/validate.ts';
import { freshDatabase } from './support/database.ts';
import { createApp, createEndpoint, publishVia } from './support/fixtures.ts';
import { startTestHerald, type TestHerald, testEnv } from './support/herald.ts';
import { idMintedAt } from './support/ids.ts';
import { freePort, startHerald } from './support/processes.ts';
import { type Receiver, startReceiver } from './support/receiver.ts';
import { claimForTest, seedApp, seedEndpoint, seedMessage } from './support/seed.ts';
import { startTcpProxy } from './support/tcp-proxy.ts';
import { waitFor } from './support/wait.ts';

const SOURCE_SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';

let t: TestHerald;
let ok: Receiver;
let failing: Receiver;
let hangingUp: Receiver;

before(async () => {
  t = await startTestHerald('metrics');
  ok = await startReceiver(() => ({ status: 204 }));
  failing = await startReceiver(() => ({ status: 500 }));
  // Drops the connection after reading the request: the outcome is unknown.
  hangingUp = await startReceiver(() => 'destroy');
});
after(async () => {
  await t.close();
  await Promise.all([ok.close(), failing.close(), hangingUp.close()]);
});

type Samples = Map<string, number>;

/** Parses the Prometheus text format into `name{label="v",…}` (labels sorted) → value. */
function parse(text: string): Samples {
  const samples: Samples = new Map();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
    assert.ok(match, `not a sample line: ${line}`);
    const labels = [...(match[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)]
      .map(([, k, v]) => `${k}="${v}"`)
      .sort();
    samples.set(`${match[1]}{${labels.join(',')}}`, Number(match[3]));
  }
  return samples;
}

const key = (name: string, labels: Record<string, string> = {}) =>
  `${name}{${Object.entries(labels)
    .map(([k, v]) => `${k}="${v}"`)
    .sort()
    .join(',')}}`;

/** A sample's value; a series not exposed yet counts as 0 (counters with labels start absent). */
const value = (s: Samples, name: string, labels: Record<string, string> = {}) =>
  s.get(key(name, labels)) ?? 0;

async function scrape(): Promise<{ text: string; samples: Samples; contentType: string | null }> {
  // No authorization header: /metrics is public like /api/v1/health.
  const response = await fetch(`${t.url}/metrics`);
  assert.equal(response.status, 200);
  const text = await response.text();
  return { text, samples: parse(text), contentType: response.headers.get('content-type') };
}

/** A source's intake series for `outcome`, at 0, whatever the order of its labels. */
const zeroIntakeSeries = (source: string, outcome: string) =>
  new RegExp(
    `^herald_intake_claims_total\\{(source="${source}",outcome="${outcome}"|outcome="${outcome}",source="${source}")\\} 0$`,
    'm',
  );

test('counters and gauges move by exactly what happened; no ids are exposed', async () => {
  const first = await scrape();
  assert.match(first.contentType ?? '', /^text\/plain; version=0\.0\.4/);
  const b = first.samples;
  assert.equal(value(b, 'herald_metrics_database_up'), 1);

  const app = await createApp(t, 'metrics-shop');
  await createEndpoint(t, app, { url: `${ok.url}/ok`, filterTypes: ['order.ok'] });
  const failingEp = await createEndpoint(t, app, { url: `${failing.url}/fail`, filterTypes: ['order.fail'] });
  await createEndpoint(t, app, {
    url: `${hangingUp.url}/hup`,
    filterTypes: ['order.hup'],
    idempotent: false,
  });

  // API: three to the healthy receiver (one of them published twice with one idempotency key: the
  // replay is not a new message), one to the failing receiver, one to the receiver that hangs up.
  for (let i = 0; i < 3; i++) {
    await publishVia(t, app, { eventType: 'order.ok', payload: { i } }, { 'idempotency-key': `ok-${i}` });
  }
  await publishVia(t, app, { eventType: 'order.ok', payload: { i: 0 } }, { 'idempotency-key': 'ok-0' });
  await publishVia(t, app, { eventType: 'order.fail', payload: {} });
  await publishVia(t, app, { eventType: 'order.hup', payload: {} });
  // Library: one more to the healthy receiver.
  await t.herald.publish(app, { eventType: 'order.ok', payload: { via: 'library' } });
  // One to an app that does not exist: refused before the database, so not an item of any write.
  const missing = await t.call('POST', '/api/v1/app/metrics-no-such-app/msg', {
    eventType: 'order.ok',
    payload: {},
  });
  assert.equal(missing.status, 404, JSON.stringify(missing.body));

  // Ingest: one claim, one duplicate of it, one refused signature. Its event type has no endpoint.
  const source = await t.call('POST', '/api/v1/source', {
    uid: 'metrics-src',
    scheme: 'standard-webhooks',
    secret: SOURCE_SECRET,
    app: 'metrics-shop',
    eventType: 'order.relayed',
  });
  assert.equal(source.status, 201, JSON.stringify(source.body));
  // Its series are there at 0 before its first delivery, so that increase() sees the first one.
  assert.match((await scrape()).text, zeroIntakeSeries('metrics-src', 'rejected'));
  const body = '{"order":1}';
  const now = new Date();
  const signer = new Webhook(SOURCE_SECRET.slice('whsec_'.length));
  const headers = {
    'content-type': 'application/json',
    'webhook-id': 'evt_m1',
    'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
    'webhook-signature': signer.sign('evt_m1', now, body),
  };
  const ingest = (h: Record<string, string>) =>
    fetch(`${t.url}/ingest/metrics-src`, { method: 'POST', headers: h, body }).then((r) => r.status);
  assert.equal(await ingest(headers), 204);
  assert.equal(await ingest(headers), 204);
  assert.equal(await ingest({ ...headers, 'webhook-signature': 'v1,AAAA' }), 401);

  // 4 successes; 5 known failures, after which the endpoint is disabled and its delivery waits;
  // 1 unknown, parked as failed because that endpoint has no idempotency contract.
  await waitFor('every delivery to settle', async () => {
    const rows = await t.database.db.query<{ n: number }>(
      `select count(*)::int as n from delivery d join endpoint e on e.id = d.endpoint_id
        where (d.state = 'succeeded') or (d.state = 'failed' and not e.idempotent)
           or (d.state = 'pending' and e.disabled)`,
    );
    return rows.rows[0]!.n === 6;
  });
  // The counters move when the worker has its answer, a moment after the outcome's COMMIT.
  const a = await waitFor('the attempt counters', async () => {
    const { samples } = await scrape();
    return value(samples, 'herald_attempt_duration_seconds_count') -
      value(b, 'herald_attempt_duration_seconds_count') ===
      10
      ? samples
      : null;
  });
  const delta = (name: string, labels: Record<string, string> = {}) =>
    value(a, name, labels) - value(b, name, labels);

  assert.equal(delta('herald_messages_published_total', { via: 'api' }), 5);
  assert.equal(delta('herald_messages_published_total', { via: 'library' }), 1);
  assert.equal(delta('herald_messages_published_total', { via: 'ingest' }), 1);
  assert.equal(delta('herald_intake_claims_total', { source: 'metrics-src', outcome: 'claimed' }), 1);
  assert.equal(delta('herald_intake_claims_total', { source: 'metrics-src', outcome: 'duplicate' }), 1);
  assert.equal(delta('herald_intake_claims_total', { source: 'metrics-src', outcome: 'rejected' }), 1);
  assert.equal(delta('herald_attempts_total', { outcome: 'success', response_class: 'http_2xx' }), 4);
  assert.equal(delta('herald_attempts_total', { outcome: 'failure', response_class: 'http_5xx' }), 5);
  assert.equal(delta('herald_attempts_total', { outcome: 'unknown', response_class: 'connection_lost' }), 1);
  // One first attempt per delivery, each observed once although the failing one was retried.
  assert.equal(delta('herald_publish_to_first_attempt_seconds_count'), 6);
  assert.ok(delta('herald_publish_to_first_attempt_seconds_sum') >= 0);
  assert.equal(delta('herald_lease_recoveries_total'), 0);
  assert.equal(delta('herald_finalization_retries_total'), 0);
  // Every item of a batched write once: the API's six publishes (the replay included; not the one
  // to a missing app) and the library's one, the two receipts recorded (the claim and its duplicate's observation; the
  // refused one never reached the database), the ten outcomes; each write timed once.
  const batched = { publish: 7, intake: 2, outcome: 10 };
  for (const [write, items] of Object.entries(batched)) {
    assert.equal(delta('herald_batched_write_items_sum', { write }), items, `${write} items`);
    const writes = delta('herald_batched_write_items_count', { write });
    assert.ok(writes >= 1 && writes <= items, `${writes} ${write} writes for ${items} items`);
    assert.equal(delta('herald_batched_write_seconds_count', { write }), writes, `${write} writes timed`);
    assert.ok(delta('herald_batched_write_seconds_sum', { write }) > 0, `${write} write time`);
  }

  assert.equal(delta('herald_deliveries', { state: 'pending' }), 1);
  assert.equal(delta('herald_deliveries', { state: 'sending' }), 0);
  assert.equal(delta('herald_deliveries', { state: 'failed' }), 1);
  assert.equal(delta('herald_unknown_outcomes_parked'), 1);
  // Awaiting review since it was parked, a moment ago; a day and more once it is left that long.
  const oldestUnknown = value(a, 'herald_unknown_outcomes_oldest_seconds');
  assert.ok(oldestUnknown > 0 && oldestUnknown < 300, `oldest unknown ${oldestUnknown} s`);
  await t.database.db.query(
    `update delivery set updated_at = updated_at - interval '2 days'
      where id in (select delivery_id from delivery_failed where unknown_attempts > 0)`,
  );
  const leftAlone = value((await scrape()).samples, 'herald_unknown_outcomes_oldest_seconds');
  assert.ok(leftAlone >= 2 * 86_400, `oldest unknown ${leftAlone} s`);
  assert.equal(delta('herald_endpoints_disabled'), 1);
  assert.equal(delta('herald_endpoints_resting'), 0);
  // The waiting delivery belongs to a disabled endpoint: it is not "due and late".
  assert.equal(value(a, 'herald_oldest_due_delivery_age_seconds'), 0);

  // Re-enabled, the endpoint's delivery is due: the age gauge sees it until a worker takes it.
  // (Backdated first, while the endpoint is still disabled and no worker may take the delivery.)
  await t.database.db.query(
    `update delivery set next_attempt_at = now() - interval '90 seconds' where endpoint_id = $1`,
    [failingEp],
  );
  await t.database.db.query(`update endpoint set disabled = false, disabled_reason = null where id = $1`, [
    failingEp,
  ]);
  // It waited on purpose until the enable: its age counts from then, not from its due time.
  // (The worker may have already taken it again; then the age is 0 and that is right too.)
  const justEnabled = value((await scrape()).samples, 'herald_oldest_due_delivery_age_seconds');
  assert.ok(justEnabled < 60, `oldest due age ${justEnabled}, just enabled`);
  await t.database.db.query(`update endpoint set enabled_at = now() - interval '90 seconds' where id = $1`, [
    failingEp,
  ]);
  // Its wait counts from its last attempt too (a slow receiver's backlog is being served): those
  // that disabled it are backdated with the enable.
  await t.database.db.query(
    `update attempt set started_at = started_at - interval '90 seconds' where endpoint_id = $1`,
    [failingEp],
  );
  const age = value((await scrape()).samples, 'herald_oldest_due_delivery_age_seconds');
  assert.ok(age === 0 || age >= 90, `oldest due age ${age}`);

  // An endpoint resting for an hour (as a Retry-After of an hour rests it) is counted; a throttle's
  // spacing of a second or less is not.
  const resting = async () => value((await scrape()).samples, 'herald_endpoints_resting');
  const before = await resting();
  const restFor = (interval: string) =>
    t.database.db.query(
      `update delivery_lease set next_start_at = now() + $2::interval where endpoint_id = $1`,
      [failingEp, interval],
    );
  await restFor('1 hour');
  assert.equal(await resting(), before + 1);
  await restFor('0.5 seconds');
  assert.equal(await resting(), before);

  const { text } = await scrape();
  assert.doesNotMatch(text, /\b(msg|ep|app|dlv|atmpt|src|in)_[0-9a-f]{12}/, 'no object ids in metrics');
});

test('with the database unreachable, counters are served and the gauges say "unknown", not 0', async () => {
  const down = createPgDb({
    connectionString: `postgres://postgres@127.0.0.1:${await freePort()}/none`,
    max: 1,
  });
  try {
    const metrics = createMetrics(down);
    metrics.published('api');
    const text = await metrics.scrape();
    const samples = parse(text);
    assert.equal(value(samples, 'herald_messages_published_total', { via: 'api' }), 1);
    // Spelled as the exposition format and OpenMetrics have it, which strict parsers require.
    assert.match(text, /^herald_endpoints_disabled NaN$/m);
    assert.doesNotMatch(text, / Nan$/m);
    // The failures an alert watches are there at 0 before the first, so that increase() sees it.
    for (const responseClass of ['no_signing_secret', 'headers_unreadable', 'payload_expired']) {
      const series = key('herald_attempts_total', { outcome: 'failure', response_class: responseClass });
      assert.equal(samples.get(series), 0, series);
    }
    assert.equal(value(samples, 'herald_metrics_database_up'), 0);
    assert.ok(Number.isNaN(value(samples, 'herald_endpoints_disabled')));
    assert.ok(Number.isNaN(value(samples, 'herald_deliveries', { state: 'pending' })));
  } finally {
    await down.close();
  }
});

test('a database that hangs reads as down within the deadline, and scrapes meanwhile wait on the one query', async () => {
  // The gauges' query waits behind a lock as long as the lock is held: a database that does not
  // answer, on a real connection.
  let release!: () => void;
  const released = new Promise<void>((resolve) => {
    release = resolve;
  });
  let locked!: () => void;
  const lockTaken = new Promise<void>((resolve) => {
    locked = resolve;
  });
  const holding = t.database.db.transaction(async (tx) => {
    await tx.query('lock table delivery_lease in access exclusive mode');
    locked();
    await released;
  });
  let queries = 0;
  const metrics = createMetrics(
    {
      query: (text, params) => {
        queries++;
        return t.database.db.query(text, params);
      },
    },
    undefined,
    { snapshotDeadlineMs: 300 },
  );
  try {
    await lockTaken;
    const started = Date.now();
    const [one, two] = await Promise.all([metrics.scrape(), metrics.scrape()]);
    assert.ok(Date.now() - started < 10_000, 'answered without waiting for the database');
    for (const text of [one, two]) {
      const samples = parse(text);
      assert.equal(value(samples, 'herald_metrics_database_up'), 0);
      assert.ok(Number.isNaN(value(samples, 'herald_endpoints_disabled')));
    }
    // The next scrape, with the first query still waiting, joins it instead of starting another.
    assert.equal(value(parse(await metrics.scrape()), 'herald_metrics_database_up'), 0);
    assert.equal(queries, 1);
  } finally {
    release();
    await holding;
  }
  await waitFor('the gauges read again once the database answers', async () => {
    return value(parse(await metrics.scrape()), 'herald_metrics_database_up') === 1;
  });
});

test('an API process serves every source’s intake series from its start, at 0 before any delivery', async () => {
  // The source metrics-src exists (the first test made it); this process has received nothing.
  const config = loadConfig(testEnv(t.database.url));
  const other = await createHerald({ config, logger: createLogger('silent'), migrate: false });
  const api = await buildApi(other.core);
  try {
    const text = await other.core.metrics.scrape();
    for (const outcome of ['claimed', 'joined', 'duplicate', 'rejected'])
      assert.match(text, zeroIntakeSeries('metrics-src', outcome));

    // A source made elsewhere (another process, the CLI) gets its series once it is announced;
    // renamed, then deleted, its series go: their number stays the number of sources.
    const seriesOf = async (source: string) =>
      (await other.core.metrics.scrape()).split('\n').filter((l) => l.includes(`source="${source}"`)).length;
    const made = await t.call('POST', '/api/v1/source', {
      uid: 'made-elsewhere',
      scheme: 'standard-webhooks',
      secret: SOURCE_SECRET,
      app: 'metrics-shop',
      eventType: 'order.relayed',
    });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    await waitFor('the new source’s series at 0', async () => (await seriesOf('made-elsewhere')) === 4);
    assert.match(await other.core.metrics.scrape(), zeroIntakeSeries('made-elsewhere', 'rejected'));
    assert.equal(
      (await t.call('PATCH', `/api/v1/source/${made.body.id}`, { uid: 'renamed-elsewhere' })).status,
      200,
    );
    await waitFor('the renamed source’s series only', async () => {
      return (await seriesOf('made-elsewhere')) === 0 && (await seriesOf('renamed-elsewhere')) === 4;
    });
    assert.equal((await t.call('DELETE', `/api/v1/source/${made.body.id}`)).status, 204);
    await waitFor(
      'the deleted source’s series gone',
      async () => (await seriesOf('renamed-elsewhere')) === 0,
    );
    assert.equal(await seriesOf('metrics-src'), 4, 'the other sources keep theirs');
  } finally {
    await api.close();
    await other.close();
  }
});

test("past a million failed deliveries the gauge takes PostgreSQL's estimate, not a count at every scrape", async () => {
  const failedGauge = async () => {
    const line = /^herald_deliveries\{state="failed"\} (\S+)$/m.exec(
      await createMetrics(t.database.db).scrape(),
    );
    assert.ok(line, 'the gauge is scraped');
    return Number(line[1]);
  };
  const exact = await failedGauge();
  // What ANALYZE would say of a table that size (a superuser may set it; the next ANALYZE puts it back).
  await t.database.db.query(`update pg_class set reltuples = $1 where oid = 'delivery_failed'::regclass`, [
    EXACT_COUNT_BELOW * 2,
  ]);
  try {
    assert.equal(await failedGauge(), EXACT_COUNT_BELOW * 2);
  } finally {
    await t.database.db.query('analyze delivery_failed');
  }
  assert.equal(await failedGauge(), exact);
});

test('two heralds in one process keep separate registries', async () => {
  const other = createMetrics(t.database.db);
  other.published('library');
  other.published('library');
  const mine = parse(await t.herald.core.metrics.scrape());
  const theirs = parse(await other.scrape());
  assert.equal(value(theirs, 'herald_messages_published_total', { via: 'library' }), 2);
  assert.equal(value(mine, 'herald_messages_published_total', { via: 'library' }), 1);
});

test('a batched write with a value that is not a number is left out, never thrown after its commit', async () => {
  const metrics = createMetrics(t.database.db);
  metrics.batchWritten('publish', 3, 0.002);
  assert.doesNotThrow(() => metrics.batchWritten('publish', Number.NaN, 0.002));
  assert.doesNotThrow(() => metrics.batchWritten('publish', 3, Number.POSITIVE_INFINITY));
  const samples = parse(await metrics.scrape());
  assert.equal(value(samples, 'herald_batched_write_items_count', { write: 'publish' }), 1);
  assert.equal(value(samples, 'herald_batched_write_seconds_count', { write: 'publish' }), 1);
});

test('one scrape reads the database once, whatever the number of gauges', async () => {
  let queries = 0;
  const metrics = createMetrics({
    query: (text, params) => {
      queries++;
      return t.database.db.query(text, params);
    },
  });
  await metrics.scrape();
  assert.equal(queries, 1);
  // Concurrent scrapes share the query in flight.
  await Promise.all([metrics.scrape(), metrics.scrape()]);
  assert.equal(queries, 2);
});

test('a database outage during finalization counts its retries, and the lease recovery after it', async () => {
  // Its own database and worker, connected through a proxy that the receiver cuts just before it
  // answers; the outage outlasts the lease, so the outcome is given up and the lease recovered.
  const database = await freshDatabase('metrics_outage');
  const target = new URL(database.url);
  const proxy = await startTcpProxy({ host: target.hostname, port: Number(target.port || 5432) });
  const receiver = await startReceiver((_request, n) => {
    if (n === 1) {
      proxy.pause();
      proxy.cutAll();
    }
    return { status: 204 };
  });
  const config = loadConfig(
    testEnv(proxy.urlFor(database.url), { HERALD_LEASE_SECONDS: '2', HERALD_ATTEMPT_TIMEOUT_MS: '1500' }),
  );
  const herald = await createHerald({ config, logger: createLogger(config.logLevel), migrate: false });
  try {
    const app = await insertApp(database.db, {
      uid: 'outage',
      name: 'outage',
      throttleRate: null,
      metadata: {},
      retentionDays: null,
    });
    await database.db.transaction((tx) =>
      createEndpointIn(herald.core, tx, LIBRARY_ACTOR, app, parseOrThrow(EndpointIn, { url: receiver.url })),
    );
    const { message } = await herald.publish('outage', { eventType: 'invoice.paid', payload: {} });
    await herald.startWorker();
    await waitFor('the receiver to answer', () => receiver.requests.length === 1);
    await waitFor('the lease to be over by a second while the database is away', async () => {
      const rows = await database.db.query<{ over: number }>(
        `select extract(epoch from now() - lease_expires_at)::float8 as over from delivery where message_id = $1`,
        [message.id],
      );
      return (rows.rows[0]?.over ?? 0) > 1;
    });
    proxy.resume();
    await waitFor('the retry to succeed', async () => {
      const rows = await database.db.query(
        `select 1 from delivery where message_id = $1 and state = 'succeeded'`,
        [message.id],
      );
      return rows.rowCount === 1;
    });
    const samples = await waitFor('the success to be counted', async () => {
      const parsed = parse(await herald.core.metrics.scrape());
      return value(parsed, 'herald_attempts_total', { outcome: 'success', response_class: 'http_2xx' }) === 1
        ? parsed
        : null;
    });
    assert.ok(value(samples, 'herald_finalization_retries_total') >= 1);
    assert.equal(value(samples, 'herald_lease_recoveries_total'), 1);
    // The given-up outcome was never recorded by the worker, so it is not an attempt it counted.
    assert.equal(value(samples, 'herald_attempt_duration_seconds_count'), 1);
    // One first attempt, although the delivery was attempted twice.
    assert.equal(value(samples, 'herald_publish_to_first_attempt_seconds_count'), 1);
  } finally {
    proxy.resume();
    await herald.close();
    await receiver.close();
    await proxy.close();
    await database.drop();
  }
});

test('a worker-only process serves /metrics on HERALD_METRICS_PORT', async () => {
  const port = await freePort();
  const worker = await startHerald(
    'worker',
    testEnv(t.database.url, { HERALD_METRICS_PORT: String(port), LOG_LEVEL: 'info' }),
  );
  try {
    const response = await fetch(`http://127.0.0.1:${port}/metrics`);
    assert.equal(response.status, 200);
    assert.match(await response.text(), /herald_metrics_database_up 1/);
    assert.equal((await fetch(`http://127.0.0.1:${port}/api/v1/health`)).status, 204);
    assert.equal((await fetch(`http://127.0.0.1:${port}/api/v1/app`)).status, 404, 'no API on a worker');
  } finally {
    await worker.proc.kill('SIGTERM');
  }
});

/** An API process with a metrics port of its own (and `extra` settings). */
async function apiWithMetricsPort(extra: Record<string, string> = {}) {
  const [apiPort, metricsPort] = [await freePort(), await freePort()];
  const api = await startHerald(
    'api',
    testEnv(t.database.url, {
      PORT: String(apiPort),
      HERALD_METRICS_PORT: String(metricsPort),
      LOG_LEVEL: 'info',
      ...extra,
    }),
  );
  return { api, metricsPort };
}

test('an API process with HERALD_METRICS_PORT serves /metrics there only, not on its public port', async () => {
  const { api, metricsPort } = await apiWithMetricsPort();
  try {
    const scraped = await fetch(`http://127.0.0.1:${metricsPort}/metrics`);
    assert.equal(scraped.status, 200);
    assert.match(await scraped.text(), /herald_metrics_database_up 1/);
    assert.equal((await fetch(`${api.apiUrl}/metrics`)).status, 404);
    assert.equal((await fetch(`${api.apiUrl}/api/v1/health`)).status, 204, 'the API is there');
  } finally {
    await api.proc.kill('SIGTERM');
  }
});

test('HERALD_METRICS_HOST puts the metrics port on an address of its own, not on HOST', async () => {
  const { api, metricsPort } = await apiWithMetricsPort({ HERALD_METRICS_HOST: '127.0.0.2' });
  try {
    const scraped = await fetch(`http://127.0.0.2:${metricsPort}/metrics`);
    assert.equal(scraped.status, 200);
    // Nothing listens on that port at HOST's address.
    await assert.rejects(fetch(`http://127.0.0.1:${metricsPort}/metrics`), /fetch failed/);
    assert.equal((await fetch(`${api.apiUrl}/api/v1/health`)).status, 204, 'the API is on HOST');
  } finally {
    await api.proc.kill('SIGTERM');
  }
});

test('a lease that ran out and that nobody recovers is seen, from when it ran out; a live one is not', async () => {
  const database = await freshDatabase('metrics_expired_lease');
  try {
    const app = await seedApp(database.db, 'expired');
    await seedEndpoint(database.db, app.id, 'http://127.0.0.1:9/e');
    await seedMessage(database.db, app.id);
    const expired = async () => {
      const text = await createMetrics(database.db).scrape();
      return Number(/^herald_oldest_expired_lease_seconds (\S+)$/m.exec(text)?.[1]);
    };
    assert.equal(await expired(), 0, 'nothing leased');
    const [claim] = await claimForTest(database.db);
    assert.ok(claim, 'the delivery is leased');
    assert.equal(await expired(), 0, 'a live lease');
    // No worker runs here to recover it: the lease ran out 90 s ago, and stays.
    await database.db.query(
      `update delivery_lease set lease_expires_at = now() - interval '90 seconds' where delivery_id = $1`,
      [claim.deliveryId],
    );
    const age = await expired();
    assert.ok(age >= 90 && age < 120, `expired ${age} s ago`);
  } finally {
    await database.drop();
  }
});

test('a throttled endpoint’s oldest due delivery waits from when its slot last opened: a draining backlog is not late', async () => {
  const database = await freshDatabase('metrics_throttled');
  try {
    const app = await seedApp(database.db, 'throttled');
    const endpoint = await seedEndpoint(database.db, app.id, 'http://127.0.0.1:9/t');
    await seedMessage(database.db, app.id);
    await database.db.query(`update delivery_due set next_attempt_at = now() - interval '90 seconds'`);
    const oldest = async () => {
      const text = await createMetrics(database.db).scrape();
      return Number(/^herald_oldest_due_delivery_age_seconds (\S+)$/m.exec(text)?.[1]);
    };
    assert.ok((await oldest()) >= 90, 'without a throttle, the wait is seen');
    await database.db.query('update endpoint set throttle_rate = 1 where id = $1', [endpoint.id]);
    const slotOpened = (ago: string) =>
      database.db.query(
        `insert into delivery_lease (endpoint_id, next_start_at) values ($1, now() - $2::interval)
         on conflict (endpoint_id) do update set next_start_at = excluded.next_start_at`,
        [endpoint.id, ago],
      );
    await slotOpened('5 seconds');
    const draining = await oldest();
    assert.ok(draining >= 5 && draining < 30, `a backlog that drains: ${draining} s`);
    await slotOpened('2 minutes');
    assert.ok((await oldest()) >= 90, 'a backlog nobody serves is seen');

    // A backlog draining one request at a time to a slow receiver is served, at the receiver's
    // pace: its wait counts from the endpoint's last start, as the doctor counts it, and its alert
    // does not page for a slow tenant.
    await database.db.query('update endpoint set throttle_rate = null where id = $1', [endpoint.id]);
    const served = await database.db.query<{ id: string }>(
      `insert into attempt (id, app_id, delivery_id, message_id, endpoint_id, cycle, lease_token, trigger, url,
                            started_at, finished_at, outcome, status_code)
       select $2, d.app_id, d.id, d.message_id, d.endpoint_id, 1, gen_random_uuid(), 'scheduled', d.endpoint_id,
              now() - interval '5 seconds', now(), 'success', 204
         from delivery d where d.endpoint_id = $1 returning id`,
      [endpoint.id, idMintedAt('atmpt', Date.now() - 5_000)],
    );
    const slow = await oldest();
    assert.ok(slow >= 5 && slow < 30, `a backlog a slow receiver drains: ${slow} s`);
    await database.db.query('delete from attempt where id = $1', [served.rows[0]!.id]);
    assert.ok((await oldest()) >= 90, 'unserved again');
  } finally {
    await database.drop();
  }
});

test('the oldest due delivery is found among the endpoints with due work, whatever their order; a disabled endpoint’s, a deferred row past due and a held one are judged as ever', async () => {
  const database = await freshDatabase('metrics_oldest_due');
  try {
    const app = await seedApp(database.db, 'oldest');
    const endpoints = [];
    for (let i = 0; i < 6; i++)
      endpoints.push(await seedEndpoint(database.db, app.id, `http://127.0.0.1:9/${i}`));
    // Three messages: three due rows per endpoint, none attempted.
    for (let i = 0; i < 3; i++) await seedMessage(database.db, app.id);
    const oldest = async () => {
      const text = await createMetrics(database.db).scrape();
      return Number(/^herald_oldest_due_delivery_age_seconds (\S+)$/m.exec(text)?.[1]);
    };
    const dueAgo = (endpoint: string, seconds: number) =>
      database.db.query(
        `update delivery_due set next_attempt_at = now() - make_interval(secs => $2)
          where delivery_id = (select min(delivery_id) from delivery_due where endpoint_id = $1)`,
        [endpoint, seconds],
      );
    // The fourth endpoint's row is the oldest, behind the others' in the walk's order.
    await dueAgo(endpoints[1]!.id, 100);
    await dueAgo(endpoints[3]!.id, 300);
    await dueAgo(endpoints[5]!.id, 200);
    const found = await oldest();
    assert.ok(found >= 300 && found < 330, `oldest ${found} s`);
    // A disabled endpoint's backlog waits on purpose.
    await database.db.query(
      "update endpoint set disabled = true, disabled_reason = 'operator' where id = $1",
      [endpoints[3]!.id],
    );
    const withoutDisabled = await oldest();
    assert.ok(withoutDisabled >= 200 && withoutDisabled < 230, `oldest ${withoutDisabled} s`);
    /** Moves the endpoint's newest due row to the deferred table, due `seconds` ago. */
    const deferredDue = async (endpoint: string, seconds: number, held: boolean) => {
      await database.db.query(
        `with moved as (
           delete from delivery_due
            where endpoint_id = $1 and delivery_id = (select max(delivery_id) from delivery_due where endpoint_id = $1)
           returning endpoint_id, delivery_id
         )
         insert into delivery_deferred (endpoint_id, next_attempt_at, delivery_id, held)
         select endpoint_id, now() - make_interval(secs => $2), delivery_id, $3 from moved`,
        [endpoint, seconds, held],
      );
    };
    // A row that came due while still deferred (its tending late) is due too.
    await deferredDue(endpoints[0]!.id, 400, false);
    const deferred = await oldest();
    assert.ok(deferred >= 400 && deferred < 430, `oldest ${deferred} s`);
    // So is one still held for an endpoint enabled again (its release late): due, and unserved.
    await deferredDue(endpoints[2]!.id, 500, true);
    const held = await oldest();
    assert.ok(held >= 500 && held < 530, `oldest ${held} s`);
  } finally {
    await database.drop();
  }
});
