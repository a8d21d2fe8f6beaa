// The write that records an attempt's outcome also claims the next deliveries (one call, one
// commit): for an endpoint with a backlog, the outcome frees the endpoint and the same transaction
// leases its next delivery. Both stamp PostgreSQL's transaction time, so the next attempt's
// start equals the previous attempt's finish exactly; two separate transactions could not.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { attemptsOf, createApp, createEndpoint, deliveryOf, publishVia } from './support/fixtures.ts';
import { startTestHerald, type TestHerald } from './support/herald.ts';
import { type Receiver, startReceiver } from './support/receiver.ts';
import { waitFor, waitForLockWaiter } from './support/wait.ts';

let t: TestHerald;
let receiver: Receiver;

before(async () => {
  // No worker yet: the backlog is in place before the first claim. Polling every minute: after
  // the first claim, only the outcome writes claim (a poll round could take a link of the chain).
  t = await startTestHerald('claim_along', { worker: false, env: { HERALD_POLL_INTERVAL_MS: '60000' } });
  receiver = await startReceiver();
});
after(async () => {
  await t.close();
  await receiver.close();
});

test("an endpoint's backlog: each outcome write leases the next delivery in its own transaction", async () => {
  const app = await createApp(t, 'backlog');
  const endpoint = await createEndpoint(t, app, { url: `${receiver.url}/backlog` });
  for (let n = 0; n < 10; n++) await publishVia(t, app, { eventType: 'e', payload: { n } });
  await t.herald.startWorker();
  await waitFor(
    'the ten deliveries to succeed',
    async () =>
      (
        await t.database.db.query<{ n: number }>(
          `select count(*)::int as n from delivery where endpoint_id = $1 and state = 'succeeded'`,
          [endpoint],
        )
      ).rows[0]!.n === 10,
    15_000,
  );
  // Compared in the database: JavaScript dates keep milliseconds only.
  const { rows } = await t.database.db.query<{
    attempts: number;
    sameTransaction: number;
    overlapping: number;
  }>(
    `select count(*)::int as attempts,
            count(*) filter (where started_at = previous_finish)::int as "sameTransaction",
            count(*) filter (where started_at < previous_finish)::int as overlapping
       from (select started_at, lag(finished_at) over (order by started_at, id) as previous_finish
               from attempt where endpoint_id = $1) a`,
    [endpoint],
  );
  assert.deepEqual(
    rows[0],
    // Every next attempt started in the transaction that finished the previous one, and one in
    // flight per endpoint still held: none started before the previous one finished.
    { attempts: 10, sameTransaction: 9, overlapping: 0 },
  );
});

test('a worker that stops while an outcome write runs gives back what that write claimed, unsent', async () => {
  // One slot, so only the outcome write can claim the second endpoint's delivery: while the first
  // attempt is out, a claim round finds no free slot. The first request hangs until the attempt
  // times out; the outcome write that follows is held on a row lock, the worker is told to stop,
  // then the lock goes: the write records the outcome and claims the other delivery in one commit,
  // for a worker that is no longer running.
  const s = await startTestHerald('claim_along_stop', {
    worker: false,
    env: {
      HERALD_WORKER_CONCURRENCY: '1',
      HERALD_POLL_INTERVAL_MS: '60000',
      // The row lock below must be taken before the hanging attempt times out: a few queries,
      // with room to spare on a slow machine.
      HERALD_ATTEMPT_TIMEOUT_MS: '2000',
    },
  });
  const hanging = await startReceiver((_request, n) => (n === 1 ? 'hang' : { status: 204 }));
  const lock = new pg.Client({ connectionString: s.database.url });
  await lock.connect();
  try {
    const app = await createApp(s, 'stopping');
    const endpoints = new Map<string, string>();
    for (const path of ['/a', '/b']) {
      endpoints.set(path, await createEndpoint(s, app, { url: `${hanging.url}${path}` }));
    }
    const message = await publishVia(s, app, { eventType: 'e', payload: { n: 1 } });
    const worker = await s.herald.startWorker();
    const first = await waitFor('the first request', () => hanging.requests[0]);
    const firstEndpoint = endpoints.get(first.path)!;
    const otherEndpoint = [...endpoints.values()].find((id) => id !== firstEndpoint)!;
    const sent = (await deliveryOf(s, message, firstEndpoint))!;
    const other = (await deliveryOf(s, message, otherEndpoint))!;

    await lock.query('begin');
    await lock.query('select 1 from delivery where id = $1 for update', [sent.id]);
    // The outcome write that claims along, not a claim round: there is no free slot for one.
    await waitForLockWaiter(s.database.db, 'herald_record_and_claim');
    const stopped = worker.stop(10_000);
    await lock.query('commit');
    await stopped;

    assert.deepEqual(
      hanging.requests.map((r) => r.path),
      [first.path],
      'nothing was sent after the stop began',
    );
    assert.equal((await attemptsOf(s, sent.id)).length, 1, 'the first attempt is recorded');
    assert.notEqual((await attemptsOf(s, sent.id))[0]!.outcome, null, 'with its outcome');
    // The claim committed with the outcome, then was given back: pending, its budget whole, no
    // attempt left behind.
    assert.deepEqual(
      { ...(await deliveryOf(s, message, otherEndpoint))!, id: other.id },
      { ...other, state: 'pending', attempts_in_cycle: 0, attempts_total: 0 },
    );
    assert.deepEqual(await attemptsOf(s, other.id), []);
    const notSent = await s.herald.core.metrics.registry
      .getSingleMetric('herald_attempts_not_sent_total')
      ?.get();
    assert.equal(
      (notSent?.values ?? []).find((v) => v.labels['reason'] === 'stopping')?.value,
      1,
      'the give-back is counted as not sent, stopping',
    );
  } finally {
    await lock.end();
    await hanging.close();
    await s.close();
  }
});
