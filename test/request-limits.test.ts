// What a sender who trickles bodies can hold: a request not received whole within
// HERALD_REQUEST_TIMEOUT_MS loses its connection, and the bytes of inbound bodies being received at
// once are bounded (32 × HERALD_INGEST_MAX_BODY_BYTES): past that a sender is answered 503 before
// its body is read, and its neighbours' bodies in flight are not lost.

import assert from 'node:assert/strict';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { Webhook } from 'standardwebhooks';
import { createApp } from './support/fixtures.ts';
import { ADMIN_KEY, startTestHerald, type TestHerald } from './support/herald.ts';
import { signedHeaders } from './support/inbound.ts';
import { waitFor, waitForLockWaiter } from './support/wait.ts';

const SOURCE_SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const signer = new Webhook(SOURCE_SECRET.slice('whsec_'.length));
const MAX_BODY = 1024;
const BODIES_IN_FLIGHT = 32;

let t: TestHerald;

before(async () => {
  t = await startTestHerald('request_limits', {
    env: { HERALD_REQUEST_TIMEOUT_MS: '1000', HERALD_INGEST_MAX_BODY_BYTES: String(MAX_BODY) },
  });
  await createApp(t, 'inbox');
  const source = await t.call('POST', '/api/v1/source', {
    uid: 'trickled',
    scheme: 'standard-webhooks',
    secret: SOURCE_SECRET,
    app: 'inbox',
    eventType: 'thing.happened',
  });
  assert.equal(source.status, 201, JSON.stringify(source.body));
});
after(async () => {
  await t?.close();
});

/** A connection that sends a request's headers and the start of its body, and no more. */
async function trickle(path: string, declaredLength: number, headers: Record<string, string> = {}) {
  const { port } = new URL(t.url);
  const socket = net.connect(Number(port), '127.0.0.1');
  await new Promise<void>((resolve, reject) => socket.once('connect', resolve).once('error', reject));
  let answer = '';
  socket.on('data', (chunk) => {
    answer += chunk.toString('latin1');
  });
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  socket.on('error', () => {});
  const lines = [
    `POST ${path} HTTP/1.1`,
    'host: 127.0.0.1',
    'content-type: application/json',
    `content-length: ${declaredLength}`,
    ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`),
  ];
  socket.write(`${lines.join('\r\n')}\r\n\r\n{"a":`);
  return { socket, closed, answer: () => answer };
}

const ingested = async (id: string) => {
  const body = JSON.stringify({ id });
  const response = await fetch(`${t.url}/ingest/trickled`, {
    method: 'POST',
    headers: signedHeaders(signer, id, body),
    body,
  });
  return {
    status: response.status,
    retryAfter: response.headers.get('retry-after'),
    body: await response.text(),
  };
};

const metric = async (name: string) => {
  const metrics = await (await fetch(`${t.url}/metrics`)).text();
  return Number(new RegExp(`^${name} (\\d+)`, 'm').exec(metrics)?.[1] ?? Number.NaN);
};

describe('a body that never arrives whole', () => {
  test('loses its connection after HERALD_REQUEST_TIMEOUT_MS, on /ingest and on the API', async () => {
    for (const [path, headers] of [
      ['/ingest/trickled', {}],
      ['/api/v1/app', { authorization: `Bearer ${ADMIN_KEY}` }],
    ] as const) {
      const started = Date.now();
      const slow = await trickle(path, 200, headers);
      await Promise.race([
        slow.closed,
        new Promise((_, reject) =>
          setTimeout(() => reject(new Error(`${path}: still open after 10 s`)), 10_000),
        ),
      ]);
      assert.ok(Date.now() - started >= 900, `${path} closed before its deadline`);
    }
    // A request sent whole is answered as ever.
    assert.equal((await ingested('whole-1')).status, 204);
  });

  test('a body received whole is answered after its commit, however long that takes past the deadline', async () => {
    // The source's row locked: the receipt's write waits for it (its foreign key's check).
    const locker = new pg.Client({ connectionString: t.database.url });
    await locker.connect();
    try {
      await locker.query('begin');
      await locker.query(`select 1 from source where uid = 'trickled' for update`);
      const answer = ingested('slow-commit-1');
      await waitForLockWaiter(t.database.db, 'herald_record_receipts');
      // Past the request deadline (1 s) with the receipt still uncommitted: no deadline may cut
      // an answer that only its commit can give (ACK after commit).
      await sleep(1500);
      await locker.query('rollback');
      assert.equal((await answer).status, 204);
    } finally {
      await locker.end();
    }
  });
});

describe('inbound bodies in flight', () => {
  test('past the bound a sender is refused 503 before its body is read; once they end, bodies are taken again', async () => {
    const before = await metric('herald_ingest_bodies_refused_total');
    // The whole budget, held by senders that declared the largest body and trickle it.
    const held = await Promise.all(
      Array.from({ length: BODIES_IN_FLIGHT }, (_, i) =>
        trickle('/ingest/trickled', MAX_BODY, signedHeaders(signer, `held-${i}`, 'x')),
      ),
    );
    try {
      await waitFor(
        'the trickled bodies to hold the whole bound',
        async () => (await metric('herald_ingest_bodies_bytes')) === BODIES_IN_FLIGHT * MAX_BODY,
      );
      const refused = await ingested('refused-1');
      assert.equal(refused.status, 503, refused.body);
      assert.equal(JSON.parse(refused.body).code, 'overloaded');
      assert.equal(refused.retryAfter, '1');
      assert.equal(await metric('herald_ingest_bodies_refused_total'), before + 1);
    } finally {
      for (const h of held) h.socket.destroy();
    }
    // Their places are given back as their connections go.
    await waitFor(
      'the bodies to be given back',
      async () => (await metric('herald_ingest_bodies_bytes')) === 0,
    );
    assert.equal((await ingested('after-1')).status, 204);
  });
});
