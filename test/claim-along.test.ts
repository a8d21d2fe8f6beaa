// The write that records an attempt's outcome also claims the next deliveries (one call, one
// commit): for an endpoint with a backlog, the outcome frees the endpoint and the same transaction
// leases its next delivery. Both stamp PostgreSQL's transaction time, so the next attempt's
// start equals the previous attempt's finish exactly; two separate transactions could not.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { createApp, createEndpoint, publishVia } from './support/fixtures.ts';
import { startTestHerald, type TestHerald } from './support/herald.ts';
import { type Receiver, startReceiver } from './support/receiver.ts';
import { waitFor } from './support/wait.ts';

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
