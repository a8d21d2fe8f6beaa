// Invariant 11 under interruption: a `herald api` process dies (SIGKILL, at a failpoint or while its
// recording statement runs) at every step of an inbound delivery, and a `herald worker` dies after the relayed request was answered.
// The provider replays the same signed delivery until it gets a 2xx. In every case there is one
// business action (one message for the business key), the receiving endpoint sees one
// Idempotency-Key, and the records explain everything that happened: one observation per receipt
// herald committed, one attempt (success or unknown) per request the receiver saw.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import { Webhook } from 'standardwebhooks';
import { createApp, createEndpoint } from './support/fixtures.ts';
import { startTestHerald, type TestHerald, testEnv } from './support/herald.ts';
import { signedHeaders } from './support/inbound.ts';
import { freePort, killAll, type StartedHerald, startHerald } from './support/processes.ts';
import { type Receiver, startReceiver } from './support/receiver.ts';
import { waitFor, waitForLockWaiter } from './support/wait.ts';

const SOURCE_SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const signer = new Webhook(SOURCE_SECRET.slice('whsec_'.length));
const SOURCE = 'shop';

type Failpoint = 'ingest.before_claim' | 'ingest.after_commit' | 'attempt.after_send';

let t: TestHerald;
let receiver: Receiver;
let sourceId: string;
/** The normal worker of cases 1–4; case 5 replaces it with its own. */
let worker: StartedHerald | null = null;

const env = (extra: Record<string, string> = {}) => testEnv(t.database.url, { LOG_LEVEL: 'info', ...extra });

before(async () => {
  // In-process API (no worker) for the setup; the processes under test share its database.
  t = await startTestHerald('ingest_crash', { worker: false });
  receiver = await startReceiver();
  const app = await createApp(t, 'orders');
  await createEndpoint(t, app, { url: `${receiver.url}/orders` });
  const source = await t.call('POST', '/api/v1/source', {
    uid: SOURCE,
    scheme: 'standard-webhooks',
    secret: SOURCE_SECRET,
    app: 'orders',
    eventType: 'order.changed',
    businessKey: '{{body.order}}:{{body.action}}',
  });
  assert.equal(source.status, 201, JSON.stringify(source.body));
  sourceId = source.body.id;
  worker = await startHerald('worker', env(), { name: 'worker' });
});

after(async () => {
  await killAll();
  await receiver?.close();
  await t?.close();
});

/** The provider's request: same webhook-id and body every time, signed with a fresh timestamp. */
async function send(apiUrl: string, id: string, body: string): Promise<number> {
  const response = await fetch(`${apiUrl}/ingest/${SOURCE}`, {
    method: 'POST',
    headers: signedHeaders(signer, id, body),
    body,
    signal: AbortSignal.timeout(10_000),
  });
  await response.arrayBuffer();
  return response.status;
}

async function startApi(port: number, armed?: Failpoint): Promise<StartedHerald> {
  return startHerald('api', env({ PORT: String(port), ...(armed ? { HERALD_FAILPOINTS: armed } : {}) }), {
    name: armed ? `api (${armed})` : 'api',
  });
}

/** The first delivery meets an armed api: no response at all, and the process is gone. */
async function deliverIntoCrash(port: number, armed: Failpoint, id: string, body: string): Promise<void> {
  const api = await startApi(port, armed);
  await assert.rejects(send(api.apiUrl!, id, body), (error: Error) => {
    assert.notEqual(error.name, 'TimeoutError', 'the connection should drop, not hang');
    return true;
  });
  const exit = await api.proc.waitForExit();
  assert.equal(exit.signal, 'SIGKILL', api.proc.describe());
}

/**
 * The first delivery meets an api whose recording statement waits for a lock held here; the api
 * is SIGKILLed meanwhile (the provider gets no answer), then the statement is `aborted` (its
 * backend terminated) or `completed` (the lock released); returns once the statement is over.
 */
