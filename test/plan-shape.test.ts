// The claim, the outcome write, publishing and the recording of inbound receipts run on every
// delivery, message or receipt, from connections that live for days. PostgreSQL caches one plan
// per statement per connection; made while a table is nearly empty (or for the 100 rows it assumes
// a JSON array holds), a cached plan once read the whole attempt table for every recorded outcome,
// and every endpoint of every app for every publish, for as long as the connection lived.
// Migrations 0004 and 0005 pin the shape of these plans (index lookups, nested loops). This test
// caches the plans on nearly empty tables, grows the tables well past that, and reads the plans
// the same connection then runs (auto_explain): no sequential scan of a hot table.

import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { messageIdsInWindow } from '../src/db/evidence.ts';
import { purgeAppHistory, purgeEndpointDeliveries } from '../src/db/history-purge.ts';
import { recordReceipts } from '../src/db/intake.ts';
import { findMessage, listMessages, publishMessages } from '../src/db/messages.ts';
import { asQueryable } from '../src/db/port.ts';
import { expireOldPayloads, pruneFinishedHistory } from '../src/db/retention.ts';
import { type Finding, runDoctor } from '../src/ops/doctor.ts';
import { createMetrics } from '../src/ops/metrics.ts';
import { failingSince } from '../src/ops/operational-webhooks.ts';
import { freshDatabase, type TestDatabase } from './support/database.ts';
import { newMessage, seedApp, seedEndpoint, seedMessage, seedReceipt, seedSource } from './support/seed.ts';

let database: TestDatabase;
let client: pg.Client;

before(async () => {
  database = await freshDatabase('plan_shape');
  client = new pg.Client({ connectionString: database.url });
  await client.connect();
});
after(async () => {
  await client.end();
  await database.drop();
});

/** The tables every claim and outcome reads; the queue tables (0015) follow each delivery. */
const HOT_TABLES = 'delivery|delivery_due|delivery_lease|delivery_failed|attempt|message|endpoint';

interface Claimed {
  delivery_id: string;
  lease_token: string;
  endpoint_id: string;
}

/** Publishes `messages` messages to every endpoint of the app, straight into the tables. */
async function backlog(appId: string, messages: number): Promise<void> {
  await client.query(
    `with m as (
       insert into message (app_id, event_type, payload, payload_expires_at)
       select $1, 'e', '{}', now() + interval '1 day' from generate_series(1, $2) returning id
     )
     insert into delivery (app_id, message_id, endpoint_id, next_attempt_at)
     select $1, m.id, e.id, now() from m cross join endpoint e where e.app_id = $1`,
    [appId, messages],
  );
}

/** An app with 20,000 messages published now (their payloads kept 30 days), and statistics on them. */
async function appWithHistory(uid: string): Promise<string> {
  const app = await seedApp(database.db, uid);
  await client.query(
    `insert into message (app_id, event_type, payload, payload_expires_at)
     select $1, 'e', '{}', now() + interval '30 days' from generate_series(1, 20000)`,
    [app.id],
  );
  await client.query('analyze message');
  return app.id;
}

/** One claim of up to `batch` deliveries and the outcomes of all of them: both functions run. */
async function claimAndRecord(batch: number, cursor: string): Promise<string> {
  const claimed = await client.query<Claimed>(
    `select delivery_id, lease_token, endpoint_id from herald_claim($1, interval '30 seconds', $2)`,
    [batch, cursor],
  );
  const items = claimed.rows.map((c) => ({
    delivery_id: c.delivery_id,
    lease_token: c.lease_token,
    outcome: 'success',
    status_code: 204,
    response_class: 'http_2xx',
    response_body: '',
    duration_ms: 1,
    next_attempt_at: null,
    disable_endpoint: null,
    credentials_rejected: false,
  }));
  await client.query('select * from herald_record_outcomes($1::jsonb, 5)', [JSON.stringify(items)]);
  return claimed.rows.at(-1)?.endpoint_id ?? '';
}

