// Invariant 7 (with 5 and 6): a worker that knows the HTTP outcome keeps trying to record it while
// the database is unreachable, within its lease. The worker runs in-process with its database
// connections going through a TCP proxy; the receiver cuts the proxy (every connection destroyed,
// new ones refused) just before it answers, so the outage hits exactly the finalization write.
// And a claim whose answer is lost after it committed — the worker never saw those leases, so it
// sent nothing — is given back at once, not left to lease recovery's `unknown`; so is a lease whose
// request never left for its congested origin, retried within the lease while the database is away.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import pino from 'pino';
import { loadConfig } from '../src/config.ts';
import { findApp } from '../src/db/apps.ts';
import { createHerald, type Herald } from '../src/herald.ts';
import { freshDatabase, type TestDatabase } from './support/database.ts';
import { testEnv } from './support/herald.ts';
import type { LogRecord } from './support/processes.ts';
import { type Receiver, type Respond, startReceiver } from './support/receiver.ts';
import { addEndpoint, seedApp } from './support/seed.ts';
import { type Answer, startTcpProxy, type TcpProxy } from './support/tcp-proxy.ts';
import { waitFor } from './support/wait.ts';

const RETRYING = 'retrying outcome write';
const GAVE_UP = 'could not record the outcome within the lease; lease recovery will mark the attempt unknown';
const DISCARDED = 'lease lost before the outcome was recorded; result discarded';
const GAVE_BACK = 'a claim was not started; its leases were given back unsent';
const GIVE_BACK_RETRIED = 'retrying a give-back of unsent leases';
const CONGESTED =
  'congested: the request waited for a connection to its origin past its start limit; not sent';

let database: TestDatabase;
const cleanups: (() => Promise<unknown>)[] = [];

before(async () => {
  database = await freshDatabase('db_outage');
});

after(async () => {
  // Last in, first out: heralds before their proxies, everything before the database.
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
  await database?.drop();
});

interface Rig {
  proxy: TcpProxy;
  herald: Herald;
  receiver: Receiver;
  logs: LogRecord[];
  appUid: string;
}

/** A proxy in front of the test database, an in-process herald behind it, an app and an endpoint. */
async function rig(
  label: string,
  env: Record<string, string>,
  respond: (proxy: TcpProxy) => Respond,
  endpoint: { idempotent?: boolean } = {},
) {
  const target = new URL(database.url);
  const proxy = await startTcpProxy({ host: target.hostname, port: Number(target.port || 5432) });
  cleanups.push(() => proxy.close());
  const logs: LogRecord[] = [];
  const logger = pino(
    { level: 'debug' },
    {
      write(line: string) {
        logs.push(JSON.parse(line) as LogRecord);
      },
    },
  );
  const herald = await createHerald({
    config: loadConfig(testEnv(proxy.urlFor(database.url), env)),
    logger,
    migrate: false,
  });
  // A failed test may leave the proxy paused: let the herald reach its database to close.
  cleanups.push(() => {
    proxy.resume();
    return herald.close();
  });
  const receiver = await startReceiver(respond(proxy));
  cleanups.push(() => receiver.close());

  // Set-up goes straight to the database; only the worker's traffic crosses the proxy.
  const app = await seedApp(database.db, label);
  await addEndpoint(herald, database.db, app, { url: `${receiver.url}/hook`, ...endpoint });
  return { proxy, herald, receiver, logs, appUid: label } satisfies Rig;
}

/** The receiver's first request takes the database away just before its answer goes out. */
const cutOnFirst =
  (status: number) =>
  (proxy: TcpProxy): Respond =>
  (_request, n) => {
    if (n === 1) {
      proxy.pause();
      proxy.cutAll();
      return { status };
    }
    return { status: 204 };
  };

interface AttemptState {
  id: string;
  leaseToken: string;
  outcome: string | null;
  statusCode: number | null;
  responseClass: string | null;
}

