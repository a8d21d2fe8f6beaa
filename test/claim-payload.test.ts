// A claim returns each message's payload once when asked (migrations/0018): a fan-out claim leases
// one message to many endpoints, and the payload went out of PostgreSQL, and was parsed by the
// worker, on every row. The rows after a message's first say `payload_shared`; the worker gives
// every delivery of the message the same bytes, and a payload removed by retention stays null for
// all. A worker of the version before, still running during an upgrade, gets every payload on
// every row as it did.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { claimDeliveries, recordOutcomes, recordOutcomesAndClaim } from '../src/db/deliveries.ts';
import { migrate, readMigrations } from '../src/db/migrate.ts';
import { freshDatabase, type TestDatabase } from './support/database.ts';
import { attemptResult } from './support/outcomes.ts';
import { seedApp, seedEndpoint, seedMessage } from './support/seed.ts';

let database: TestDatabase;
/** Message id → its payload as published (null: removed by retention before the claim). */
const published = new Map<string, string | null>();
let deliveries = 0;

before(async () => {
  database = await freshDatabase('claim_payload');
  // Three apps, one message each: one claim takes every endpoint's delivery, so its answer holds
  // three messages, each on several rows.
  const fanOut = [
    { uid: 'claim_payload_a', endpoints: 3, payload: '{"text":"héllo ✓ — ünïcode"}', expired: false },
    { uid: 'claim_payload_b', endpoints: 2, payload: `{"pad":"${'x'.repeat(4000)}"}`, expired: false },
    { uid: 'claim_payload_c', endpoints: 2, payload: '{"gone":true}', expired: true },
  ];
  for (const { uid, endpoints, payload, expired } of fanOut) {
    const app = await seedApp(database.db, uid);
    for (let n = 0; n < endpoints; n++)
      await seedEndpoint(database.db, app.id, `http://127.0.0.1:9/${uid}/${n}`);
    const messageId = await seedMessage(database.db, app.id, payload);
    // As payload retention leaves an expired message (src/db/retention.ts).
    if (expired) await database.db.query('update message set payload = null where id = $1', [messageId]);
    published.set(messageId, expired ? null : payload);
    deliveries += endpoints;
  }
});
after(() => database.drop());

test("a claim that shares payloads carries each message's payload on its first row only", async () => {
  // The answer as it leaves PostgreSQL, in a transaction rolled back: nothing stays leased.
  const client = new pg.Client({ connectionString: database.url });
  await client.connect();
  let answer: { messageId: string; payload: string | null; payloadShared: boolean }[];
  try {
    await client.query('begin');
    answer = (
      await client.query<(typeof answer)[number]>(
        `select message_id as "messageId", payload, payload_shared as "payloadShared"
           from herald_claim(100, interval '30 seconds', '', null, share_payloads => true)`,
      )
    ).rows;
    await client.query('rollback');
  } finally {
    await client.end();
  }
  assert.equal(answer.length, deliveries, 'every endpoint had one delivery due');
  for (const [messageId, payload] of published) {
    const rows = answer.filter((row) => row.messageId === messageId);
    assert.ok(rows.length >= 2, `${messageId} fanned out to several endpoints`);
    assert.deepEqual(
      rows.map((row) => [row.payload, row.payloadShared]),
      [[payload, false], ...rows.slice(1).map(() => [null, true])],
      `${messageId}: its payload on the first of its rows, the others shared`,
    );
  }
});

test('every claimed delivery gets its message’s bytes, one buffer per message; an expired payload stays null', async () => {
  const claimed = await claimDeliveries(database.db, { batch: 100, leaseSeconds: 30, afterEndpoint: '' });
  assert.equal(claimed.length, deliveries);
  for (const [messageId, payload] of published) {
    const mine = claimed.filter((c) => c.messageId === messageId);
    assert.ok(mine.length >= 2);
    for (const delivery of mine) {
      if (payload === null) assert.equal(delivery.payload, null, `${messageId}: expired`);
      else assert.deepEqual(delivery.payload, Buffer.from(payload, 'utf8'), `${messageId}: its bytes`);
      // The same Buffer: encoded once per message, whatever the number of its deliveries.
      assert.equal(delivery.payload, mine[0]!.payload);
    }
  }
});