test('claim and outcome plans cached on nearly empty tables never scan a grown hot table', async () => {
  const app = await seedApp(database.db, 'plans');
  for (let i = 0; i < 20; i++) await seedEndpoint(database.db, app.id, 'http://127.0.0.1:1/x');

  // Nearly empty tables: the plans this connection caches now are the ones it keeps. Statistics
  // taken then (an autovacuum ANALYZE while nothing is in flight) say the lease table is empty.
  await backlog(app.id, 1);
  await client.query('analyze');
  let cursor = '';
  for (let i = 0; i < 10; i++) cursor = await claimAndRecord(2, cursor);

  // Grown well past that, without an ANALYZE in between (autovacuum may lag far behind).
  await backlog(app.id, 1500);
  for (let i = 0; i < 300; i++) cursor = await claimAndRecord(20, cursor);
  const attempts = await client.query<{ n: number }>('select count(*)::int as n from attempt');
  assert.ok(attempts.rows[0]!.n >= 5000, `the attempt table grew (${attempts.rows[0]!.n} rows)`);

  // Leases of other workers in flight, which each claim must step around, endpoint by endpoint.
  for (let i = 0; i < 30; i++) await seedEndpoint(database.db, app.id, 'http://127.0.0.1:1/x');
  await backlog(app.id, 2);
  const held = await client.query(`select 1 from herald_claim(30, interval '10 minutes', $1)`, [cursor]);
  assert.equal(held.rowCount, 30);

  const plans = await explained(() => claimAndRecord(20, cursor));
  // Besides the two calls: the statements inside the functions (claim 2, outcome write 3 or more).
  const inside = plans.filter((p) => !/Query Text: select .* from herald_/.test(p));
  assert.ok(inside.length >= 4, `the functions' own statements were explained (${plans.length} plans)`);
  assertNoScans(plans, new RegExp(`Seq Scan on (${HOT_TABLES})\\b`, 'g'));
  assertNoWholeIndexScans(plans, new RegExp(`^(${HOT_TABLES})$`));
  // Matching each row of the batch against every other (a join of two batch-sized sets under the
  // pinned nested loops), or against every lease in flight, costs the square of the batch.
  assertNoJoinFilterBeyond(plans, 20);
  assertNoArrayFilters(plans);

  // Planned again on the grown tables' statistics (as after an autovacuum ANALYZE), the same holds,
  // and "has due work" stops at the first index entry: a bitmap scan reads all of them, then the heap.
  await client.query(
    'analyze delivery, delivery_due, delivery_lease, delivery_failed, attempt, message, endpoint',
  );
  await client.query('discard plans');
  const replanned = await explained(() => claimAndRecord(20, cursor));
  assert.ok(
    replanned.length >= 6,
    `the functions' own statements were explained (${replanned.length} plans)`,
  );
  assertNoScans(replanned, new RegExp(`(Seq|Bitmap Heap) Scan on (${HOT_TABLES})\\b`, 'g'));
  assertNoWholeIndexScans(replanned, new RegExp(`^(${HOT_TABLES})$`));
  assertNoJoinFilterBeyond(replanned, 20);
  // The outcome write finds each delivery by its id: walking the in-flight index instead costs
  // every lease in flight, of every worker, for each item.
  const outcomeWrite = plans.filter((p) => p.includes('update delivery u') && p.includes('x.lease_token'));
  assert.equal(outcomeWrite.length, 1, 'the outcome write was explained');
  const deliveryReads = outcomeWrite[0]!.match(/Scan using \S+ on delivery u\b/g);
  assert.deepEqual(deliveryReads, ['Scan using delivery_pkey on delivery u']);
});