async function deliverIntoCrashMidStatement(
  port: number,
  id: string,
  body: string,
  ending: 'aborted' | 'completed',
): Promise<void> {
  const api = await startApi(port);
  const locker = new pg.Client({ connectionString: t.database.url });
  await locker.connect();
  try {
    await locker.query('begin');
    await locker.query('lock table intake_observation in exclusive mode');
    const answered = send(api.apiUrl!, id, body).then(
      () => 'answered',
      () => 'no answer',
    );
    const backend = await waitForLockWaiter(t.database.db, 'herald_record_receipts');
    const exit = await api.proc.kill('SIGKILL');
    assert.equal(exit.signal, 'SIGKILL');
    assert.equal(await answered, 'no answer');
    if (ending === 'aborted') await t.database.db.query('select pg_terminate_backend($1)', [backend]);
    await locker.query('rollback');
    await waitFor(
      'the recording statement to be over',
      async () =>
        (
          await t.database.db.query(`select 1 from pg_stat_activity where pid = $1 and state = 'active'`, [
            backend,
          ])
        ).rows.length === 0,
      10_000,
    );
  } finally {
    await locker.end();
  }
}

/** The provider replays until it gets a 2xx (a refused connection is retried, like a provider). */
async function replayUntilAcknowledged(apiUrl: string, id: string, body: string): Promise<void> {
  const statuses: number[] = [];
  await waitFor(
    `a 2xx for the replay of ${id}`,
    async () => {
      const status = await send(apiUrl, id, body);
      statuses.push(status);
      return status === 204;
    },
    20_000,
    100,
  );
  assert.deepEqual(
    statuses.filter((s) => s !== 204),
    [],
    'a replay that got an answer got a 204',
  );
}

const count = async (sql: string, params: unknown[] = []) =>
  (await t.database.db.query<{ n: number }>(`select count(*)::int as n from ${sql}`, params)).rows[0]!.n;

async function storedFor(id: string, businessKey: string) {
  return {
    intake: await count('intake where source_id = $1 and delivery_id = $2', [sourceId, id]),
    observations: await count(
      'intake_observation o join intake i on i.id = o.intake_id where i.source_id = $1 and i.delivery_id = $2',
      [sourceId, id],
    ),
    messages: await count('message where business_key = $1', [businessKey]),
  };
}

async function messageOf(id: string): Promise<string> {
  const { rows } = await t.database.db.query<{ message_id: string | null }>(
    'select message_id from intake where source_id = $1 and delivery_id = $2',
    [sourceId, id],
  );
  assert.equal(rows.length, 1, `one intake for ${id}`);
  assert.ok(rows[0]!.message_id, 'the intake names the message it produced');
  return rows[0]!.message_id;
}

async function deliveryState(messageId: string) {
  const { rows } = await t.database.db.query<{ id: string; state: string; leaseExpiresAt: Date | null }>(
    `select id, state, lease_expires_at as "leaseExpiresAt" from delivery where message_id = $1`,
    [messageId],
  );
  assert.equal(rows.length, 1, 'one endpoint, one delivery');
  return rows[0]!;
}

async function attemptsOf(messageId: string) {
  const { rows } = await t.database.db.query<{
    outcome: string | null;
    responseClass: string | null;
    startedAt: Date;
  }>(
    `select outcome, response_class as "responseClass", started_at as "startedAt"
       from attempt where message_id = $1 order by started_at, id`,
    [messageId],
  );
  return rows;
}

const requestsFor = (messageId: string) =>
  receiver.requests.filter((r) => r.path === '/orders' && r.headers['webhook-id'] === messageId);

/** Waits until the relayed message was delivered and its outcome recorded. */
async function relayed(messageId: string, timeoutMs = 20_000): Promise<void> {
  await waitFor(
    `the delivery of ${messageId} to succeed`,
    async () => (await deliveryState(messageId)).state === 'succeeded',
    timeoutMs,
  );
  assert.ok(requestsFor(messageId).length > 0, 'the receiver has the relayed request');
}

