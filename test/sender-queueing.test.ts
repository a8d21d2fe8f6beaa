// Requests that wait for a connection to a shared origin are herald's congestion, never their
// endpoint's failure. The sender lets at most connectionsPerOrigin requests of one origin into
// undici at once (FIFO); a request's deadline starts only when it is let through; a request whose
// startBy passes while it waits comes back `not_started`, unsent; and the worker gives such a
// lease back with its budget instead of recording anything.
//
// The receivers hold each request for a while (that is their behaviour under test, not a sleep of
// the test's); the tests themselves wait only on conditions with deadlines.

import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { after, before, describe, it, test } from 'node:test';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { Webhook as StandardWebhook } from 'standardwebhooks';
import { buildApi } from '../src/api/server.ts';
import { loadConfig } from '../src/config.ts';
import type { ClaimedDelivery } from '../src/db/deliveries.ts';
import type { RetryPolicy } from '../src/domain/retry-policy.ts';
import { steadyNow } from '../src/domain/steady-clock.ts';
import { createHerald, type Herald } from '../src/herald.ts';
import { createOriginGate, type GateEntry } from '../src/sender/origin-gate.ts';
import { createSender, type Resolver, type SenderOptions, type SendResult } from '../src/sender/send.ts';
import { runAttempt } from '../src/worker/attempt.ts';
import { freshDatabase, type TestDatabase } from './support/database.ts';
import { createApp, createEndpoint, publishVia } from './support/fixtures.ts';
import { ADMIN_KEY, startTestHerald, testEnv } from './support/herald.ts';
import { startReceiver } from './support/receiver.ts';
import { waitFor } from './support/wait.ts';

const toLoopback: Resolver = async () => [{ address: '127.0.0.1', family: 4 }];

interface Arrival {
  path: string;
  body: string;
  webhookId: string | undefined;
  headers: http.IncomingHttpHeaders;
  at: number;
}

interface HoldingReceiver {
  url: string;
  arrivals: Arrival[];
  /** Most requests in flight at once, over all paths. */
  maxInFlight: () => number;
  close(): Promise<void>;
}