test('publish and receipt plans cached on nearly empty tables never scan a grown table', async () => {
  const db = asQueryable(client);
  const app = await seedApp(database.db, 'plans-publish');
  await seedEndpoint(database.db, app.id, 'http://127.0.0.1:1/p');
  const source = await seedSource(database.db, app.id, 'plans-source');
  const publishAndReceive = async (key: string, deliveryId: string) => {
    await publishMessages(db, [
      { ...newMessage(app.id, { idempotencyKey: key, requestHash: Buffer.alloc(32) }), actor: 'test' },
    ]);
    await recordReceipts(db, [seedReceipt(source.id, deliveryId)], 90);
  };
  // Cached on small tables, as ANALYZE last saw them (the test above left ~50 endpoints, no
  // receipt, one source): new keys and repeated ones (a replay and a duplicate).
  await client.query('analyze');
  await client.query('discard plans');
  for (let n = 0; n < 10; n++) await publishAndReceive(`k${n % 7}`, `d${n % 5}`);

  // Other tenants grow the tables: thousands of endpoints, messages and claims.
  const other = await seedApp(database.db, 'plans-other');
  await client.query(
    `insert into endpoint (app_id, url) select $1, 'http://127.0.0.1:1/o' from generate_series(1, 3000)`,
    [other.id],
  );
  await client.query(
    `insert into message (app_id, event_type, payload, payload_expires_at, idempotency_key)
     select $1, 'e', '{}', now() + interval '1 day', 'o' || g from generate_series(1, 20000) g`,
    [other.id],
  );
  await client.query(
    `insert into intake (source_id, app_id, delivery_id, business_key, body_sha256)
     select $1, $2, 'o' || g, 'o' || g, '\\x00' from generate_series(1, 20000) g`,
    [source.id, app.id],
  );

  const plans = await explained(async () => {
    await publishAndReceive('k1', 'd1'); // a replay and a duplicate
    await publishAndReceive('k-new', 'd-new'); // a new message and a new claim
  });
  for (const inner of ['insert into message (', 'insert into intake (', 'insert into intake_observation (']) {
    assert.ok(
      plans.some((p) => p.includes(inner)),
      `the statement doing "${inner}…" inside the functions was explained (${plans.length} plans)`,
    );
  }
  assertNoScans(plans, /Seq Scan on (endpoint|message|intake|app|source|delivery)\b/g);
  assertNoWholeIndexScans(plans, /^(endpoint|message|intake|app|source|delivery)$/);

  // A group commit of many publishes: the batch's own sets are matched by key, not pairwise.
  const batch = Array.from({ length: 40 }, () => ({ ...newMessage(app.id), actor: 'test' }));
  const batchPlans = await explained(() => publishMessages(db, batch));
  assertNoJoinFilterBeyond(batchPlans, batch.length);
});

test("giving back a claim's leases walks the leases in flight once and finds each delivery by its id", async () => {
  // The tables are grown by the tests above; this connection plans the give-back now.
  const app = await seedApp(database.db, 'give_back');
  for (let i = 0; i < 20; i++) await seedEndpoint(database.db, app.id, 'http://127.0.0.1:1/x');
  await backlog(app.id, 200);
  const claimId = crypto.randomUUID();
  const claimed = await client.query(`select 1 from herald_claim(20, interval '30 seconds', '', $1)`, [
    claimId,
  ]);
  assert.equal(claimed.rowCount, 20);

  let released = 0;
  const plans = await explained(async () => {
    const result = await client.query<{ n: number }>('select herald_release_claim($1) as n', [claimId]);
    released = result.rows[0]!.n;
  });
  assert.equal(released, 20);
  assertNoScans(plans, /Seq Scan on (delivery|attempt)\b/g);
  const walk = plans.filter((p) => p.includes('a.claim_id = claim'));
  assert.equal(walk.length, 1, 'the walk of the leases in flight was explained');
  assert.match(walk[0]!, /delivery_one_in_flight/);
  const giveBacks = plans.filter((p) => p.includes('update delivery d'));
  assert.equal(giveBacks.length, 20, 'each lease was given back by its own update');
  for (const plan of giveBacks) {
    assert.match(plan, /Index Scan using delivery_pkey on delivery d/);
    assert.doesNotMatch(plan, /delivery_one_in_flight/);
  }
  // Each lease's attempt is found through its delivery: the attempt history is never walked.
  assertNoWholeIndexScans(plans, /^attempt$/);
});

