// The soak harness (scripts/soak): first its checker, on small hand-made histories — each check
// must hold on a correct history and fail on a broken one — then a short real soak with a fixed
// seed: its own PostgreSQL cluster, two API and two worker processes, receivers, load and faults.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { type CheckInput, check, type Snapshot } from '../scripts/soak/checker.ts';
import type { PublishOp } from '../scripts/soak/load.ts';
import type { ReceivedRequest } from '../scripts/soak/receivers.ts';

const SOAK = fileURLToPath(new URL('../scripts/soak/main.ts', import.meta.url));
const SEED = 20261130;
const SECONDS = 50;

// ---- the checker on hand-made histories ----------------------------------------------------------

const T = 1_800_000_000_000;

function baseline(): CheckInput {
  const publish: PublishOp = {
    id: 'p0',
    key: 'k0',
    eventType: 'soak.a',
    payload: { n: 0 },
    doubleSubmit: false,
    firstSentAt: T,
    acks: [{ t: T + 20, messageId: 'msg_1' }],
    refusals: [],
    gaveUp: false,
    done: true,
  };
  const request: ReceivedRequest = {
    receiver: 'fast',
    seq: 1,
    webhookId: 'msg_1',
    idempotencyKey: null,
    startedAt: T + 40,
    endedAt: T + 41,
    action: 'answered',
    status: 204,
    applied: 'new',
    signatureOk: true,
    endedBy: 'response',
  };
  const snapshot: Snapshot = {
    takenAt: T + 10_000,
    messages: [
      {
        id: 'msg_1',
        eventType: 'soak.a',
        idempotencyKey: 'k0',
        businessKey: null,
        payload: '{"n":0}',
        createdAt: T + 10,
      },
    ],
    deliveries: [
      {
        id: 'dlv_1',
        messageId: 'msg_1',
        endpointId: 'ep_fast',
        state: 'succeeded',
        cycle: 1,
        attemptsInCycle: 1,
        attemptsTotal: 1,
        nextAttemptAt: null,
        leaseToken: null,
        leaseExpiresAt: null,
        endpointDisabled: false,
        disabledReason: null,
      },
    ],
    attempts: [
      {
        id: 'atmpt_1',
        deliveryId: 'dlv_1',
        messageId: 'msg_1',
        endpointId: 'ep_fast',
        cycle: 1,
        leaseToken: 'lease-1',
        startedAt: T + 30,
        finishedAt: T + 50,
        outcome: 'success',
        statusCode: 204,
        responseClass: 'http_2xx',
      },
    ],
    intakes: [],
  };
  return {
    model: {
      appId: 'app_1',
      appUid: 'soak',
      sourceId: 'src_1',
      sourceUid: 'soak-provider',
      sourceSecret: 'whsec_x',
      endpoints: [
        {
          name: 'fast',
          id: 'ep_fast',
          url: 'http://127.0.0.1:1/hook/fast',
          behaviour: 'fast',
          filterTypes: null,
          late: false,
          createSentAt: T - 1000,
          createdAt: T - 900,
        },
      ],
    },
    publishes: [publish],
    events: [],
    clientRequests: [],
    received: [request],
    faults: [],
    processEvents: [],
    leaseSeconds: 3,
    snapshot,
  };
}

const checksFailing = (input: CheckInput) => [...new Set(check(input).violations.map((v) => v.check))];

