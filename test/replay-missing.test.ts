// Svix's replay-missing (POST …/endpoint/{id}/replay-missing): a delivery for each message of the
// window that the endpoint matches and was never routed to — and nothing else. No worker runs
// here: what the call made is read from the deliveries it left, due now.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { replayMissingDeliveries } from '../src/db/deliveries.ts';
import { createApp, createEndpoint, publishVia } from './support/fixtures.ts';
import { startTestHerald, type TestHerald } from './support/herald.ts';
import { waitForLockWaiter } from './support/wait.ts';

let t: TestHerald;
before(async () => {
  t = await startTestHerald('replay_missing', { worker: false });
});
after(async () => {
  await t?.close();
});

const HOUR_AGO = () => new Date(Date.now() - 3600_000).toISOString();

async function replayMissing(app: string, endpoint: string, body: Record<string, unknown>) {
  const answer = await t.call('POST', `/api/v1/app/${app}/endpoint/${endpoint}/replay-missing`, body);
  assert.equal(answer.status, 202, JSON.stringify(answer.body));
  return answer.body as { id: string; status: string; task: string; deliveries: number; more: boolean };
}

/** The messages routed to the endpoint, by id, with how each delivery was asked for. */
async function routedTo(endpoint: string): Promise<{ messageId: string; trigger: string; state: string }[]> {
  const { rows } = await t.database.db.query<{ messageId: string; trigger: string; state: string }>(
    `select message_id as "messageId", trigger, state from delivery where endpoint_id = $1 order by message_id`,
    [endpoint],
  );
  return rows;
}

test('only what the endpoint matches today and never had: not other event types or channels, not examples, not a payload gone', async () => {
  const app = await createApp(t, 'missing-filters');
  const first = await createEndpoint(t, app, { url: 'http://127.0.0.1:9/first' });
  const wanted = await publishVia(t, app, { eventType: 'order.paid', payload: { n: 1 } });
  const inChannel = await publishVia(t, app, {
    eventType: 'order.paid',
    payload: { n: 2 },
    channels: ['eu'],
  });
  await publishVia(t, app, { eventType: 'order.paid', payload: { n: 3 }, channels: ['us'] });
  await publishVia(t, app, { eventType: 'order.refunded', payload: { n: 4 } });
  const expunged = await publishVia(t, app, { eventType: 'order.paid', payload: { n: 5 } });
  const gone = await t.call('DELETE', `/api/v1/app/${app}/msg/${expunged}/content`);
  assert.equal(gone.status, 204, JSON.stringify(gone.body));
  const example = await t.call('POST', `/api/v1/app/${app}/endpoint/${first}/send-example`, {
    eventType: 'svix.ping',
  });
  assert.equal(example.status, 200, JSON.stringify(example.body));

  const late = await createEndpoint(t, app, {
    url: 'http://127.0.0.1:9/late',
    filterTypes: ['order.paid', 'svix.ping'],
    channels: ['eu'],
  });
  // Routed to the late endpoint at its publish: it is not made twice.
  const after = await publishVia(t, app, { eventType: 'order.paid', payload: { n: 6 }, channels: ['eu'] });
  assert.deepEqual(await routedTo(late), [{ messageId: after, trigger: 'scheduled', state: 'pending' }]);

  const replayed = await replayMissing(app, late, { since: HOUR_AGO() });
  assert.equal(replayed.task, 'endpoint.replay');
  assert.equal(replayed.status, 'finished');
  assert.match(replayed.id, /^qtask_/);
  assert.equal(replayed.deliveries, 1);
  assert.deepEqual(await routedTo(late), [
    { messageId: inChannel, trigger: 'manual', state: 'pending' },
    { messageId: after, trigger: 'scheduled', state: 'pending' },
  ]);
  // An endpoint without filters gets every other message it missed: the one published without
  // channels was routed to `first` at its publish (as was every message but the example's).
  const open = await createEndpoint(t, app, { url: 'http://127.0.0.1:9/open' });
  assert.equal((await replayMissing(app, open, { since: HOUR_AGO() })).deliveries, 5);
  const openRouted = (await routedTo(open)).map((r) => r.messageId);
  assert.ok(openRouted.includes(wanted));
  assert.ok(!openRouted.includes(expunged), 'a message without its payload has nothing to send');
  assert.ok(!openRouted.includes(example.body.id), 'an example went to its endpoint alone');
  // And the call is audited, with what it did.
  const { rows } = await t.database.db.query<{ details: { deliveries: number; since: string } }>(
    `select details from audit_entry where action = 'endpoint.missing_replayed' and target_id = $1`,
    [late],
  );
  assert.equal(rows.length, 1);
  assert.equal(rows[0]!.details.deliveries, 1);
});