test("lease recovery walks the slots and finds each expired lease's delivery and attempt by key", async () => {
  const app = await seedApp(database.db, 'recovery');
  for (let i = 0; i < 5; i++) await seedEndpoint(database.db, app.id, 'http://127.0.0.1:1/x');
  await backlog(app.id, 2);
  const claimed = await client.query<{ delivery_id: string }>(
    `select delivery_id from herald_claim(5, interval '30 seconds', '')`,
  );
  assert.equal(claimed.rowCount, 5);
  // Their worker died: the leases ran out.
  await client.query(
    `update delivery set lease_expires_at = now() - interval '1 second' where id = any($1::text[])`,
    [claimed.rows.map((r) => r.delivery_id)],
  );
  // Many endpoints, and statistics that autovacuum took in a busy minute, when every slot held
  // a lease that has expired since: the planner then expects every slot to be expired. A plan free
  // to choose hashed the slots and read every delivery ever made to probe them, at every pass of
  // every worker's recovery (85 ms a pass with 1,000 endpoints and 100,000 deliveries).
  await client.query(
    `with e as (insert into endpoint (app_id, url) select $1, 'http://127.0.0.1:1/x'
                  from generate_series(1, 2000) returning id)
     insert into delivery_lease (endpoint_id, delivery_id, lease_expires_at)
     select id, 'dlv_ended_' || id, now() - interval '1 minute' from e`,
    [app.id],
  );
  await client.query('analyze delivery, delivery_lease');
  await client.query(
    `update delivery_lease set delivery_id = null, lease_expires_at = null where delivery_id like 'dlv_ended_%'`,
  );
  let recovered = 0;
  const plans = await explained(async () => {
    recovered =
      (await client.query("select * from herald_recover_expired_leases('{0,0,0,0,0,0,0}', 0, 100)"))
        .rowCount ?? 0;
  });
  assert.equal(recovered, 5);
  assertNoScans(plans, /Seq Scan on (delivery|attempt)\b/g);
  const marking = plans.filter((p) => p.includes('update attempt a'));
  assert.equal(marking.length, 1, 'the marking of the attempts was explained');
  assertNoScans(marking, /Seq Scan on attempt\b/g);
  assertNoWholeIndexScans(marking, /^attempt$/);
  assert.doesNotMatch(marking[0]!, /attempt_one_per_lease/);
});