async function attemptsOf(deliveryId: string): Promise<AttemptState[]> {
  const result = await database.db.query<AttemptState>(
    `select id, lease_token as "leaseToken", outcome, status_code as "statusCode",
            response_class as "responseClass"
       from attempt where delivery_id = $1 order by started_at, id`,
    [deliveryId],
  );
  return result.rows;
}

async function deliveryOf(messageId: string) {
  const result = await database.db.query<{
    id: string;
    state: string;
    leaseToken: string | null;
    leaseExpiresAt: Date | null;
    leaseExpiredFor: number | null;
  }>(
    `select id, state, lease_token as "leaseToken", lease_expires_at as "leaseExpiresAt",
            extract(epoch from now() - lease_expires_at)::float8 as "leaseExpiredFor"
       from delivery where message_id = $1`,
    [messageId],
  );
  assert.equal(result.rows.length, 1);
  return result.rows[0]!;
}

const count = (logs: LogRecord[], msg: string) => logs.filter((r) => r.msg === msg).length;

test('an outage during finalization is ridden out: exactly one recorded outcome', async () => {
  const { proxy, herald, receiver, logs, appUid } = await rig('blip', {}, cutOnFirst(200));
  await herald.startWorker();
  const { message } = await herald.publish(appUid, { eventType: 'invoice.paid', payload: { n: 1 } });

  await waitFor('the receiver to answer the first request', () => receiver.requests.length === 1);
  // Hold the outage until the worker has failed to write several times (≈1.5 s of backoff).
  await waitFor('five failed outcome writes', () => count(logs, RETRYING) >= 5, 15_000);
  assert.ok(proxy.refused >= 5, `the writes were refused at the proxy (${proxy.refused})`);

  // Nothing is recorded yet: the outage really hit the finalization.
  const during = await deliveryOf(message.id);
  assert.equal(during.state, 'sending');
  const open = await attemptsOf(during.id);
  assert.equal(open.length, 1);
  assert.equal(open[0]!.outcome, null);

  proxy.resume();
  await waitFor('the delivery to be recorded as succeeded', async () => {
    return (await deliveryOf(message.id)).state === 'succeeded';
  });
  // Let every write the worker still had in hand finish before counting.
  await herald.close();

  const attempts = await attemptsOf(during.id);
  assert.equal(attempts.length, 1, JSON.stringify(attempts));
  assert.equal(attempts[0]!.id, open[0]!.id);
  assert.equal(attempts[0]!.outcome, 'success');
  assert.equal(attempts[0]!.statusCode, 200);
  assert.equal(attempts[0]!.leaseToken, during.leaseToken);
  assert.equal(receiver.requests.length, 1, 'the receiver saw the webhook exactly once');
  assert.equal(count(logs, GAVE_UP), 0);
  assert.equal(count(logs, DISCARDED), 0, 'the outcome was recorded, not discarded');
});