test('the window: from `since` inclusive, until `until` exclusive', async () => {
  const app = await createApp(t, 'missing-window');
  const messages = [];
  for (let n = 0; n < 3; n++) messages.push(await publishVia(t, app, { eventType: 'a.b', payload: { n } }));
  const [before, inside, past] = messages as [string, string, string];
  // Created an hour apart (1, 2 and 3 hours after a base), on whole seconds: the bounds below
  // fall on them exactly.
  const { rows } = await t.database.db.query<{ base: Date }>(
    `with base as (select date_trunc('second', now()) - interval '3 hours' as base)
     update message m set created_at = base.base + make_interval(hours => x.n::int)
       from base, unnest($1::text[]) with ordinality as x(id, n)
      where m.id = x.id
     returning base.base`,
    [[before, inside, past]],
  );
  const hoursIn = (h: number) => new Date(rows[0]!.base.getTime() + h * 3600_000).toISOString();
  const ep = await createEndpoint(t, app, { url: 'http://127.0.0.1:9/window' });
  // inside was created at `since`, past at `until`.
  assert.equal((await replayMissing(app, ep, { since: hoursIn(2), until: hoursIn(3) })).deliveries, 1);
  assert.deepEqual(
    (await routedTo(ep)).map((r) => r.messageId),
    [inside],
  );
  assert.equal((await replayMissing(app, ep, { since: hoursIn(2) })).deliveries, 1);
  assert.equal((await replayMissing(app, ep, { since: hoursIn(1) })).deliveries, 1);
  assert.deepEqual(
    (await routedTo(ep)).map((r) => r.messageId),
    [before, inside, past].sort(),
  );
  const invalid = await t.call('POST', `/api/v1/app/${app}/endpoint/${ep}/replay-missing`, {
    since: 'yesterday',
  });
  assert.equal(invalid.status, 422);
  assert.deepEqual(invalid.body.detail[0].loc, ['body', 'since']);
});

test('two calls at once make each delivery once', async () => {
  const app = await createApp(t, 'missing-at-once');
  const messages: string[] = [];
  for (let i = 0; i < 20; i++) messages.push(await publishVia(t, app, { eventType: 'a.b', payload: { i } }));
  const ep = await createEndpoint(t, app, { url: 'http://127.0.0.1:9/at-once' });
  const locker = new pg.Client({ connectionString: t.database.url });
  await locker.connect();
  try {
    // Both calls read that nothing was routed, then wait behind this lock on the endpoint's row.
    await locker.query('begin');
    await locker.query('select 1 from endpoint where id = $1 for update', [ep]);
    const calls = [
      replayMissing(app, ep, { since: HOUR_AGO() }),
      replayMissing(app, ep, { since: HOUR_AGO() }),
    ];
    await waitForLockWaiter(t.database.db, 'm.id as message_id, e.id as endpoint_id', 10_000, 2);
    await locker.query('rollback');
    const made = (await Promise.all(calls)).map((answer) => answer.deliveries);
    assert.equal(made[0]! + made[1]!, messages.length, `made ${made.join(' and ')}`);
  } finally {
    await locker.end();
  }
  assert.deepEqual(
    (await routedTo(ep)).map((r) => r.messageId),
    [...messages].sort(),
  );
});

test('a call makes its cap of deliveries at most, the oldest first, and says more are missing; the next goes on', async () => {
  const app = await createApp(t, 'missing-capped');
  const messages: string[] = [];
  for (let i = 0; i < 5; i++) messages.push(await publishVia(t, app, { eventType: 'a.b', payload: { i } }));
  const ep = await createEndpoint(t, app, { url: 'http://127.0.0.1:9/capped' });
  const call = () =>
    t.database.db.transaction((tx) => replayMissingDeliveries(tx, ep, new Date(HOUR_AGO()), null, 2));
  assert.deepEqual(await call(), { made: 2, more: true });
  assert.deepEqual(
    (await routedTo(ep)).map((r) => r.messageId),
    messages.slice(0, 2),
  );
  assert.deepEqual(await call(), { made: 2, more: true });
  assert.deepEqual(await call(), { made: 1, more: false });
  assert.deepEqual(
    (await routedTo(ep)).map((r) => r.messageId),
    messages,
  );
  // Through the API, under its cap of 10,000: all at once, nothing more.
  const fresh = await createEndpoint(t, app, { url: 'http://127.0.0.1:9/capped-api' });
  const answer = await replayMissing(app, fresh, { since: HOUR_AGO() });
  assert.equal(answer.deliveries, 5);
  assert.equal(answer.more, false);
});

test('a message history retention deletes under a call is passed by, not a foreign-key error', async () => {
  const app = await createApp(t, 'missing-pruned');
  const kept = await publishVia(t, app, { eventType: 'a.b', payload: { n: 1 } });
  const pruned = await publishVia(t, app, { eventType: 'a.b', payload: { n: 2 } });
  const ep = await createEndpoint(t, app, { url: 'http://127.0.0.1:9/pruned' });
  const retention = new pg.Client({ connectionString: t.database.url });
  await retention.connect();
  try {
    // Retention has locked the message it prunes (retention.ts), and deletes it while the call waits.
    await retention.query('begin');
    await retention.query('select 1 from message where id = $1 for update', [pruned]);
    const call = replayMissing(app, ep, { since: HOUR_AGO() });
    await waitForLockWaiter(t.database.db, 'm.id as message_id, e.id as endpoint_id');
    await retention.query('delete from message where id = $1', [pruned]);
    await retention.query('commit');
    assert.equal((await call).deliveries, 1);
  } finally {
    await retention.end();
  }
  assert.deepEqual(
    (await routedTo(ep)).map((r) => r.messageId),
    [kept],
  );
});
