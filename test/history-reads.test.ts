// Reads whose cost grows with the history (endpoint stats, list pages over messages and attempts)
// must not take the API's whole pool: one caller's concurrent reads, stalled in the database,
// leave connections for every other call, the surplus is refused at once as `overloaded`, and
// another caller's read waits its turn instead of being refused.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import { createHistoryReads } from '../src/api/history-reads.ts';
import { HeraldError } from '../src/errors.ts';
import { ADMIN_KEY, startTestHerald, type TestHerald } from './support/herald.ts';
import { waitFor, waitForLockWaiter } from './support/wait.ts';

describe('the gate in front of reads of history', () => {
  test('lets `running` through, hands each freed place to the first in line, refuses past a share or a full queue', async () => {
    const gate = createHistoryReads({ running: 1, waiting: 2, perCaller: 2 });
    const order: string[] = [];
    let open!: () => void;
    const stalled = new Promise<void>((resolve) => {
      open = resolve;
    });
    const first = gate.run('a', async () => {
      await stalled;
      order.push('a1');
    });
    const second = gate.run('b', async () => order.push('b1'));
    const third = gate.run('a', async () => order.push('a2'));
    // 'a' holds its share (one running, one waiting); the queue holds two.
    await assert.rejects(
      gate.run('a', async () => order.push('a3')),
      overloaded(/from this caller/),
    );
    await assert.rejects(
      gate.run('c', async () => order.push('c1')),
      overloaded(/waiting/),
    );
    open();
    await Promise.all([first, second, third]);
    assert.deepEqual(order, ['a1', 'b1', 'a2']);
    // Every place was given back: as many run again as before.
    await gate.run('a', async () => order.push('a4'));
    assert.deepEqual(order, ['a1', 'b1', 'a2', 'a4']);
  });

  test('a read that fails gives its place back', async () => {
    const gate = createHistoryReads({ running: 1, waiting: 0, perCaller: 1 });
    await assert.rejects(
      gate.run('a', async () => {
        throw new Error('the database went away');
      }),
      /went away/,
    );
    assert.equal(await gate.run('a', async () => 'read'), 'read');
  });
});

let t: TestHerald;

describe('reads of history stalled in the database', () => {
  let locker: pg.Client;
  let appId: string;
  let endpointId: string;
  let readKey: string;

  before(async () => {
    // The tests' pool of 6 connections: one read of history at a time, four waiting.
    t = await startTestHerald('history_reads', { worker: false });
    appId = (await t.call('POST', '/api/v1/app', { name: 'stats' })).body.id;
    endpointId = (await t.call('POST', `/api/v1/app/${appId}/endpoint`, { url: 'http://127.0.0.1:9/hook' }))
      .body.id;
    assert.equal(
      (await t.call('POST', `/api/v1/app/${appId}/msg`, { eventType: 'a.b', payload: {} })).status,
      202,
    );
    const key = await t.call('POST', '/api/v1/api-key', { name: 'dashboard', scopes: ['read'] });
    assert.equal(key.status, 201);
    readKey = key.body.key;
    locker = new pg.Client({ connectionString: t.database.url });
    await locker.connect();
  });
  after(async () => {
    await locker.end();
    await t.close();
  });

  test("leave the pool to every other call, refuse one caller's surplus and queue another's", async () => {
    const statsPath = `/api/v1/app/${appId}/endpoint/${endpointId}/stats`;
    // Every read of deliveries waits behind this lock, holding its connection, as a count over
    // a long history would.
    await locker.query('begin');
    await locker.query('lock table delivery in access exclusive mode');
    const settled: Answer[] = [];
    const calls = Array.from({ length: 6 }, async () => {
      const settling = await answer(t.url + statsPath);
      settled.push(settling);
      return settling;
    });

    // One runs (waiting for the lock); the other five are refused now, not when the lock goes.
    await waitForLockWaiter(t.database.db, 'from delivery');
    await waitFor('the surplus to be refused', () => settled.length === 5, 5_000);
    for (const refused of settled) {
      assert.equal(refused.status, 503);
      assert.equal(refused.body.code, 'overloaded');
      assert.equal(refused.retryAfter, '1');
    }
    assert.equal(await metric('herald_history_reads_refused_total'), 5);
    // The pool still serves everything else.
    let app: { status: number } | undefined;
    void t.call('GET', `/api/v1/app/${appId}`).then((a) => {
      app = a;
    });
    await waitFor('another call to be answered', () => app, 5_000);
    assert.equal(app!.status, 200);
    // Another caller waits its turn rather than being refused.
    const other = answer(`${t.url}/api/v1/app/${appId}/msg`, readKey);
    await waitFor(
      'the other caller to wait its turn',
      async () => (await metric('herald_history_reads_waiting')) === 1,
      5_000,
    );

    await locker.query('commit');
    const admitted = (await Promise.all(calls)).filter((a) => a.status === 200);
    assert.equal(admitted.length, 1);
    assert.equal(admitted[0]!.body.pending, 1);
    const page = await other;
    assert.equal(await metric('herald_history_reads_waiting'), 0);
    assert.equal(page.status, 200, JSON.stringify(page.body));
  });
});

async function metric(name: string): Promise<number> {
  const found = t.herald.core.metrics.registry.getSingleMetric(name);
  return (await found!.get()).values[0]!.value;
}

function overloaded(detail: RegExp) {
  return (error: unknown) =>
    error instanceof HeraldError && error.kind === 'overloaded' && detail.test(error.message);
}

interface Answer {
  status: number;
  body: { code?: string; pending?: number };
  retryAfter: string | null;
}

async function answer(url: string, key = ADMIN_KEY): Promise<Answer> {
  const response = await fetch(url, { headers: { authorization: `Bearer ${key}` } });
  return {
    status: response.status,
    body: (await response.json()) as Answer['body'],
    retryAfter: response.headers.get('retry-after'),
  };
}