test('an outage that outlasts the lease: the outcome is given up, recovery makes it unknown, retry succeeds', async () => {
  const { proxy, herald, receiver, logs, appUid } = await rig(
    'long_outage',
    { HERALD_LEASE_SECONDS: '2', HERALD_ATTEMPT_TIMEOUT_MS: '1500' },
    cutOnFirst(200),
  );
  await herald.startWorker();
  const { message } = await herald.publish(appUid, { eventType: 'invoice.paid', payload: { n: 2 } });

  await waitFor('the receiver to answer the first request', () => receiver.requests.length === 1);
  const leased = await deliveryOf(message.id);
  assert.equal(leased.state, 'sending');
  // Keep the database away until the lease has been over for a second (≈3 s of outage in all), so
  // that a worker writing after its lease would be caught doing it.
  await waitFor(
    'the lease to be expired for a second while the database is still away',
    async () => ((await deliveryOf(message.id)).leaseExpiredFor ?? 0) > 1,
  );
  assert.ok(count(logs, RETRYING) >= 3, 'it retried within the lease first');
  const stillOpen = await attemptsOf(leased.id);
  assert.equal(stillOpen.length, 1);
  assert.equal(stillOpen[0]!.outcome, null, 'no outcome was written during the outage');

  proxy.resume();
  await waitFor(
    'the delivery to succeed on a new attempt',
    async () => (await deliveryOf(message.id)).state === 'succeeded',
    20_000,
  );
  await herald.close();

  const attempts = await attemptsOf(leased.id);
  assert.equal(attempts.length, 2, JSON.stringify(attempts));
  const [lost, retried] = attempts as [AttemptState, AttemptState];
  assert.equal(lost.leaseToken, leased.leaseToken);
  assert.equal(lost.outcome, 'unknown', 'the 200 could not be recorded in time: nobody may claim to know it');
  assert.equal(lost.responseClass, 'lease_expired');
  assert.equal(lost.statusCode, null);
  assert.equal(retried.outcome, 'success');
  assert.notEqual(retried.leaseToken, lost.leaseToken);
  assert.equal(
    attempts.filter((a) => a.outcome === 'success').length,
    1,
    'one success row, under the new lease',
  );

  assert.equal(receiver.requests.length, 2);
  assert.deepEqual(
    receiver.requests.map((r) => r.headers['webhook-id']),
    [message.id, message.id],
  );
  // The worker gave the result up when its lease ran out, rather than writing it late (which
  // fencing would have had to discard, or worse, accept).
  assert.equal(count(logs, GAVE_UP), 1, 'the worker said it gave the outcome up');
  assert.equal(count(logs, DISCARDED), 0);
});

test('an unsent lease given back during an outage is given back once the database returns: no unknown attempt', async () => {
  // One connection to the origin, shared by two endpoints: the first request takes the database
  // away and hangs until its deadline (2 s), so the other waits for the connection past its start
  // limit (1 s into its 3 s lease) and is given back unsent, while the database is away.
  const { proxy, herald, receiver, logs, appUid } = await rig(
    'give_back_outage',
    { HERALD_CONNECTIONS_PER_ORIGIN: '1', HERALD_LEASE_SECONDS: '3', HERALD_ATTEMPT_TIMEOUT_MS: '2000' },
    (proxy) => (_request, n) => {
      if (n !== 1) return { status: 204 };
      proxy.pause();
      proxy.cutAll();
      return 'hang';
    },
  );
  const app = (await findApp(database.db, appUid))!;
  await addEndpoint(herald, database.db, app, { url: `${receiver.url}/other` });
  const { message } = await herald.publish(appUid, { eventType: 'invoice.paid', payload: { n: 3 } });
  await herald.startWorker();
  await waitFor('the give-back of the unsent lease to be retried while the database is away', () =>
    logs.some((l) => l.msg === GIVE_BACK_RETRIED && l['reason'] === 'origin_congested'),
  );
  proxy.resume();
  const deliveries = async () =>
    (
      await database.db.query<{ id: string; state: string }>(
        'select id, state from delivery where message_id = $1 order by id',
        [message.id],
      )
    ).rows;
  await waitFor('both deliveries to succeed', async () =>
    (await deliveries()).every((d) => d.state === 'succeeded'),
  );
  const metrics = await herald.core.metrics.scrape();
  await herald.close();

  const outcomes = await Promise.all(
    (await deliveries()).map(async (d) => (await attemptsOf(d.id)).map((a) => a.outcome)),
  );
  // The hung request's attempt is unknown (its deadline passed after it was sent); the one given
  // back has no attempt but its success: it was never sent, and nobody may say it might have been.
  assert.deepEqual(outcomes.sort(), [['success'], ['unknown', 'success']].sort(), JSON.stringify(outcomes));
  // (Given back again, once the database returned, if the hung request still held the connection.)
  assert.ok(count(logs, CONGESTED) >= 1);
  assert.match(metrics, /herald_attempts_not_sent_total\{reason="origin_congested"\} [1-9]/);
});

/**
 * One connection to the origin, shared by two endpoints of one message: the first request hangs
 * at the receiver, the other lease waits for the connection (a stop gives it back unsent).
 */