test('a metrics scrape and the doctor read the failed deliveries, never the attempt history', async (ctx) => {
  const app = await seedApp(database.db, 'parked');
  for (let i = 0; i < 300; i++) await seedEndpoint(database.db, app.id, 'http://127.0.0.1:1/x');
  // 300 deliveries parked as failed after four known failures each: history with nothing to review.
  await client.query(
    `with m as (insert into message (app_id, event_type, payload, payload_expires_at)
                values ($1, 'e', '{}', now() + interval '1 day') returning id),
          d as (insert into delivery (app_id, message_id, endpoint_id, state, attempts_in_cycle, attempts_total)
                select $1, m.id, e.id, 'failed', 4, 4 from m cross join endpoint e where e.app_id = $1
                returning id, app_id, message_id, endpoint_id)
     insert into attempt (app_id, delivery_id, message_id, endpoint_id, cycle, lease_token, trigger, url,
                          finished_at, outcome, status_code)
     select d.app_id, d.id, d.message_id, d.endpoint_id, 1, gen_random_uuid(), 'scheduled', 'http://127.0.0.1:1/x',
            now(), 'failure', 500
       from d cross join generate_series(1, 4)`,
    [app.id],
  );
  // And a long history of failed deliveries, as months of it would leave (their rows only: the
  // gauges of unknown outcomes must find the few parked ones without reading them).
  await client.query(
    `insert into delivery_failed (endpoint_id, delivery_id)
     select 'ep_history', 'dlv_history_' || n from generate_series(1, 20000) n`,
  );
  ctx.after(() => client.query(`delete from delivery_failed where endpoint_id = 'ep_history'`));
  // One more parked by the outcome write itself: its last attempt's outcome is unknown.
  const risky = await seedEndpoint(database.db, app.id, 'http://127.0.0.1:1/risky', false);
  await publishMessages(asQueryable(client), [
    { ...newMessage(app.id), onlyEndpointId: risky.id, actor: 'test' },
  ]);
  // The newest endpoint (ids follow time): the claim's round robin starts after the one before it.
  const claimed = await client.query<Claimed & { attempt_id: string }>(
    `select delivery_id, lease_token, endpoint_id, attempt_id
       from herald_claim(1, interval '30 seconds', (select max(id) from endpoint where id <> $1))`,
    [risky.id],
  );
  assert.equal(claimed.rows[0]?.endpoint_id, risky.id);
  const [unknown] = claimed.rows;
  await client.query('select * from herald_record_outcomes($1::jsonb, 5)', [
    JSON.stringify([
      {
        delivery_id: unknown!.delivery_id,
        lease_token: unknown!.lease_token,
        outcome: 'unknown',
        status_code: null,
        response_class: 'connection_lost',
        response_body: '',
        duration_ms: 1,
        next_attempt_at: null,
        disable_endpoint: null,
        credentials_rejected: false,
      },
    ]),
  ]);
  await client.query('analyze');

  let scraped = '';
  const scrapePlans = await explained(async () => {
    scraped = await createMetrics(asQueryable(client)).scrape();
  });
  assert.match(scraped, /^herald_unknown_outcomes_parked 1$/m);
  assert.ok(
    scrapePlans.some((p) => p.includes('delivery_failed')),
    'the gauges were read in this connection',
  );
  // Reading a table of the history makes a scrape's cost grow with it (every attempt ever made):
  // only the newest attempt of an endpoint with due work (UNSERVED_SINCE) and the deliveries
  // parked with unknown attempts are looked up, by key.
  assertNoScans(scrapePlans, /\bon message\b|(Seq|Bitmap Heap) Scan on (attempt|delivery)\b/g);
  assertNoWholeIndexScans(scrapePlans, /^(attempt|delivery)$/);
  // The parked ones by their index (0042); all the failed rows only for their count, below the
  // size from which the gauge takes PostgreSQL's estimate.
  assert.match(
    scrapePlans.join('\n'),
    /Index (Only )?Scan using delivery_failed_unknown_idx on delivery_failed u\b/,
  );
  assert.match(scraped, /^herald_deliveries\{state="failed"\} 20301$/m);
  const deliveryReads = scrapePlans.flatMap((p) => p.match(/Scan.* on delivery\b.*/g) ?? []);
  assert.ok(
    deliveryReads.length === 1 && /^Scan using delivery_pkey on delivery .*loops=1\)/.test(deliveryReads[0]!),
    `one delivery looked up, the one parked with an unknown attempt:\n${deliveryReads.join('\n')}`,
  );

  let findings: Finding[] = [];
  const doctorPlans = await explained(async () => {
    findings = await runDoctor(asQueryable(client), {
      settleSeconds: 0,
      dueSeconds: 3600,
      leaseGraceSeconds: 3600,
      unknownReviewSeconds: 0,
      lookbackSeconds: 86_400,
    });
  });
  const review = findings.find((f) => f.check === 'unknown_outcomes_unreviewed');
  assert.equal(review?.count, 1);
  assert.deepEqual(review?.examples, [unknown!.attempt_id]);
  // The attempts are looked up for the one delivery that counted an unknown one, by its index.
  const attemptReads = doctorPlans
    .filter((p) => p.includes('unknown_attempts'))
    .flatMap((p) => p.match(/(Seq|Index|Index Only|Bitmap Heap) Scan.* on attempt\b.*/g) ?? []);
  assert.equal(attemptReads.length, 1, doctorPlans.join('\n---\n'));
  assert.match(attemptReads[0]!, /Index Scan using attempt_delivery_idx on attempt .*loops=1\)/);
});

test('retention finds the expired payloads and the old messages by index, never reading the history', async () => {
  // Every worker runs payload retention once a minute, and the history holds every message ever
  // published: 20,000 of them, none due.
  await appWithHistory('retention');
  let expired = -1;
  let pruned = -1;
  const plans = await explained(async () => {
    expired = await expireOldPayloads(asQueryable(client));
    await client.query('begin');
    pruned = await pruneFinishedHistory(asQueryable(client), 30);
    await client.query('commit');
  });
  assert.deepEqual([expired, pruned], [0, 0]);
  assert.equal(plans.length, 2, 'both runs were explained');
  assertNoScans(plans, /Seq Scan on message\b/g);
  assertNoWholeIndexScans(plans, /^message$/);
});