/** A receiver that answers every request `status` after holding it `holdMs`. */
async function startHoldingReceiver(holdMs: number, status = 204): Promise<HoldingReceiver> {
  const arrivals: Arrival[] = [];
  let inFlight = 0;
  let maxInFlight = 0;
  const server = http.createServer((req, res) => {
    inFlight++;
    maxInFlight = Math.max(maxInFlight, inFlight);
    res.on('close', () => inFlight--);
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const id = req.headers['webhook-id'];
      arrivals.push({
        path: req.url ?? '/',
        body: Buffer.concat(chunks).toString('utf8'),
        webhookId: typeof id === 'string' ? id : undefined,
        headers: req.headers,
        at: Date.now(),
      });
      setTimeout(() => res.writeHead(status).end(), holdMs);
    });
  });
  server.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    arrivals,
    maxInFlight: () => maxInFlight,
    async close() {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

function senderFor(overrides: Partial<SenderOptions>) {
  return createSender({
    allowPrivateNetworks: ['127.0.0.0/8'],
    timeoutMs: 3000,
    resolve: toLoopback,
    ...overrides,
  });
}

/** With one connection per origin, a request that may wait only briefly gets the place: none is held. */
async function assertPlaceFree(sender: ReturnType<typeof senderFor>, url: string): Promise<void> {
  const next = await sender.send({ url, headers: {}, body: '{}', startBy: new Date(steadyNow() + 500) });
  assert.equal(next.kind, 'attempted', describeResult(next));
}

const describeResult = (r: SendResult) =>
  r.kind === 'not_started'
    ? `not_started after ${r.queuedMs} ms`
    : `${r.outcome}/${r.responseClass} (queued ${r.queuedMs} ms, took ${r.durationMs} ms)`;

describe('origin gate', () => {
  it('lets `limit` in per origin, queues the rest FIFO, and hands places on in order', async () => {
    const gate = createOriginGate(2);
    const a1 = await gate.enter('http://a');
    const a2 = await gate.enter('http://a');
    assert.ok(a1.entered && a2.entered);
    const order: number[] = [];
    const waiting = [3, 4, 5].map((n) =>
      gate.enter('http://a').then((entry) => {
        order.push(n);
        return entry;
      }),
    );
    // Another origin is not held up by a full one.
    const b = await gate.enter('http://b');
    assert.ok(b.entered);
    b.leave();
    assert.deepEqual(order, [], 'nobody passes a full origin');
    a1.leave();
    const third = await waiting[0]!;
    assert.ok(third.entered);
    a2.leave();
    a2.leave(); // leaving twice frees one place only
    const fourth = await waiting[1]!;
    assert.ok(fourth.entered);
    assert.deepEqual(order, [3, 4]);
    third.leave();
    const fifth = await waiting[2]!;
    assert.ok(fifth.entered);
    assert.deepEqual(order, [3, 4, 5]);
    fourth.leave();
    fifth.leave();
    assert.equal(gate.origins, 0, 'an idle origin leaves nothing behind');
    await gate.idle();
  });

  it('turns a waiter away at its startBy, without holding up those behind it; refuses a startBy already past', async () => {
    const gate = createOriginGate(1);
    const inside = await gate.enter('http://a');
    assert.ok(inside.entered);
    const t0 = steadyNow();
    const soon = gate.enter('http://a', new Date(t0 + 150));
    const patient = gate.enter('http://a');
    const expired = await soon;
    assert.equal(expired.entered, false);
    assert.ok(steadyNow() - t0 >= 140, 'turned away at its startBy, not before');
    assert.equal(gate.origins, 1);
    inside.leave();
    const next = await patient;
    assert.ok(next.entered, 'the one behind it takes the free place');
    next.leave();
    assert.equal(gate.origins, 0);

    const late: GateEntry = await gate.enter('http://a', new Date(steadyNow() - 1));
    assert.equal(late.entered, false);
    assert.equal(gate.origins, 0, 'a refused request leaves no lane behind');
  });

  it('turns each waiter away at its own startBy, whatever the order they came in, on any origin', async () => {
    const gate = createOriginGate(1);
    const inA = await gate.enter('http://a');
    const inB = await gate.enter('http://b');
    assert.ok(inA.entered && inB.entered);
    const t0 = steadyNow();
    const at = new Map<string, number>();
    const wait = (origin: string, name: string, afterMs: number) =>
      gate.enter(origin, new Date(t0 + afterMs)).then((entry) => {
        at.set(name, steadyNow() - t0);
        return entry;
      });
    // The latest limit first: an earlier one that comes in after it must not wait for it.
    const late = wait('http://a', 'late', 400);
    const early = wait('http://b', 'early', 100);
    const middle = wait('http://a', 'middle', 250);
    for (const entry of await Promise.all([late, early, middle])) assert.equal(entry.entered, false);
    for (const [name, limit] of [
      ['early', 100],
      ['middle', 250],
      ['late', 400],
    ] as const) {
      const waited = at.get(name)!;
      assert.ok(
        waited >= limit - 10 && waited < limit + 100,
        `${name} turned away after ${waited} ms (at ${limit})`,
      );
    }
    inA.leave();
    inB.leave();
    assert.equal(gate.origins, 0, 'no lane is left behind');
    await gate.idle();
  });

  it('closed doors turn away every waiter with a startBy and any that comes later; opened, they let requests in again', async () => {
    const gate = createOriginGate(1);
    const inside = await gate.enter('http://a');
    assert.ok(inside.entered);
    const limited = gate.enter('http://a', new Date(steadyNow() + 60_000));
    const unlimited = gate.enter('http://a');
    gate.closeDoors();
    assert.equal((await limited).entered, false, 'a waiter with a startBy leaves at once');
    assert.equal((await gate.enter('http://b', new Date(steadyNow() + 60_000))).entered, false);
    inside.leave();
    const patient = await unlimited;
    assert.ok(patient.entered, 'one without a startBy still gets its turn');
    patient.leave();
    gate.openDoors();
    const again = await gate.enter('http://a', new Date(steadyNow() + 60_000));
    assert.ok(again.entered);
    again.leave();
    await gate.idle();
  });

  it('turns away a waiter whose startBy passed by the time a place is handed to it', async () => {
    const gate = createOriginGate(1);
    const inside = await gate.enter('http://a');
    assert.ok(inside.entered);
    // The place is handed on synchronously in leave(); block the event loop past startBy first
    // so that the waiter's timer cannot have fired.
    const waiter = gate.enter('http://a', new Date(steadyNow() + 30));
    const until = steadyNow() + 60;
    while (steadyNow() <= until) {
      // busy wait: the timer must not get its turn
    }
    inside.leave();
    assert.equal((await waiter).entered, false);
    assert.equal(gate.origins, 0);
  });
});

describe('sender: waiting for a connection is not the attempt', () => {
  const HOLD_MS = 300;
  let receiver: HoldingReceiver;
  before(async () => {
    receiver = await startHoldingReceiver(HOLD_MS);
  });
  after(async () => {
    await receiver.close();
  });

  it('(a) with one connection, queued requests without startBy all succeed, each within its own deadline', async () => {
    // Six requests of 300 ms through one connection take 1.8 s; the deadline is 1 s (room for a
    // slow answer on a busy host). Had the deadline run while they queued, the fourth and later
    // would have ended in a timeout.
    const sender = senderFor({ connectionsPerOrigin: 1, timeoutMs: 1000 });
    try {
      const results = await Promise.all(
        [1, 2, 3, 4, 5, 6].map((i) =>
          sender.send({ url: `${receiver.url}/a/${i}`, headers: {}, body: `{"i":${i}}` }),
        ),
      );
      for (const r of results) {
        assert.equal(r.outcome, 'success', describeResult(r));
        assert.ok(r.durationMs < 1000, describeResult(r));
      }
      assert.ok(
        results.some((r) => r.queuedMs >= 3 * HOLD_MS),
        `some requests queued behind others: ${results.map(describeResult).join(', ')}`,
      );
    } finally {
      await sender.close();
    }
  });

  it('(a, b) with startBy: each request succeeds or comes back not_started, in FIFO order; a not-started one never reaches the receiver', async () => {
    const sender = senderFor({ connectionsPerOrigin: 1, timeoutMs: 1000 });
    try {
      const t0 = steadyNow();
      // Request k can start no earlier than (k - 1) × 300 ms: the 6th and 7th (1.5 s, 1.8 s) cannot
      // start by 1.4 s; the first ones surely can.
      const startBy = new Date(t0 + 1400);
      // When each came back: a request is turned away at its startBy, not before (its queuedMs
      // counts from when it reached its origin's queue, later than t0 on a busy host).
      const settledAt: number[] = [];
      const sends = [1, 2, 3, 4, 5, 6, 7].map((i) =>
        sender
          .send({ url: `${receiver.url}/b/${i}`, headers: {}, body: `{"b":${i}}`, startBy })
          .finally(() => {
            settledAt[i - 1] = steadyNow();
          }),
      );
      const results = await Promise.all(sends);
      const summary = results.map(describeResult).join(', ');
      const kinds = results.map((r) => (r.kind === 'attempted' ? r.outcome : r.kind));
      for (const kind of kinds) assert.ok(kind === 'success' || kind === 'not_started', summary);
      const firstUnstarted = kinds.indexOf('not_started');
      assert.ok(firstUnstarted >= 2, `the first two start in time: ${summary}`);
      assert.ok(
        kinds.slice(firstUnstarted).every((k) => k === 'not_started'),
        `FIFO: once one is turned away, those behind it are too: ${summary}`,
      );
      assert.deepEqual(kinds.slice(5), ['not_started', 'not_started'], summary);
      results.forEach((r, k) => {
        if (r.kind !== 'not_started') return;
        assert.equal(r.requestSent, false);
        assert.ok(settledAt[k]! >= startBy.getTime(), `turned away at its startBy: ${summary}`);
      });

      // One more request through the same single connection, with no startBy: once it is answered,
      // anything queued before it has reached the receiver — so what has not, never will.
      const sentinel = await sender.send({ url: `${receiver.url}/b/sentinel`, headers: {}, body: '{}' });
      assert.equal(sentinel.outcome, 'success');
      const seen = new Set(receiver.arrivals.filter((a) => a.path.startsWith('/b/')).map((a) => a.path));
      results.forEach((r, k) => {
        const path = `/b/${k + 1}`;
        assert.equal(
          seen.has(path),
          r.kind === 'attempted',
          `${path} (${describeResult(r)}) reached the receiver?`,
        );
      });
    } finally {
      await sender.close();
    }
  });

  it('makes the headers of headersAtSend once the request has its place, and sends them over the others', async () => {
    const sender = senderFor({ connectionsPerOrigin: 1, timeoutMs: 1000 });
    try {
      const madeAt: number[] = [];
      const send = (i: number) =>
        sender.send({
          url: `${receiver.url}/at-send/${i}`,
          headers: { 'x-made': 'when queued' },
          headersAtSend: () => {
            madeAt[i] = Date.now();
            return { 'x-made': `when sent ${i}` };
          },
          body: '{}',
        });
      const results = await Promise.all([send(0), send(1)]);
      for (const r of results) assert.equal(r.outcome, 'success', describeResult(r));
      const arrived = (i: number) => receiver.arrivals.find((a) => a.path === `/at-send/${i}`)!;
      assert.deepEqual(
        [arrived(0).headers['x-made'], arrived(1).headers['x-made']],
        ['when sent 0', 'when sent 1'],
      );
      // The receiver holds the first for HOLD_MS, and the second waits for the one connection.
      assert.ok(
        madeAt[1]! >= arrived(0).at + HOLD_MS - 20,
        `second made ${madeAt[1]! - arrived(0).at} ms after the first arrived`,
      );
    } finally {
      await sender.close();
    }
  });

  it('gives the place back when headersAtSend throws, for the request behind it', async () => {
    const sender = senderFor({ connectionsPerOrigin: 1, timeoutMs: 1000 });
    try {
      await assert.rejects(
        sender.send({
          url: `${receiver.url}/throws`,
          headers: {},
          headersAtSend: () => {
            throw new Error('no signature');
          },
          body: '{}',
        }),
        /no signature/,
      );
      await assertPlaceFree(sender, `${receiver.url}/after-throw`);
    } finally {
      await sender.close();
    }
  });

  it('refuses a Host from headersAtSend as from headers, unsent, and gives the place back', async () => {
    const sender = senderFor({ connectionsPerOrigin: 1, timeoutMs: 1000 });
    try {
      const refused = await sender.send({
        url: `${receiver.url}/host-at-send`,
        headers: {},
        headersAtSend: () => ({ Host: 'elsewhere.example' }),
        body: '{}',
      });
      assert.equal(refused.kind === 'attempted' && refused.responseClass, 'invalid_request');
      assert.equal(refused.requestSent, false);
      assert.equal(
        receiver.arrivals.some((a) => a.path === '/host-at-send'),
        false,
      );
      await assertPlaceFree(sender, `${receiver.url}/after-host`);
    } finally {
      await sender.close();
    }
  });

  it('(b) a startBy already past sends nothing at all', async () => {
    const sender = senderFor({ connectionsPerOrigin: 1, timeoutMs: 500 });
    try {
      const late = await sender.send({
        url: `${receiver.url}/c/late`,
        headers: {},
        body: '{}',
        startBy: new Date(steadyNow() - 1),
      });
      assert.equal(late.kind, 'not_started');
      const sentinel = await sender.send({ url: `${receiver.url}/c/sentinel`, headers: {}, body: '{}' });
      assert.equal(sentinel.outcome, 'success');
      assert.equal(receiver.arrivals.filter((a) => a.path === '/c/late').length, 0);
    } finally {
      await sender.close();
    }
  });

  it('one busy origin does not hold up another', async () => {
    const other = await startHoldingReceiver(0);
    const sender = senderFor({ connectionsPerOrigin: 1, timeoutMs: 2000 });
    try {
      const busy = sender.send({ url: `${receiver.url}/d/1`, headers: {}, body: '{}' });
      const queued = sender.send({ url: `${receiver.url}/d/2`, headers: {}, body: '{}' });
      const elsewhere = await sender.send({ url: `${other.url}/d/3`, headers: {}, body: '{}' });
      assert.equal(elsewhere.outcome, 'success');
      assert.ok(elsewhere.queuedMs < HOLD_MS, `queued ${elsewhere.queuedMs} ms behind another origin`);
      const [a, b] = await Promise.all([busy, queued]);
      assert.equal(a.outcome, 'success');
      assert.equal(b.outcome, 'success');
    } finally {
      await sender.close();
      await other.close();
    }
  });

  it('close() waits for requests still queued at the gate, as for those inside undici', async () => {
    const sender = senderFor({ connectionsPerOrigin: 1, timeoutMs: 2000 });
    const sends = [1, 2, 3].map((i) =>
      sender.send({ url: `${receiver.url}/e/${i}`, headers: {}, body: '{}' }),
    );
    await sender.close();
    const results = await Promise.all(sends);
    assert.deepEqual(
      results.map((r) => r.outcome),
      ['success', 'success', 'success'],
      results.map(describeResult).join(', '),
    );
  });
});

// ---- the worker ------------------------------------------------------------------------------------

const ENDPOINTS = 24;
const MESSAGES = 2;
const WORKER_HOLD_MS = 250;

describe('attempt: a request that waited for its origin is signed as it leaves', () => {
  const HOLD = 1200;
  let receiver: HoldingReceiver;
  before(async () => {
    receiver = await startHoldingReceiver(HOLD);
  });
  after(async () => {
    await receiver.close();
  });

  it('its timestamp is the second it left, and its signature verifies against it', async () => {
    const sender = senderFor({ connectionsPerOrigin: 1 });
    const key = crypto.randomBytes(24);
    const claim = (i: number): ClaimedDelivery => ({
      deliveryId: `dlv_${i}`,
      attemptId: `atmpt_${i}`,
      leaseToken: crypto.randomUUID(),
      leaseExpiresAt: new Date(Date.now() + 60_000),
      leaseEndsBy: new Date(steadyNow() + 60_000),
      appId: 'app_signed',
      messageId: `msg_${i}`,
      endpointId: `ep_${i}`,
      cycle: 1,
      attemptsInCycle: 1,
      trigger: 'scheduled',
      url: `${receiver.url}/signed/${i}`,
      headers: {},
      secretVersion: 1,
      idempotent: false,
      clientErrorPolicy: 'retry',
      eventType: 'e',
      payload: Buffer.from(`{"i":${i}}`),
      messageCreatedAt: new Date(),
      businessKey: null,
      throttle: null,
    });
    const policy: RetryPolicy = { schedule: [5], jitter: 0 };
    // Each attempt's clock, read only to sign (a success asks it nothing else).
    const signedAt: number[] = [];
    const clockOf = (i: number) => () => {
      signedAt[i] = Date.now();
      return new Date(signedAt[i]!);
    };
    try {
      // Both claimed at once; the second waits HOLD ms for the one connection.
      const runs = await Promise.all(
        [0, 1].map((i) =>
          runAttempt(
            { sender, policy, now: clockOf(i) },
            claim(i),
            { keys: [key], headers: {} },
            new Date(steadyNow() + 30_000),
          ),
        ),
      );
      for (const run of runs) assert.equal(run.kind === 'finished' && run.outcome, 'success');
      const arrived = [0, 1].map((i) => receiver.arrivals.find((a) => a.path === `/signed/${i}`)!);
      // The receiver answers the first HOLD ms after it arrived; only then is the place free.
      assert.ok(
        signedAt[1]! >= arrived[0]!.at + HOLD - 20,
        `the second was signed ${signedAt[1]! - arrived[0]!.at} ms after the first arrived`,
      );
      for (const [i, a] of arrived.entries()) {
        assert.equal(Number(a.headers['webhook-timestamp']), Math.floor(signedAt[i]! / 1000));
        assert.ok(signedAt[i]! <= a.at, `request ${i} was signed before it arrived`);
        const headers = Object.fromEntries(
          ['webhook-id', 'webhook-timestamp', 'webhook-signature'].map((h) => [h, String(a.headers[h])]),
        );
        assert.deepEqual(new StandardWebhook(key.toString('base64')).verify(a.body, headers), { i });
      }
    } finally {
      await sender.close();
    }
  });
});

describe('worker: many endpoints on one origin, more claims than connections', () => {
  let database: TestDatabase;
  let herald: Herald;
  let api: FastifyInstance;
  let apiUrl = '';
  let receiver: HoldingReceiver;
  const logs: { level: number; msg: string; [key: string]: unknown }[] = [];

  before(async () => {
    database = await freshDatabase('sender_queueing');
    receiver = await startHoldingReceiver(WORKER_HOLD_MS);
    const config = loadConfig(
      testEnv(database.url, {
        // 16 claims, 2 connections: a claimed request waits for up to ~8 × 250 ms at the gate, well
        // past a 1 s deadline. A lease of 2 s lets a request start up to 1 s after its claim, so
        // some wait past that too and are given back unsent. (250 ms held vs a 1 s deadline leaves
        // a busy CI host room: a slow answer must not end as a timeout.)
        HERALD_WORKER_CONCURRENCY: '16',
        HERALD_CONNECTIONS_PER_ORIGIN: '2',
        HERALD_ATTEMPT_TIMEOUT_MS: '1000',
        HERALD_LEASE_SECONDS: '2',
        // Two known failures would disable an endpoint: any queueing blamed on one shows.
        HERALD_DISABLE_AFTER_FAILURES: '2',
      }),
    );
    const stream = new Writable({
      write(chunk: Buffer, _encoding, done) {
        for (const line of chunk.toString('utf8').split('\n')) if (line) logs.push(JSON.parse(line));
        done();
      },
    });
    herald = await createHerald({ config, logger: pino({ level: 'info' }, stream), migrate: false });
    api = await buildApi(herald.core);
    await api.listen({ port: 0, host: '127.0.0.1' });
    apiUrl = `http://127.0.0.1:${(api.server.address() as AddressInfo).port}`;
  });

  after(async () => {
    await api?.close();
    await herald?.close();
    await receiver?.close();
    await database?.drop();
  });

  // biome-ignore lint/suspicious/noExplicitAny: tests inspect JSON responses loosely
  async function call(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
    const response = await fetch(apiUrl + path, {
      method,
      headers: { authorization: `Bearer ${ADMIN_KEY}`, 'content-type': 'application/json' },
      body: body === undefined ? null : JSON.stringify(body),
    });
    const text = await response.text();
    return { status: response.status, body: text ? JSON.parse(text) : null };
  }

  test('(c) no attempt fails for queueing, no endpoint is disabled, every delivery succeeds once', async () => {
    const app = await call('POST', '/api/v1/app', { name: 'queueing', uid: 'queueing' });
    assert.equal(app.status, 201, JSON.stringify(app.body));
    const endpoints: string[] = [];
    for (let i = 0; i < ENDPOINTS; i++) {
      const created = await call('POST', `/api/v1/app/${app.body.id}/endpoint`, {
        url: `${receiver.url}/ep/${i}`,
      });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      endpoints.push(created.body.id);
    }
    const messages: string[] = [];
    for (let m = 0; m < MESSAGES; m++) {
      const published = await call('POST', `/api/v1/app/${app.body.id}/msg`, {
        eventType: 'e',
        payload: { m },
      });
      assert.equal(published.status, 202, JSON.stringify(published.body));
      messages.push(published.body.id);
    }
    await herald.startWorker();

    const total = ENDPOINTS * MESSAGES;
    const db = database.db;
    // Done when every delivery succeeded — or as soon as the old behaviour shows: an attempt
    // recorded as a failure or unknown (a request blamed for waiting at herald).
    const blamed = await waitFor(
      `all ${total} deliveries to succeed`,
      async () => {
        const bad = await db.query<{ outcome: string; response_class: string }>(
          "select outcome, response_class from attempt where outcome in ('failure', 'unknown')",
        );
        if (bad.rows.length > 0) return bad.rows;
        const { rows } = await db.query<{ n: number }>(
          "select count(*)::int as n from delivery where state = 'succeeded'",
        );
        return rows[0]!.n === total ? [] : null;
      },
      60_000,
      50,
    );
    assert.deepEqual(blamed, [], 'no attempt recorded as a failure or unknown');

    const attempts = await db.query<{ outcome: string | null; response_class: string | null }>(
      'select outcome, response_class from attempt',
    );
    assert.equal(attempts.rows.length, total, 'one attempt per delivery: the ones given back left none');
    assert.ok(
      attempts.rows.every((a) => a.outcome === 'success'),
      JSON.stringify(attempts.rows.filter((a) => a.outcome !== 'success')),
    );
    const deliveries = await db.query<{ attempts_total: number; attempts_in_cycle: number }>(
      'select attempts_total, attempts_in_cycle from delivery',
    );
    assert.ok(
      deliveries.rows.every((d) => d.attempts_total === 1 && d.attempts_in_cycle === 1),
      'a lease given back unsent returns its attempt to the budget',
    );
    const disabled = await db.query('select id from endpoint where disabled or consecutive_failures > 0');
    assert.deepEqual(disabled.rows, [], 'no endpoint disabled or marked failing');

    // The receiver saw each delivery once, and never more than connectionsPerOrigin at a time.
    assert.equal(receiver.arrivals.length, total);
    const pairs = new Set(receiver.arrivals.map((a) => `${a.webhookId} ${a.path}`));
    assert.equal(pairs.size, total, 'no delivery was sent twice');
    for (const m of messages) {
      for (let i = 0; i < ENDPOINTS; i++) assert.ok(pairs.has(`${m} /ep/${i}`), `${m} reached /ep/${i}`);
    }
    assert.ok(
      receiver.maxInFlight() <= 2,
      `at most 2 requests at the origin at once, saw ${receiver.maxInFlight()}`,
    );

    // The congestion was real, and was reported as herald's own: some leases went back unsent
    // (a warning), nothing was logged as an error, and only recorded outcomes were counted.
    const congested = logs.filter((l) => l.msg.startsWith('congested'));
    assert.ok(congested.length > 0, 'some requests waited past their start limit and were given back');
    assert.ok(congested.every((l) => l.level === 40));
    assert.deepEqual(
      logs.filter((l) => l.level >= 50).map((l) => l.msg),
      [],
      'nothing was logged as an error',
    );
    const counted = await herald.core.metrics.registry.getSingleMetric('herald_attempts_total')?.get();
    // Series that were counted (herald's own failures are exposed at 0 from the start).
    const byOutcome = Object.fromEntries(
      (counted?.values ?? []).filter((v) => v.value > 0).map((v) => [v.labels['outcome'], v.value]),
    );
    assert.deepEqual(byOutcome, { success: total }, 'not-started attempts are not counted as attempts');
    const notSent = await herald.core.metrics.registry
      .getSingleMetric('herald_attempts_not_sent_total')
      ?.get();
    const congestedCount = (notSent?.values ?? []).find((v) => v.labels['reason'] === 'origin_congested');
    assert.equal(congestedCount?.value, congested.length, 'each one given back is counted, by reason');
    const firstAttempts = await herald.core.metrics.registry
      .getSingleMetric('herald_publish_to_first_attempt_seconds')
      ?.get();
    const observed = (firstAttempts?.values ?? []).find((v) =>
      (v as { metricName?: string }).metricName?.endsWith('_count'),
    )?.value;
    assert.equal(
      observed,
      total,
      'each delivery’s first attempt observed once, however often it was given back',
    );
  });
});

describe('worker: a request starts only while its deadline and its outcome’s recording fit in its lease', () => {
  test('a request that waited for its origin past that limit is given back, though its deadline alone still fitted', async () => {
    // Lease 10 s, deadline 4 s: the worker keeps 3 s (half of the 6 s beyond the deadline) to
    // record the outcome, so a request may start up to 3 s after its claim — not up to 6 s, which
    // would leave nothing to retry the outcome's write with. Two endpoints share one connection;
    // the first request hangs until its deadline (4 s), and the other waits past its limit.
    const receiver = await startReceiver((_request, n) => (n === 1 ? 'hang' : { status: 204 }));
    const s = await startTestHerald('start_limit', {
      env: {
        HERALD_CONNECTIONS_PER_ORIGIN: '1',
        HERALD_LEASE_SECONDS: '10',
        HERALD_ATTEMPT_TIMEOUT_MS: '4000',
      },
    });
    try {
      const app = await createApp(s, 'limit');
      const endpoints = new Map<string, string>();
      for (const path of ['/a', '/b'])
        endpoints.set(path, await createEndpoint(s, app, { url: `${receiver.url}${path}` }));
      await publishVia(s, app, { eventType: 'e', payload: {} });
      await waitFor('both requests to arrive', () => receiver.requests.length === 2, 20_000);
      const waited = receiver.requests[1]!;
      const { rows } = await s.database.db.query<{ startedAt: Date }>(
        `select a.started_at as "startedAt" from attempt a join delivery d on d.id = a.delivery_id
          where d.endpoint_id = $1 order by a.started_at desc limit 1`,
        [endpoints.get(waited.path)],
      );
      const afterClaimMs = waited.startedAt - rows[0]!.startedAt.getTime();
      assert.ok(afterClaimMs < 3000, `${waited.path} was sent ${afterClaimMs} ms after its attempt's claim`);
      const notSent = await s.herald.core.metrics.registry
        .getSingleMetric('herald_attempts_not_sent_total')
        ?.get();
      const congested = (notSent?.values ?? []).find((v) => v.labels['reason'] === 'origin_congested')?.value;
      assert.ok((congested ?? 0) >= 1, 'given back unsent at its limit, then claimed again');
    } finally {
      await s.close();
      await receiver.close();
    }
  });
});