async function oneHangingOneWaiting(label: string) {
  const setup = await rig(
    label,
    { HERALD_CONNECTIONS_PER_ORIGIN: '1', HERALD_LEASE_SECONDS: '10', HERALD_ATTEMPT_TIMEOUT_MS: '3000' },
    () => (_request, n) => (n === 1 ? 'hang' : { status: 204 }),
  );
  const { herald, receiver, appUid } = setup;
  const app = (await findApp(database.db, appUid))!;
  await addEndpoint(herald, database.db, app, { url: `${receiver.url}/other` });
  const { message } = await herald.publish(appUid, { eventType: 'invoice.paid', payload: { n: 4 } });
  const worker = await herald.startWorker();
  const states = async () =>
    (
      await database.db.query<{ id: string; state: string }>(
        'select id, state from delivery where message_id = $1 order by id',
        [message.id],
      )
    ).rows;
  await waitFor(
    'one request hanging at the receiver, the other lease waiting for the connection',
    async () => {
      const rows = await states();
      return receiver.requests.length === 1 && rows.length === 2 && rows.every((d) => d.state === 'sending');
    },
  );
  return { ...setup, app, worker, states };
}

const GIVEN_BACK_AT_STOP = 'waiting for its origin when the worker stopped; not sent';

test('a lease given back as the worker stops, while the database is away, is given back once it returns: no unknown attempt', async () => {
  // The database goes away and the worker is told to stop at once: the waiting request is not
  // sent, and its give-back must outlast the outage.
  const { proxy, logs, app, worker, states } = await oneHangingOneWaiting('stop_give_back');
  proxy.pause();
  proxy.cutAll();
  const stopped = worker.stop(0);
  await waitFor('the give-back to be retried while the database is away', () =>
    logs.some((l) => l.msg === GIVE_BACK_RETRIED && l['reason'] === 'stopping'),
  );
  proxy.resume();
  await stopped;

  // The request that never left has no attempt and waits again, budget kept.
  const waiting = (await states()).filter((d) => d.state === 'pending');
  assert.equal(waiting.length, 1, JSON.stringify(await states()));
  assert.deepEqual(await attemptsOf(waiting[0]!.id), []);
  assert.equal(count(logs, GIVEN_BACK_AT_STOP), 1);
  // The tests after this one share the database: nothing of this one may be left due.
  await database.db.query('delete from app where id = $1', [app.id]);
});

test('a give-back whose answer was lost after it committed is reported as given back, not as recovered', async () => {
  // The stop's give-back commits, and its answer is lost: the retry finds nothing left to give
  // back. Its attempt row is gone with the give-back (recovery would have kept it, as unknown),
  // so the worker counts it as given back, once.
  const { proxy, herald, logs, app, worker } = await oneHangingOneWaiting('give_back_answer_lost');
  let lost = false;
  void proxy
    .loseAnswer((answer) => answer.columns.includes('released') && answer.rows[0]?.['released'] === 't')
    .then(() => {
      lost = true;
    });
  await worker.stop(0);
  assert.ok(lost, 'the give-back committed and its answer was lost');
  assert.ok(count(logs, GIVE_BACK_RETRIED) >= 1, 'and it was tried again');
  assert.equal(count(logs, GIVEN_BACK_AT_STOP), 1);
  assert.equal(
    count(logs, 'not sent, but its lease was recovered first; recovery recorded the attempt as unknown'),
    0,
  );
  assert.match(await herald.core.metrics.scrape(), /herald_attempts_not_sent_total\{reason="stopping"\} 1\b/);
  await database.db.query('delete from app where id = $1', [app.id]);
});