test('a message is found by its id or its event id through an index, never by reading the history', async () => {
  const app = await seedApp(database.db, 'lookup');
  await client.query(
    `insert into message (app_id, event_type, payload, payload_expires_at, event_id)
     select $1, 'e', '{}', now() + interval '30 days', case when n % 100 = 0 then 'evt_' || n end
       from generate_series(1, 20000) n`,
    [app.id],
  );
  await client.query('analyze message');
  const byEvent = await client.query<{ id: string }>(`select id from message where event_id = 'evt_500'`);
  const eventMessage = byEvent.rows[0]!.id;
  const other = await client.query<{ id: string }>(
    `select id from message where app_id = $1 and event_id is null limit 1`,
    [app.id],
  );
  const db = asQueryable(client);
  const found: (string | null)[] = [];
  // Each request about a message looks it up; a connection of a pool runs the same statement for
  // many of them, with the plan it made for the first ones (the 6th execution may be generic).
  const plans = await explained(async () => {
    for (let i = 0; i < 7; i++) {
      found.push((await findMessage(db, app.id, other.rows[0]!.id))?.id ?? null);
      found.push((await findMessage(db, app.id, 'evt_500'))?.id ?? null);
      found.push((await findMessage(db, app.id, 'msg_unknown'))?.id ?? null);
    }
  });
  assert.deepEqual(found.slice(0, 3), [other.rows[0]!.id, eventMessage, null]);
  assert.deepEqual(found.slice(18), found.slice(0, 3), 'the same answers from a reused plan');
  assert.equal(plans.length, 21, 'every lookup was explained');
  assertNoScans(plans, /Seq Scan on message\b/g);
  assertNoWholeIndexScans(plans, /^message$/);
  // Nor through the app's index, reading each of its messages to compare their event ids.
  assertNoFilterBeyond(plans, 1);
});

test('a list of messages before a moment long past walks only the ids before it', async () => {
  // 20,000 messages published now, and none ten days ago: the page is empty, found at once.
  const appId = await appWithHistory('listing');
  const tenDaysAgo = new Date(Date.now() - 10 * 86_400_000);
  let page: { data: unknown[] } = { data: [] };
  const plans = await explained(async () => {
    page = await listMessages(
      asQueryable(client),
      appId,
      { limit: 50, iterator: null, order: 'descending' },
      { eventTypes: null, channel: null, tag: null, before: tenDaysAgo, after: null },
    );
  });
  assert.deepEqual(page.data, []);
  assertNoScans(plans, /Seq Scan on message\b/g);
  assertNoFilterBeyond(plans, 1);
});

test('reconcile from a moment walks only the ids since it', async () => {
  // 20,000 messages published now; the window begins in a minute: empty, found at once.
  await appWithHistory('reconciling');
  const inAMinute = new Date(Date.now() + 60_000);
  let ids: string[] = [];
  const plans = await explained(async () => {
    ids = await messageIdsInWindow(
      asQueryable(client),
      { since: inAMinute, until: null, appId: null, uncertainOnly: false },
      '',
      100,
    );
  });
  assert.deepEqual(ids, []);
  assertNoScans(plans, /Seq Scan on message\b/g);
  assertNoFilterBeyond(plans, 1);
});

test("an endpoint's run of failures is found from the end of its history, not from all of it", async () => {
  // 3,000 successes over the past days, then the five failures that disable it.
  const app = await seedApp(database.db, 'failing');
  const ep = await seedEndpoint(database.db, app.id, 'http://127.0.0.1:1/failing');
  const messageId = await seedMessage(database.db, app.id);
  await client.query(
    `with d as (select id from delivery where message_id = $1 and endpoint_id = $2),
          runs as (select n, case when n <= 3000 then 'success' else 'failure' end as outcome,
                          (extract(epoch from now() - interval '3 days') * 1000)::bigint + n * 60000 as at_ms
                     from generate_series(1, 3005) n)
     insert into attempt (id, app_id, delivery_id, message_id, endpoint_id, cycle, lease_token, trigger, url,
                          started_at, finished_at, outcome, status_code)
     select 'atmpt_' || lpad(to_hex(r.at_ms), 12, '0') || '0000000000000000', $3, d.id, $1, $2, 1,
            gen_random_uuid(), 'scheduled', 'http://127.0.0.1:1/failing', to_timestamp(r.at_ms / 1000.0),
            to_timestamp(r.at_ms / 1000.0), r.outcome, case when r.outcome = 'success' then 204 else 500 end
       from runs r cross join d`,
    [messageId, ep.id, app.id],
  );
  await client.query('analyze attempt');
  const firstFailure = await client.query<{ started_at: Date }>(
    `select min(started_at) as started_at from attempt where endpoint_id = $1 and outcome = 'failure'`,
    [ep.id],
  );
  let since: Date | null = null;
  const plans = await explained(async () => {
    since = await failingSince(asQueryable(client), ep.id, new Date(0));
  });
  assert.equal(since!.getTime(), firstFailure.rows[0]!.started_at.getTime());
  assertNoScans(plans, /Seq Scan on attempt\b/g);
  // The newest attempts, back to the last success; the successes before it are never read.
  const read = plans.flatMap((p) =>
    [...p.matchAll(/Scan.* on attempt .*rows=(\d+) loops=\d+\)(?:\n.*Rows Removed by Filter: (\d+))?/g)].map(
      (m) => Number(m[1]) + Number(m[2] ?? 0),
    ),
  );
  assert.ok(
    read.length > 0 && read.every((n) => n <= 10),
    `attempts read per scan: ${read}\n${plans.join('\n')}`,
  );
});