/**
 * One business action, and records that explain every receipt and every request:
 * `committedReceipts` counts the receipts herald committed (2xx given or not), `receiverRequests`
 * what the receiver saw.
 */
async function assertAccounted(
  id: string,
  businessKey: string,
  expected: { committedReceipts: number; receiverRequests: number },
): Promise<string> {
  const stored = await storedFor(id, businessKey);
  assert.deepEqual(stored, { intake: 1, observations: expected.committedReceipts, messages: 1 });
  const messageId = await messageOf(id);
  const keyed = await t.database.db.query<{ id: string }>('select id from message where business_key = $1', [
    businessKey,
  ]);
  assert.equal(keyed.rows[0]!.id, messageId, 'the business key names the message the intake produced');
  assert.equal(
    await count(
      'intake_observation o join intake i on i.id = o.intake_id where i.delivery_id = $1 and not o.duplicate',
      [id],
    ),
    1,
    'exactly one receipt is the original',
  );

  const requests = requestsFor(messageId);
  assert.equal(requests.length, expected.receiverRequests);
  assert.deepEqual(new Set(requests.map((r) => r.headers['idempotency-key'])), new Set([businessKey]));
  assert.deepEqual(new Set(requests.map((r) => r.headers['webhook-id'])), new Set([messageId]));

  const attempts = await attemptsOf(messageId);
  assert.deepEqual(
    attempts.filter((a) => a.outcome === null),
    [],
    'no attempt is left open',
  );
  assert.equal(
    attempts.filter((a) => a.outcome === 'success' || a.outcome === 'unknown').length,
    requests.length,
    `the attempts explain every request the receiver saw: ${JSON.stringify(attempts)}`,
  );
  return messageId;
}

/** A fresh api on the same port; the provider replays until acknowledged; then the accounting. */
async function replayAndAccount(
  port: number,
  id: string,
  key: string,
  body: string,
  committedReceipts: number,
) {
  const api = await startApi(port);
  await replayUntilAcknowledged(api.apiUrl!, id, body);
  await relayed(await messageOf(id));
  await assertAccounted(id, key, { committedReceipts, receiverRequests: 1 });
  await api.proc.kill('SIGTERM');
}

describe('the api dies at each step of an inbound delivery; the provider replays', () => {
  test('1. killed before the claim: nothing stored; the replay is the one original receipt', async () => {
    const [id, key, body] = ['evt_crash_1', '1:paid', '{"order":1,"action":"paid"}'];
    const port = await freePort();
    await deliverIntoCrash(port, 'ingest.before_claim', id, body);
    assert.deepEqual(await storedFor(id, key), { intake: 0, observations: 0, messages: 0 });

    await replayAndAccount(port, id, key, body, 1);
  });

  // A receipt is recorded by one call in one transaction (claim, relayed message, fan-out,
  // observation): its atomicity is the database's. The api is killed while that call waits for a
  // lock the test holds; the database then either aborts it or completes it, nothing in between.
  test('2a. killed while its statement runs, which the database aborts: nothing stored; the replay claims it', async () => {
    const [id, key, body] = ['evt_crash_2a', '2a:paid', '{"order":"2a","action":"paid"}'];
    const port = await freePort();
    await deliverIntoCrashMidStatement(port, id, body, 'aborted');
    assert.deepEqual(await storedFor(id, key), { intake: 0, observations: 0, messages: 0 });
    assert.equal(
      await count('delivery d join message m on m.id = d.message_id where m.business_key = $1', [key]),
      0,
    );

    await replayAndAccount(port, id, key, body, 1);
  });

  test('2b. killed while its statement runs, which the database completes: all stored; the replay is a duplicate', async () => {
    const [id, key, body] = ['evt_crash_2b', '2b:paid', '{"order":"2b","action":"paid"}'];
    const port = await freePort();
    await deliverIntoCrashMidStatement(port, id, body, 'completed');
    assert.deepEqual(await storedFor(id, key), { intake: 1, observations: 1, messages: 1 });

    await replayAndAccount(port, id, key, body, 2);
  });

  test('3. killed after COMMIT, before the ACK: the replay is a duplicate; one message, one request', async () => {
    const [id, key, body] = ['evt_crash_3', '3:paid', '{"order":3,"action":"paid"}'];
    const port = await freePort();
    await deliverIntoCrash(port, 'ingest.after_commit', id, body);
    // Committed although the provider saw no 2xx: the record shows a receipt nobody was told of.
    assert.deepEqual(await storedFor(id, key), { intake: 1, observations: 1, messages: 1 });

    await replayAndAccount(port, id, key, body, 2);
    assert.equal(
      await count(
        'intake_observation o join intake i on i.id = o.intake_id where i.delivery_id = $1 and o.duplicate',
        [id],
      ),
      1,
    );
  });

  test('4. killed after the ACK: a replay anyway is a duplicate; still one message', async () => {
    const [id, key, body] = ['evt_crash_4', '4:paid', '{"order":4,"action":"paid"}'];
    const port = await freePort();
    const first = await startApi(port);
    assert.equal(await send(first.apiUrl!, id, body), 204);
    const exit = await first.proc.kill('SIGKILL');
    assert.equal(exit.signal, 'SIGKILL');
    assert.deepEqual(await storedFor(id, key), { intake: 1, observations: 1, messages: 1 });

    await replayAndAccount(port, id, key, body, 2);
  });
});