test('a worker whose first LISTEN failed listens once the database is back: a publish wakes it, not its 60 s poll', async () => {
  const { proxy, herald, receiver, logs, appUid } = await rig(
    'listen_retried',
    { HERALD_POLL_INTERVAL_MS: '60000', HERALD_LEASE_SECONDS: '8' },
    () => () => ({ status: 204 }),
  );
  proxy.pause();
  proxy.cutAll();
  await herald.startWorker();
  assert.equal(count(logs, 'LISTEN unavailable; relying on polling'), 1);
  proxy.resume();
  await waitFor(
    'the worker to listen again',
    () => count(logs, 'listening for wake-ups again') === 1,
    15_000,
  );
  // The worker's claims failed while the database was away, and it now waits 30 s or more
  // between them: only the wake-up brings this publish out within the deadline.
  await herald.publish(appUid, { eventType: 'invoice.paid', payload: { n: 5 } });
  await waitFor('the request at the receiver', () => receiver.requests.length === 1, 10_000);
  // The tests after this one share the database: this worker must not claim their work.
  await herald.close();
});

// The answers a worker's claims come back in, told apart by their columns (src/db/deliveries.ts,
// src/db/endpoint-secrets.ts), and taken only when they claimed something: a claim round may hold
// the worker's free slots while an outcome is written, and that write then records without
// claiming along, leaving the claim to a round (or to a write of a later outcome, which finds
// nothing left to claim). Losing an answer that claimed nothing would show nothing to give back.
const claimedSome = (answer: Answer) => answer.rows.some((row) => row.attemptId !== null);
const claimRoundAnswer = (answer: Answer) =>
  answer.columns.includes('attemptId') &&
  !answer.columns.includes('recordedDeliveryId') &&
  claimedSome(answer);
// (A lease recovery's answer names leaseToken too, but no attemptId.)
const claimAlongAnswer = (answer: Answer) =>
  answer.columns.includes('recordedDeliveryId') && claimedSome(answer);
const signingKeysAnswer = ({ columns }: Answer) => columns.includes('sealed') && columns.includes('version');
const answers204 = () => () => ({ status: 204 });

/**
 * Messages published to an endpoint with no idempotency contract before the worker starts, and
 * the answer `lost` loses once: each must arrive once, promptly — well inside the 10 s lease, after
 * which recovery would call the attempt `unknown` and park the delivery as failed — and each
 * delivery must have exactly one attempt, a success.
 */
async function lostAnswerCase(
  label: string,
  messages: number,
  lost: ((answer: Answer) => boolean) | { silenced: string },
  { env = {}, withinMs = 5000 } = {},
) {
  const { proxy, herald, receiver, logs, appUid } = await rig(label, env, answers204, { idempotent: false });
  const ids: string[] = [];
  for (let n = 0; n < messages; n++) {
    ids.push((await herald.publish(appUid, { eventType: 'invoice.paid', payload: { n } })).message.id);
  }
  let answerLost = false;
  void (typeof lost === 'function' ? proxy.loseAnswer(lost) : proxy.silenceRequest(lost.silenced)).then(
    () => {
      answerLost = true;
    },
  );
  await herald.startWorker();
  await waitFor('the proxy to lose the answer', () => answerLost, 10_000);
  await waitFor(
    'every delivery to succeed while the leases still run',
    async () => {
      for (const id of ids) if ((await deliveryOf(id)).state !== 'succeeded') return false;
      return true;
    },
    withinMs,
  );
  const metrics = await herald.core.metrics.scrape();
  await herald.close();
  for (const id of ids) {
    const attempts = await attemptsOf((await deliveryOf(id)).id);
    assert.deepEqual(
      attempts.map((a) => a.outcome),
      ['success'],
      `${id}: one attempt, no unknown one`,
    );
  }
  assert.deepEqual(receiver.requests.map((r) => r.headers['webhook-id']).sort(), [...ids].sort());
  return { logs, metrics };
}

test("a claim round's answer lost after it committed: its lease is given back unsent, the webhook goes out once", async () => {
  const { logs, metrics } = await lostAnswerCase('claim_round_lost', 1, claimRoundAnswer);
  assert.equal(count(logs, GAVE_BACK), 1);
  assert.match(metrics, /herald_attempts_not_sent_total\{reason="claim_lost"\} 1\b/);
});