test("deleting an endpoint's or an app's deliveries walks its own index, never another app's rows", async () => {
  // Another app's 20,000 messages and deliveries, published before this app's, lie ahead of them
  // by id.
  const neighbour = await seedApp(database.db, 'purge-neighbour');
  await seedEndpoint(database.db, neighbour.id, 'http://127.0.0.1:1/neighbour');
  await backlog(neighbour.id, 20_000);
  const app = await seedApp(database.db, 'purge-plan');
  const ep = await seedEndpoint(database.db, app.id, 'http://127.0.0.1:1/purge');
  await client.query(
    `with m as (
       insert into message (app_id, event_type, payload, payload_expires_at)
       select $1, 'e', '{}', now() + interval '1 day' from generate_series(1, 2000) returning id
     )
     insert into delivery (app_id, message_id, endpoint_id, state, attempts_in_cycle, attempts_total)
     select $1, m.id, $2, 'succeeded', 1, 1 from m`,
    [app.id, ep.id],
  );
  // Owed: 1,600 due (the 500 at the head stay), and 1,000 a day ahead, out of the claims' walk.
  await backlog(app.id, 1_600);
  await client.query(
    `with m as (
       insert into message (app_id, event_type, payload, payload_expires_at)
       select $1, 'e', '{}', now() + interval '1 day' from generate_series(1, 1000) returning id
     )
     insert into delivery (app_id, message_id, endpoint_id, next_attempt_at)
     select $1, m.id, $2, now() + interval '1 day' from m`,
    [app.id, ep.id],
  );
  await client.query('analyze message, delivery, delivery_due, delivery_deferred');
  const plans = await explained(async () => {
    await client.query('begin');
    try {
      await purgeEndpointDeliveries(asQueryable(client), ep.id, 500);
      await purgeAppHistory(asQueryable(client), app.id, 500);
    } finally {
      await client.query('rollback');
    }
  });
  assert.ok(
    plans.some((p) => p.includes('Delete on message')),
    'the purge was explained',
  );
  assertNoScans(plans, /Seq Scan on (message|delivery|delivery_due|delivery_deferred)\b/g);
  assertNoWholeIndexScans(plans, /^(message|delivery|delivery_due|delivery_deferred)$/);
  assertNoFilterBeyond(plans, 500);
});

test('no function whose plan is pinned, nor lease recovery, is compiled by JIT at each call', async () => {
  // A function that redefines one of these (create or replace) takes its settings from the new
  // definition: without `set jit = off` there, this fails.
  const { rows } = await client.query<{ fn: string }>(
    `select p.oid::regprocedure::text as fn from pg_proc p
      where (p.proname = 'herald_recover_expired_leases'
             or exists (select 1 from unnest(p.proconfig) c where c like 'enable\\_%'))
        and not 'jit=off' = any(coalesce(p.proconfig, '{}'))`,
  );
  assert.deepEqual(rows, []);
  const pinned = await client.query(`select 1 from pg_proc where 'jit=off' = any(proconfig)`);
  assert.equal(
    pinned.rowCount,
    13,
    'claim, outcomes, publish, receipts, give-back, the follow trigger, recovery (0016’s for older workers, 0031’s), the unknown attempts counted, tending the deferred rows (hold, release, tend) and lifting a rest',
  );
});

