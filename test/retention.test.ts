// Retention: payloads go after their period (per message, else per source, else per app, else
// 90 days); the message, its deliveries, attempts and intake records stay.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { expireOldPayloads, pruneFinishedHistory } from '../src/db/retention.ts';
import { createEndpoint, publishVia } from './support/fixtures.ts';
import { startTestHerald, type TestHerald } from './support/herald.ts';
import { type Receiver, startReceiver } from './support/receiver.ts';
import { waitFor } from './support/wait.ts';

let t: TestHerald;
let receiver: Receiver;
before(async () => {
  t = await startTestHerald('retention');
  receiver = await startReceiver();
});
after(async () => {
  await t.close();
  await receiver.close();
});

const retentionOf = async (messageId: string) =>
  (
    await t.database.db.query<{ days: number }>(
      `select round(extract(epoch from payload_expires_at - created_at) / 86400)::int as days from message where id = $1`,
      [messageId],
    )
  ).rows[0]!.days;

test('the retention period comes from the message, else the app, else 90 days', async () => {
  const app = await t.call('POST', '/api/v1/app', { name: 'keep', uid: 'keep', retentionDays: 7 });
  assert.equal(app.status, 201);
  assert.equal(app.body.retentionDays, 7);
  const plain = await t.call('POST', '/api/v1/app', { name: 'plain', uid: 'plain' });
  assert.equal(await retentionOf(await publishVia(t, 'keep', { eventType: 'e', payload: {} })), 7);
  assert.equal(
    await retentionOf(
      await publishVia(t, 'keep', { eventType: 'e', payload: {}, payloadRetentionPeriod: 30 }),
    ),
    30,
  );
  assert.equal(await retentionOf(await publishVia(t, plain.body.id, { eventType: 'e', payload: {} })), 90);
});

test('an expired payload is removed; the history stays and reads as an empty payload', async () => {
  await t.call('POST', '/api/v1/app', { name: 'old', uid: 'old' });
  const ep = await createEndpoint(t, 'old', { url: `${receiver.url}/old` });
  const msg = await publishVia(t, 'old', { eventType: 'e', payload: { secret: 'customer data' } });
  await waitFor('the delivery', async () => {
    const rows = await t.database.db.query(
      `select 1 from delivery where message_id = $1 and state = 'succeeded'`,
      [msg],
    );
    return rows.rowCount === 1;
  });
  await t.database.db.query(
    `update message set payload_expires_at = now() - interval '1 second' where id = $1`,
    [msg],
  );
  assert.ok((await expireOldPayloads(t.database.db)) >= 1);
  const stored = await t.database.db.query<{ payload: string | null }>(
    'select payload from message where id = $1',
    [msg],
  );
  assert.equal(stored.rows[0]!.payload, null);
  const got = await t.call('GET', `/api/v1/app/old/msg/${msg}`);
  assert.deepEqual(got.body.payload, {});
  const attempts = await t.call('GET', `/api/v1/app/old/attempt/endpoint/${ep}`);
  assert.equal(attempts.body.data.length, 1, 'the attempt history outlives the content');
  assert.equal(await expireOldPayloads(t.database.db), 0, 'nothing left to expire');
});

test('history pruning removes old finished messages with their attempts, never unfinished ones', async () => {
  await t.call('POST', '/api/v1/app', { name: 'prune', uid: 'prune' });
  const ep = await createEndpoint(t, 'prune', { url: `${receiver.url}/prune` });
  const finished = await publishVia(t, 'prune', { eventType: 'e', payload: {} });
  await waitFor('the delivery', async () => {
    const rows = await t.database.db.query(
      `select 1 from delivery where message_id = $1 and state = 'succeeded'`,
      [finished],
    );
    return rows.rowCount === 1;
  });
  await t.call('PATCH', `/api/v1/app/prune/endpoint/${ep}`, { disabled: true });
  const waiting = await publishVia(t, 'prune', { eventType: 'e', payload: {} });
  await t.database.db.query(`update message set created_at = now() - interval '40 days' where id = any($1)`, [
    [finished, waiting],
  ]);
  assert.equal(await pruneFinishedHistory(t.database.db, 30), 1);
  const left = await t.database.db.query<{ id: string }>('select id from message where id = any($1)', [
    [finished, waiting],
  ]);
  assert.deepEqual(
    left.rows.map((r) => r.id),
    [waiting],
    'the waiting delivery keeps its message',
  );
  const attempts = await t.database.db.query('select 1 from attempt where message_id = $1', [finished]);
  assert.equal(attempts.rowCount, 0, 'attempts go with their message');
});