test("an outcome write's claim along shares payloads in round-robin order, after the cursor and wrapped", async () => {
  const own = await freshDatabase('claim_payload_wrap');
  try {
    const app = await seedApp(own.db, 'claim_payload_wrap');
    const endpoints: string[] = [];
    for (let n = 0; n < 4; n++)
      endpoints.push((await seedEndpoint(own.db, app.id, `http://127.0.0.1:9/${n}`)).id);
    endpoints.sort();
    const [e1, e2, , e4] = endpoints as [string, string, string, string];
    const first = await seedMessage(own.db, app.id, '{"first":1}');
    const second = await seedMessage(own.db, app.id, '{"second":"ß"}');
    const held = await claimDeliveries(own.db, { batch: 10, leaseSeconds: 30, afterEndpoint: '' });
    assert.deepEqual(
      held.map((c) => c.messageId),
      [first, first, first, first],
    );
    // The first message's outcomes at e1 and e4 free them; the claim along continues after e2, so
    // it takes the second message at e4 (after the cursor) and then at e1 (wrapped round).
    const freed = held.filter((c) => c.endpointId === e1 || c.endpointId === e4);
    const written = await recordOutcomesAndClaim(
      own.db,
      freed.map((c) => attemptResult(c)),
      5,
      {
        batch: 10,
        leaseSeconds: 30,
        afterEndpoint: e2,
      },
    );
    assert.deepEqual(
      written.recorded.map((r) => [r.recorded, r.endpointDisabled]),
      [
        [true, false],
        [true, false],
      ],
    );
    assert.deepEqual(
      written.claimed.map((c) => [c.endpointId, c.messageId]),
      [
        [e4, second],
        [e1, second],
      ],
    );
    const bytes = Buffer.from('{"second":"ß"}', 'utf8');
    assert.deepEqual(written.claimed[0]!.payload, bytes);
    assert.equal(written.claimed[1]!.payload, written.claimed[0]!.payload, 'one buffer, shared');
  } finally {
    await own.drop();
  }
});

test('a worker of the version before 0018 still gets every payload on every row, across the upgrade', async () => {
  const old = await freshDatabase('claim_payload_upgrade', { upTo: 17 });
  const client = new pg.Client({ connectionString: old.url });
  await client.connect();
  try {
    const app = await seedApp(old.db, 'claim_payload_upgrade');
    for (let n = 0; n < 3; n++) await seedEndpoint(old.db, app.id, `http://127.0.0.1:9/${n}`);
    const payloads = ['{"before":"the upgrade"}', '{"after":"the upgrade"}'];
    for (const payload of payloads) await seedMessage(old.db, app.id, payload);
    // The claim as that worker prepares it on its connection: four arguments, its columns by name.
    const oldClaim = () =>
      client.query<{ deliveryId: string; leaseToken: string; payload: string | null }>({
        name: 'claim_deliveries',
        text: `select delivery_id as "deliveryId", lease_token as "leaseToken", payload
                 from herald_claim($1, make_interval(secs => $2), $3, $4::uuid)`,
        values: [10, 30, '', null],
      });
    const before = await oldClaim();
    assert.deepEqual(
      before.rows.map((row) => row.payload),
      [payloads[0], payloads[0], payloads[0]],
    );
    await recordOutcomes(
      old.db,
      before.rows.map((row) => attemptResult(row)),
      5,
    );
    const upgrade = readMigrations().filter((m) => m.version === 18);
    assert.deepEqual(await migrate(old.db, upgrade), [18], 'the upgrade ran 0018');
    // The same prepared statement, planned again against the new definition.
    const after = await oldClaim();
    assert.deepEqual(
      after.rows.map((row) => row.payload),
      [payloads[1], payloads[1], payloads[1]],
      'every row carries its payload, as that worker expects',
    );
  } finally {
    await client.end();
    await old.drop();
  }
});