/** The plans of every statement `run` makes on the test's connection, nested ones included. */
async function explained(run: () => Promise<unknown>): Promise<string[]> {
  const plans: string[] = [];
  const collect = (notice: { message?: string | undefined }) => {
    if (notice.message?.includes('plan:')) plans.push(notice.message);
  };
  client.on('notice', collect);
  try {
    await client.query(`load 'auto_explain'`);
    await client.query('set auto_explain.log_min_duration = 0');
    await client.query('set auto_explain.log_nested_statements = on');
    // Actual row counts: what a join filter threw away shows how much it compared.
    await client.query('set auto_explain.log_analyze = on');
    await client.query('set client_min_messages = log');
    await run();
  } finally {
    await client.query('set client_min_messages = notice');
    client.off('notice', collect);
  }
  return plans;
}

function assertNoScans(plans: string[], hot: RegExp): void {
  const scans = plans.flatMap((p) => p.match(hot) ?? []);
  assert.deepEqual(scans, [], `a hot table was read whole:\n${plans.join('\n---\n')}`);
}

/**
 * With sequential scans disabled, a plan made for a small table reads it whole through an index
 * instead: an index scan without an index condition. Each scan node of a hot table must say which
 * keys it looks up (its properties follow it, up to the next node).
 */
function assertNoWholeIndexScans(plans: string[], hot: RegExp): void {
  const whole: string[] = [];
  for (const plan of plans) {
    const lines = plan.split('\n');
    lines.forEach((line, at) => {
      const scan = /Index (?:Only )?Scan(?: Backward)? using \S+ on (\S+)/.exec(line);
      if (!scan || !hot.test(scan[1]!)) return;
      const next = lines.findIndex((l, i) => i > at && /^\s*->/.test(l));
      const properties = lines.slice(at + 1, next === -1 ? undefined : next);
      if (!properties.some((p) => p.includes('Index Cond:'))) whole.push(line.trim());
    });
  }
  assert.deepEqual(whole, [], `an index of a hot table was read whole:\n${plans.join('\n---\n')}`);
}

/** A scan that read rows only to throw them away: more than `limit` in one node of one plan. */
function assertNoFilterBeyond(plans: string[], limit: number): void {
  const removed = plans.flatMap((p) =>
    [...p.matchAll(/Rows Removed by Filter: (\d+)/g)].map((m) => Number(m[1])),
  );
  assert.ok(
    removed.every((n) => n <= limit),
    `a scan read rows it did not want (${removed}):\n${plans.join('\n---\n')}`,
  );
}

/**
 * `x = any(array(select …))` as a filter compares each row with the whole array, element by element
 * (only a constant array is hashed): the square of the batch when both come from it.
 */
function assertNoArrayFilters(plans: string[]): void {
  const filters = plans.flatMap((p) => p.match(/Filter: .*= ANY \(\$\d+\).*/g) ?? []);
  assert.deepEqual(filters, [], `a filter compared rows with a whole array:\n${plans.join('\n---\n')}`);
}

/**
 * A join that throws away more rows than `limit` compared the batch pairwise (or against a whole
 * table). EXPLAIN gives the rows removed per loop of the join's node: times its loops, the total.
 */
function assertNoJoinFilterBeyond(plans: string[], limit: number): void {
  const removed: number[] = [];
  for (const plan of plans) {
    const lines = plan.split('\n');
    lines.forEach((line, at) => {
      const perLoop = /Rows Removed by Join Filter: (\d+)/.exec(line);
      if (!perLoop) return;
      const node = lines.slice(0, at).findLast((l) => /^\s*->|^\S/.test(l) && l.includes('loops='));
      const loops = Number(/loops=(\d+)/.exec(node ?? '')?.[1] ?? 1);
      if (Number(perLoop[1]) * loops > limit) removed.push(Number(perLoop[1]) * loops);
    });
  }
  assert.deepEqual(removed, [], `a join compared far more rows than it kept:\n${plans.join('\n---\n')}`);
}