test("an outcome write's claim along lost after it committed: recorded once, the claim given back", async () => {
  // An outcome write claims the endpoint's next message along (one in flight per endpoint): the
  // first such answer that claimed one is lost. The write is retried, recording only; the claimed
  // lease comes back. Five messages: a claim round under way (the tests poll every 50 ms) when an
  // outcome is written leaves the claim to that round, so four outcome writes get the chance.
  const { logs, metrics } = await lostAnswerCase('claim_along_lost', 5, claimAlongAnswer);
  assert.equal(count(logs, GAVE_BACK), 1);
  assert.ok(count(logs, RETRYING) >= 1, 'the outcome write was retried');
  assert.equal(count(logs, DISCARDED), 0, 'the retried write found its outcome recorded');
  assert.match(metrics, /herald_attempts_not_sent_total\{reason="claim_lost"\} 1\b/);
});

test('an outcome write whose connection goes silent is written again on another within the lease: recorded once', async () => {
  // The write never reaches the database, and no reset comes: the client's own query deadline
  // (12 s here) comes after the 10 s lease, so the write must not wait for it. Its next try, half
  // the lease later, records the outcome; without it, recovery would make the attempt unknown.
  const { logs } = await lostAnswerCase(
    'outcome_silent',
    1,
    { silenced: 'record_' },
    {
      env: { HERALD_DB_QUERY_TIMEOUT_MS: '12000' },
      withinMs: 9000,
    },
  );
  assert.ok(count(logs, RETRYING) >= 1, 'the outcome write was tried again');
  assert.equal(count(logs, DISCARDED), 0);
});

test("a claim round whose connection goes silent is given up half a lease on, and the next round's claim sends", async () => {
  // The claim never reaches the database, and no reset comes: the client's query deadline (12 s)
  // comes after the 10 s lease. Given up at 5 s (and given back by its id: nothing to give), the
  // worker claims again in its next round.
  await lostAnswerCase(
    'claim_silent',
    1,
    { silenced: 'claim_deliveries' },
    {
      env: { HERALD_DB_QUERY_TIMEOUT_MS: '12000' },
      withinMs: 9000,
    },
  );
});

test('a stop while the database has gone silent ends once every lease the worker could hold has expired', async () => {
  // The claim round is given up half a lease on, but the claim may still land: its give-back
  // waits for it, which the client's query deadline (60 s) would end. At the lease's end nothing
  // the worker could still write counts, and its connections are dropped, those that never answer
  // their goodbye (test/pg-pool.test.ts) too.
  const { proxy, herald, appUid, logs } = await rig(
    'silent_claim_close',
    {
      HERALD_SHUTDOWN_GRACE_MS: '0',
      HERALD_LEASE_SECONDS: '4',
      HERALD_ATTEMPT_TIMEOUT_MS: '2000',
      HERALD_DB_QUERY_TIMEOUT_MS: '60000',
    },
    answers204,
  );
  const silenced = proxy.silenceRequest('claim_deliveries');
  await herald.publish(appUid, { eventType: 'invoice.paid', payload: { n: 1 } });
  await herald.startWorker();
  await silenced;
  proxy.silenceAll();
  let closed = false;
  void herald.close().then(() => {
    closed = true;
  });
  // A lease (4 s) and a goodbye (1 s), with room for a loaded machine; without them, the query
  // deadline (60 s) at each step.
  await waitFor('close() to end within the lease and a goodbye', () => closed, 20_000);
  assert.equal(
    count(logs, 'stopping: a lease has passed since the stop began; dropping the database connections'),
    1,
  );
  assert.equal(
    count(
      logs,
      'stopping: attempts still in flight after the grace; each ends within the attempt timeout, and its outcome is recorded before exit',
    ),
    0,
    'none was in flight',
  );
  // Nothing of this one may be left due for the tests after it.
  await database.db.query('delete from app where uid = $1', [appUid]);
});

test('signing keys that cannot be read after a claim: its leases are given back unsent', async () => {
  const { logs, metrics } = await lostAnswerCase('keys_lost', 1, signingKeysAnswer);
  assert.equal(count(logs, GAVE_BACK), 1);
  assert.match(metrics, /herald_attempts_not_sent_total\{reason="keys_unavailable"\} 1\b/);
});