describe('soak checker', () => {
  test('a correct history passes', () => {
    const result = check(baseline());
    assert.deepEqual(result.violations, []);
    assert.equal(result.counts['attempts.matched_known'], 1);
    assert.equal(result.counts['deliveries.succeeded'], 1);
  });

  test('1: an acknowledged publish missing from the database', () => {
    const input = baseline();
    input.snapshot.messages = [];
    assert.ok(checksFailing(input).includes('1'));
  });

  test('2: a message without a delivery for a subscribed endpoint', () => {
    const input = baseline();
    input.snapshot.deliveries = [];
    input.snapshot.attempts = [];
    input.received = [];
    assert.deepEqual(checksFailing(input), ['2']);
  });

  test('2: a delivery due long ago that nobody attempted', () => {
    const input = baseline();
    input.snapshot.deliveries[0] = {
      ...input.snapshot.deliveries[0]!,
      state: 'pending',
      attemptsTotal: 0,
      nextAttemptAt: T,
    };
    input.snapshot.attempts = [];
    input.received = [];
    assert.deepEqual(checksFailing(input), ['2']);
  });

  test('3: two requests in flight at one endpoint', () => {
    const input = baseline();
    input.received[0]!.endedAt = T + 500;
    input.received = [
      ...input.received,
      { ...input.received[0]!, seq: 2, startedAt: T + 200, endedAt: T + 210 },
    ];
    input.snapshot.attempts.push({
      ...input.snapshot.attempts[0]!,
      id: 'atmpt_0',
      leaseToken: 'lease-0',
      startedAt: T + 25,
      finishedAt: T + 28,
      outcome: 'unknown',
      statusCode: null,
      responseClass: 'lease_expired',
    });
    input.snapshot.deliveries[0]!.attemptsTotal = 2;
    assert.ok(checksFailing(input).includes('3'));
  });

  test('4: a recorded outcome the receiver never saw, and a request no attempt explains', () => {
    const input = baseline();
    input.snapshot.attempts[0]!.statusCode = 200;
    const violations = check(input).violations.filter((v) => v.check === '4');
    assert.equal(violations.length, 2);
  });

  test('5: an outcome written after a later lease claimed the delivery', () => {
    const input = baseline();
    input.snapshot.attempts.unshift({
      ...input.snapshot.attempts[0]!,
      id: 'atmpt_0',
      leaseToken: 'lease-0',
      startedAt: T + 5,
      finishedAt: T + 2000,
      outcome: 'failure',
      statusCode: null,
      responseClass: 'connect_failed',
    });
    input.snapshot.deliveries[0]!.attemptsTotal = 2;
    assert.deepEqual(checksFailing(input), ['5']);
  });

  test('6: a relayed message sent without its business key', () => {
    const input = baseline();
    input.snapshot.messages[0]!.businessKey = 'ord-1:order.paid';
    assert.ok(checksFailing(input).includes('6'));
    input.received[0]!.idempotencyKey = 'ord-1:order.paid';
    assert.ok(!checksFailing(input).includes('6'));
  });
});

// ---- a short real soak -----------------------------------------------------------------------------

describe('soak', () => {
  const outDir = fs.mkdtempSync(path.join(os.tmpdir(), 'herald-soak-test-'));
  let child: ReturnType<typeof spawn> | null = null;
  // The logs of a failed soak stay behind for a look (the failure message names the directory).
  let passed = false;

  after(async () => {
    // SIGTERM lets the soak stop its processes and its PostgreSQL cluster itself.
    if (child && child.exitCode === null && child.signalCode === null) {
      child.kill('SIGTERM');
      await new Promise((resolve) => child!.once('close', resolve));
    }
    if (passed) fs.rmSync(outDir, { recursive: true, force: true });
  });

  test(`a ${SECONDS} s soak with seed ${SEED} holds every check`, { timeout: 540_000 }, async () => {
    const proc = spawn(
      process.execPath,
      [
        SOAK,
        '--seconds',
        String(SECONDS),
        '--seed',
        String(SEED),
        '--rate',
        '3',
        '--drain-seconds',
        '180',
        '--out',
        outDir,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NODE_TEST_CONTEXT: undefined } },
    );
    child = proc;
    let output = '';
    proc.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
      output += chunk;
    });
    proc.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
      output += chunk;
    });
    const code = await new Promise<number | null>((resolve) => proc.once('close', resolve));
    assert.equal(code, 0, `the soak failed (exit ${code}):\n${output.slice(-12_000)}`);
    const line = output.split('\n').find((l) => l.startsWith('SOAK_RESULT '));
    assert.ok(line, `no SOAK_RESULT line:\n${output.slice(-4000)}`);
    const { counts } = JSON.parse(line.slice('SOAK_RESULT '.length)) as { counts: Record<string, number> };
    const at = (name: string) => counts[name] ?? 0;
    assert.ok(at('publish.acked') >= 40, `publishes acknowledged: ${at('publish.acked')}`);
    assert.ok(
      at('ingest.business_events_acked') >= 10,
      `inbound events: ${at('ingest.business_events_acked')}`,
    );
    assert.ok(at('deliveries.checked') >= 200, `deliveries checked: ${at('deliveries.checked')}`);
    assert.ok(at('faults.injected') >= 5, `faults: ${at('faults.injected')}`);
    for (const kind of ['kill-api', 'kill-worker', 'cut-db', 'pg-restart', 'stop-worker']) {
      assert.ok(at(`faults.${kind}`) >= 1, `no ${kind} fault was injected`);
    }
    assert.ok(at('attempts.unknown_recorded') >= 1, 'no unknown outcome was recorded');
    assert.ok(at('receivers.duplicates_absorbed') >= 1, 'no receiver saw a duplicate');
    assert.ok(at('ingest.duplicate_observations') >= 1, 'no inbound duplicate was observed');
    assert.ok(at('relayed.requests') >= 10, `relayed requests: ${at('relayed.requests')}`);
    passed = true;
  });
});
