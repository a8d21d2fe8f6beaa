// A claim returns each message's payload once (migrations/0018): a fan-out claim leases one
// message to many endpoints, and the payload went out of PostgreSQL, and was parsed by the worker,
// on every row. The rows after a message's first say `payload_shared`; the worker gives every
// delivery of the message the same bytes, and a payload removed by retention stays null for all.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { claimDeliveries } from '../src/db/deliveries.ts';
import { freshDatabase, type TestDatabase } from './support/database.ts';
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

test("a claim's answer carries each message's payload on its first row only", async () => {
  // The answer as it leaves PostgreSQL, in a transaction rolled back: nothing stays leased.
  const rolledBack = new Error('rolled back: the claim was only looked at');
  let answer: { messageId: string; payload: string | null; payloadShared: boolean }[] = [];
  await database.db
    .transaction(async (tx) => {
      const result = await tx.query<(typeof answer)[number]>(
        `select message_id as "messageId", payload, payload_shared as "payloadShared"
           from herald_claim(100, interval '30 seconds', '')`,
      );
      answer = result.rows;
      throw rolledBack;
    })
    .catch((error: unknown) => {
      if (error !== rolledBack) throw error;
    });
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