describe('the worker dies after the relayed request was answered', () => {
  test('5. the lease expires, the attempt is unknown, the retry carries the same keys', async () => {
    // Only the worker under test may claim this delivery.
    if (worker) await worker.proc.kill('SIGTERM');
    worker = null;
    const recovery = { HERALD_LEASE_SECONDS: '2', HERALD_ATTEMPT_TIMEOUT_MS: '1500' };
    const [id, key, body] = ['evt_crash_5', '5:paid', '{"order":5,"action":"paid"}'];
    const port = await freePort();
    const [api, doomed] = await Promise.all([
      startApi(port),
      startHerald('worker', env({ ...recovery, HERALD_FAILPOINTS: 'attempt.after_send' }), {
        name: 'worker (attempt.after_send)',
      }),
    ]);
    assert.equal(await send(api.apiUrl!, id, body), 204);
    const messageId = await messageOf(id);

    const exit = await doomed.proc.waitForExit();
    assert.equal(exit.signal, 'SIGKILL', doomed.proc.describe());
    // The receiver answered, but nothing was recorded: the attempt is open under a live lease.
    assert.equal(requestsFor(messageId).length, 1);
    const held = await deliveryState(messageId);
    assert.equal(held.state, 'sending');
    assert.deepEqual(
      (await attemptsOf(messageId)).map((a) => a.outcome),
      [null],
    );

    await startHerald('worker', env(recovery), { name: 'worker (fresh)' });
    await relayed(messageId);
    const attempts = await attemptsOf(messageId);
    assert.deepEqual(
      attempts.map((a) => [a.outcome, a.responseClass]),
      [
        ['unknown', 'lease_expired'],
        ['success', attempts[1]?.responseClass ?? null],
      ],
    );
    assert.ok(
      attempts[1]!.startedAt >= held.leaseExpiresAt!,
      'the retry waited for the dead worker’s lease to expire',
    );
    const [firstRequest, secondRequest] = requestsFor(messageId);
    assert.equal(firstRequest!.headers['idempotency-key'], key);
    assert.equal(secondRequest!.headers['idempotency-key'], key);
    assert.equal(firstRequest!.headers['webhook-id'], secondRequest!.headers['webhook-id']);
    await assertAccounted(id, key, { committedReceipts: 1, receiverRequests: 2 });
  });
});
