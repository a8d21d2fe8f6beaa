// The sender against real local HTTP servers on 127.0.0.1: request shape, status
// classification, bounded bodies, the single deadline and the sent/not-sent line.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import net from 'node:net';
import { after, before, describe, it } from 'node:test';
import { judgeAttempt } from '../src/domain/outcome-policy.ts';
import { parseRetryAfter } from '../src/sender/retry-after.ts';
import { createSender, RESPONSE_CLASSES, type Resolver, type SenderOptions } from '../src/sender/send.ts';
import { waitFor } from './support/wait.ts';

const toLoopback: Resolver = async () => [{ address: '127.0.0.1', family: 4 }];

/** A resolver that answers its first lookup (loopback) and never another: a name server gone quiet. */
function firstLookupOnly(): Resolver {
  let lookups = 0;
  return (hostname) => (++lookups === 1 ? toLoopback(hostname) : new Promise(() => {}));
}
const JSON_HEADERS = { 'content-type': 'application/json' };

async function listen<S extends net.Server>(server: S, host = '127.0.0.1', port = 0): Promise<number> {
  server.listen(port, host);
  await once(server, 'listening');
  return (server.address() as AddressInfo).port;
}

async function shut(server: net.Server): Promise<void> {
  if (server instanceof http.Server) server.closeAllConnections();
  server.close();
  await once(server, 'close');
}

/** An HTTP receiver that counts the requests it gets and answers none of them. */
async function startSilentReceiver(): Promise<{ port: number; received: () => number; server: http.Server }> {
  let received = 0;
  const server = http.createServer(() => {
    received++;
  });
  return { port: await listen(server), received: () => received, server };
}

/** A TCP listener that only counts connections: what must never be reached. */
async function startCanary(): Promise<{ port: number; connections: () => number; server: net.Server }> {
  let count = 0;
  const server = net.createServer((socket) => {
    count++;
    socket.destroy();
  });
  const port = await listen(server);
  return { port, connections: () => count, server };
}

/** A port nobody listens on: bound, then released. */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  const port = await listen(server);
  await shut(server);
  return port;
}

function senderFor(overrides: Partial<SenderOptions> = {}) {
  return createSender({
    allowPrivateNetworks: ['127.0.0.0/8'],
    timeoutMs: 3000,
    resolve: toLoopback,
    ...overrides,
  });
}

describe('sender: request and status', () => {
  type Seen = { method: string; url: string; headers: http.IncomingHttpHeaders; body: string };
  const seen: Seen[] = [];
  let connections = 0;
  let port = 0;
  const server = http.createServer((req, res) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => {
      body += chunk;
    });
    req.on('end', () => {
      seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body });
      const status = Number(new URL(req.url ?? '/', 'http://x').searchParams.get('status') ?? '200');
      const headers: http.OutgoingHttpHeaders = {};
      const retryAfter = new URL(req.url ?? '/', 'http://x').searchParams.get('retry-after');
      if (retryAfter !== null) headers['retry-after'] = retryAfter;
      res.writeHead(status, headers);
      res.end(`status ${status}`);
    });
  });
  server.on('connection', () => {
    connections++;
  });
  const sender = senderFor();

  before(async () => {
    port = await listen(server);
  });
  after(async () => {
    await sender.close();
    await shut(server);
  });

  it('POSTs the body and headers with the original Host, over reused connections', async () => {
    seen.length = 0;
    const before = connections;
    const url = `http://receiver.test:${port}/hooks/in?tenant=7`;
    const first = await sender.send({
      url,
      headers: { ...JSON_HEADERS, 'webhook-id': 'msg_1' },
      body: '{"a":1}',
    });
    const second = await sender.send({ url, headers: JSON_HEADERS, body: '{"a":2}' });

    assert.equal(first.outcome, 'success');
    assert.equal(first.statusCode, 200);
    assert.equal(first.responseClass, 'http_2xx');
    assert.equal(first.responseBody, 'status 200');
    assert.equal(first.requestSent, true);
    assert.equal(first.retryAfterSeconds, null);
    assert.equal(first.errorCode, null);
    assert.ok(first.durationMs >= 0);
    assert.equal(second.outcome, 'success');

    const [a, b] = seen;
    assert.ok(a && b);
    assert.equal(a.method, 'POST');
    assert.equal(a.url, '/hooks/in?tenant=7');
    assert.equal(a.headers.host, `receiver.test:${port}`);
    assert.equal(a.headers['content-type'], 'application/json');
    assert.equal(a.headers['webhook-id'], 'msg_1');
    assert.equal(a.headers['user-agent'], 'herald-webhooks/0.1');
    assert.equal(a.body, '{"a":1}');
    assert.equal(b.url, '/hooks/in?tenant=7');
    assert.equal(b.body, '{"a":2}');
    for (let i = 0; i < 4; i++) await sender.send({ url, headers: JSON_HEADERS, body: '{}' });
    // undici may open a second connection while the first one is still being released.
    assert.ok(connections - before <= 2, `6 sends took ${connections - before} connections`);
  });

  it('sends each URL to its own path, the ones it has seen before too, and refuses a forbidden one each time', async () => {
    seen.length = 0;
    const origin = `http://receiver.test:${port}`;
    const forbidden = `http://10.0.0.1:${port}/`;
    const results = [];
    for (const url of [
      `${origin}/a?x=1`,
      `${origin}/b`,
      forbidden,
      `${origin}/a?x=1`,
      forbidden,
      `${origin}/b`,
    ]) {
      results.push(await sender.send({ url, headers: {}, body: '' }));
    }
    assert.deepEqual(
      results.map((r) => r.responseClass),
      ['http_2xx', 'http_2xx', 'destination_forbidden', 'http_2xx', 'destination_forbidden', 'http_2xx'],
    );
    assert.deepEqual(
      seen.map((r) => r.url),
      ['/a?x=1', '/b', '/a?x=1', '/b'],
    );
  });

  it("gives its origin's place back after a request refused at dispatch and after a deadline before the start", {
    timeout: 10_000,
  }, async () => {
    // One connection per origin: a place not given back would hold up every later request.
    let lookups = 0;
    const stallFirst: Resolver = (name) => (lookups++ === 0 ? new Promise(() => {}) : toLoopback(name));
    const single = senderFor({ connectionsPerOrigin: 1, timeoutMs: 300, resolve: stallFirst });
    const url = `http://receiver.test:${port}/`;
    try {
      const stalled = await single.send({ url, headers: {}, body: '' });
      assert.equal(stalled.responseClass, 'dns_failure');
      assert.equal(stalled.requestSent, false);
      const refused = await single.send({ url, headers: { 'x-bad': 'a\r\nb: 1' }, body: '' });
      assert.equal(refused.responseClass, 'invalid_request');
      const next = await single.send({ url, headers: {}, body: '' });
      assert.equal(next.outcome, 'success');
    } finally {
      await single.close();
    }
  });

  it("keeps a caller's User-Agent, and honours userAgent", async () => {
    seen.length = 0;
    await sender.send({
      url: `http://receiver.test:${port}/`,
      headers: { 'User-Agent': 'custom/1' },
      body: '',
    });
    const custom = senderFor({ userAgent: 'herald-test/9' });
    await custom.send({ url: `http://receiver.test:${port}/`, headers: {}, body: '' });
    await custom.close();
    assert.deepEqual(
      seen.map((s) => s.headers['user-agent']),
      ['custom/1', 'herald-test/9'],
    );
  });

  const STATUSES: ReadonlyArray<[status: number, outcome: string, responseClass: string]> = [
    [200, 'success', 'http_2xx'],
    [201, 'success', 'http_2xx'],
    [204, 'success', 'http_2xx'],
    [299, 'success', 'http_2xx'],
    [304, 'failure', 'http_3xx_redirect'],
    [400, 'failure', 'http_4xx'],
    [401, 'failure', 'http_4xx'],
    [404, 'failure', 'http_4xx'],
    [410, 'failure', 'http_410_gone'],
    [429, 'failure', 'http_429'],
    [500, 'failure', 'http_5xx'],
    [502, 'failure', 'http_5xx'],
    [503, 'failure', 'http_5xx'],
    [504, 'failure', 'http_5xx'],
    [600, 'failure', 'http_other'],
  ];
  for (const [status, outcome, responseClass] of STATUSES) {
    it(`classifies ${status} as ${outcome} / ${responseClass}`, async () => {
      const result = await sender.send({
        url: `http://receiver.test:${port}/?status=${status}`,
        headers: {},
        body: '',
      });
      assert.equal(result.statusCode, status);
      assert.equal(result.outcome, outcome);
      assert.equal(result.responseClass, responseClass);
      assert.equal(result.requestSent, true);
      assert.ok(responseClass in RESPONSE_CLASSES);
    });
  }

  it('reads Retry-After as seconds or as an HTTP date, on 429 and 502/503/504 only', async () => {
    const send = (status: number, retryAfter: string) =>
      sender.send({
        url: `http://receiver.test:${port}/?status=${status}&retry-after=${encodeURIComponent(retryAfter)}`,
        headers: {},
        body: '',
      });
    assert.equal((await send(429, '120')).retryAfterSeconds, 120);
    assert.equal((await send(502, '3')).retryAfterSeconds, 3);
    assert.equal((await send(504, '0')).retryAfterSeconds, 0);
    const inAMinute = new Date(Date.now() + 60_000).toUTCString();
    const fromDate = (await send(503, inAMinute)).retryAfterSeconds;
    assert.ok(fromDate !== null && fromDate >= 55 && fromDate <= 61, `got ${fromDate}`);
    assert.equal((await send(500, '120')).retryAfterSeconds, null, '500 carries no retry hint');
    assert.equal((await send(404, '120')).retryAfterSeconds, null);
    assert.equal((await send(200, '120')).retryAfterSeconds, null);
    assert.equal((await send(429, 'soon')).retryAfterSeconds, null);
  });

  it('refuses a bad URL and a caller Host header without sending anything', async () => {
    seen.length = 0;
    // Twice: the second attempt gets the verdict the sender remembers for the URL.
    for (let attempt = 0; attempt < 2; attempt++) {
      const badUrl = await sender.send({ url: `ftp://receiver.test:${port}/`, headers: {}, body: '' });
      assert.equal(badUrl.responseClass, 'invalid_url');
      assert.equal(badUrl.outcome, 'failure');
      assert.equal(badUrl.requestSent, false);
    }
    const spoofedHost = await sender.send({
      url: `http://receiver.test:${port}/`,
      headers: { Host: 'internal.admin' },
      body: '',
    });
    assert.equal(spoofedHost.responseClass, 'invalid_request');
    assert.equal(spoofedHost.requestSent, false);
    const injected = await sender.send({
      url: `http://receiver.test:${port}/`,
      headers: { 'x-custom': 'a\r\nx-injected: 1' },
      body: '',
    });
    assert.equal(injected.responseClass, 'invalid_request');
    assert.equal(injected.outcome, 'failure');
    assert.equal(injected.requestSent, false);
    assert.equal(seen.length, 0);
  });
});

describe('sender: Retry-After parsing', () => {
  const now = Date.parse('2025-01-01T00:00:00Z');
  it('reads delay-seconds', () => {
    assert.equal(parseRetryAfter('30', now), 30);
    assert.equal(parseRetryAfter(' 30 ', now), 30);
    assert.equal(parseRetryAfter(['7', '9'], now), 7);
  });
  it('reads the three HTTP-date forms, a past date as 0', () => {
    assert.equal(parseRetryAfter('Wed, 01 Jan 2025 00:01:30 GMT', now), 90);
    assert.equal(parseRetryAfter('Wednesday, 01-Jan-25 00:00:10 GMT', now), 10);
    assert.equal(parseRetryAfter('Wed Jan  1 00:00:05 2025', now), 5);
    assert.equal(parseRetryAfter('Tue, 31 Dec 2024 23:00:00 GMT', now), 0);
    assert.equal(parseRetryAfter('Wed Jan 15 00:00:05 2025', now), 14 * 86400 + 5);
  });
  it('reads a date as GMT wherever herald runs: asctime has no zone, and no other zone is one', () => {
    const zone = process.env['TZ'];
    process.env['TZ'] = 'America/New_York';
    try {
      assert.equal(parseRetryAfter('Wed Jan  1 00:10:00 2025', now), 600);
      for (const value of ['Wed, 01 Jan 2025 09:10:00 +0900', 'Tue, 31 Dec 2024 16:10:00 PST']) {
        assert.equal(parseRetryAfter(value, now), null, value);
      }
    } finally {
      if (zone === undefined) delete process.env['TZ'];
      else process.env['TZ'] = zone;
    }
  });
  it('takes a delay too large to count as the longest, for the retry policy to bound', () => {
    assert.equal(parseRetryAfter('99999999999999999999', now), Number.MAX_SAFE_INTEGER);
  });
  it('returns null for anything else', () => {
    for (const value of [
      undefined,
      '',
      '-5',
      '1.5',
      '1e3',
      'soon',
      'Someday',
      'Wed, 31 Feb 2025 00:00:00 GMT',
      'Wed, 01 Jan 2025 24:00:00 GMT',
      'Wed, 1 Jan 2025 00:00:00 GMT',
    ]) {
      assert.equal(parseRetryAfter(value, now), null, String(value));
    }
  });
});

describe('sender: redirects are never followed', () => {
  let canary: Awaited<ReturnType<typeof startCanary>>;
  let port = 0;
  const server = http.createServer((req, res) => {
    const [, status, scheme] = (req.url ?? '').split('/');
    res.writeHead(Number(status), { location: `${scheme}://localhost:${canary.port}/stolen` });
    res.end();
  });
  const sender = senderFor();

  before(async () => {
    canary = await startCanary();
    port = await listen(server);
  });
  after(async () => {
    await sender.close();
    await shut(server);
    await shut(canary.server);
  });

  for (const status of [301, 302, 303, 307, 308]) {
    for (const scheme of ['http', 'https']) {
      it(`${status} to ${scheme} is a failure and the target sees no connection`, async () => {
        const result = await sender.send({
          url: `http://receiver.test:${port}/${status}/${scheme}`,
          headers: {},
          body: '{}',
        });
        assert.equal(result.outcome, 'failure');
        assert.equal(result.responseClass, 'http_3xx_redirect');
        assert.equal(result.statusCode, status);
        assert.equal(canary.connections(), 0);
      });
    }
  }
});

describe('sender: bounded response bodies', () => {
  let port = 0;
  const closedResponses: Promise<unknown>[] = [];
  const server = http.createServer((req, res) => {
    closedResponses.push(once(res, 'close'));
    if (req.url === '/endless') {
      // Writes as fast as the client reads, forever: only the client can end it.
      res.writeHead(200, { 'content-type': 'text/plain' });
      const chunk = Buffer.alloc(16 * 1024, 'x');
      const pump = () => {
        while (!res.destroyed && res.write(chunk));
      };
      res.on('drain', pump);
      pump();
    } else if (req.url === '/dribble') {
      // A byte every 20 ms: never ends, never idles long enough for an idle timeout.
      res.writeHead(503, { 'retry-after': '30' });
      const timer = setInterval(() => res.write('y'), 20);
      res.on('close', () => clearInterval(timer));
    } else if (req.url === '/text') {
      res.end(`${'é'.repeat(60)}\u0000tail`);
    } else if (req.url === '/huge-headers') {
      res.writeHead(200, { 'x-padding': 'p'.repeat(32 * 1024) });
      res.end();
    }
  });

  before(async () => {
    port = await listen(server);
  });
  after(async () => {
    await shut(server);
  });

  it('stops reading an endless body at maxResponseBytes, keeps storedResponseBytes, closes the connection', async () => {
    const sender = senderFor({ timeoutMs: 5000, maxResponseBytes: 64 * 1024, storedResponseBytes: 100 });
    closedResponses.length = 0;
    const result = await sender.send({ url: `http://receiver.test:${port}/endless`, headers: {}, body: '' });
    assert.equal(result.outcome, 'success', 'the status decides, not the body');
    assert.equal(result.responseClass, 'http_2xx');
    assert.equal(result.responseBody, 'x'.repeat(100));
    assert.ok(
      result.durationMs < 2000,
      `took ${result.durationMs} ms, so the deadline, not the limit, ended it`,
    );
    // The server sees its response torn down: nothing keeps pulling the endless body.
    await Promise.race([closedResponses[0], timeout(2000, 'the endless response was never closed')]);
    await sender.close();
  });

  it('returns within the deadline from a body that never ends, with the status it already had', async () => {
    const sender = senderFor({ timeoutMs: 400 });
    const result = await sender.send({ url: `http://receiver.test:${port}/dribble`, headers: {}, body: '' });
    assert.equal(result.outcome, 'failure');
    assert.equal(result.responseClass, 'http_5xx');
    assert.equal(result.retryAfterSeconds, 30);
    assert.match(result.responseBody, /^y+$/);
    assert.ok(result.durationMs >= 350 && result.durationMs < 1500, `took ${result.durationMs} ms`);
    await sender.close();
  });

  it('truncates the stored body to storedResponseBytes, lossy at a cut character, NUL replaced', async () => {
    const sender = senderFor({ storedResponseBytes: 9 });
    const cut = await sender.send({ url: `http://receiver.test:${port}/text`, headers: {}, body: '' });
    // 'é' is two bytes: four fit in 8 bytes, the ninth is half of the fifth.
    assert.equal(cut.responseBody, 'éééé\uFFFD');
    await sender.close();
    const whole = senderFor();
    const full = await whole.send({ url: `http://receiver.test:${port}/text`, headers: {}, body: '' });
    assert.equal(full.responseBody, `${'é'.repeat(60)}\uFFFDtail`);
    await whole.close();
  });

  it('gives up on oversized response headers as unknown: the request went out', async () => {
    const sender = senderFor();
    const result = await sender.send({
      url: `http://receiver.test:${port}/huge-headers`,
      headers: {},
      body: '',
    });
    assert.equal(result.outcome, 'unknown');
    assert.equal(result.responseClass, 'response_too_large');
    assert.equal(result.statusCode, null);
    assert.equal(result.requestSent, true);
    await sender.close();
  });
});

function timeout(ms: number, message: string): Promise<never> {
  return new Promise((_, reject) => setTimeout(() => reject(new Error(message)), ms).unref());
}

describe('sender: sent or not sent', () => {
  it('calls a connection destroyed after the request arrived unknown, not failure', async () => {
    let received = 0;
    const server = http.createServer((req) => {
      received++;
      req.socket.destroy();
    });
    const port = await listen(server);
    const sender = senderFor();
    const result = await sender.send({
      url: `http://receiver.test:${port}/`,
      headers: JSON_HEADERS,
      body: '{}',
    });
    assert.equal(received, 1);
    assert.equal(result.outcome, 'unknown');
    assert.equal(result.responseClass, 'connection_lost');
    assert.equal(result.requestSent, true);
    assert.equal(result.statusCode, null);
    await sender.close();
    await shut(server);
  });

  it('calls garbage instead of an HTTP response unknown', async () => {
    const server = net.createServer((socket) => {
      socket.once('data', () => socket.end('SMTP ready\r\n\r\n'));
    });
    const port = await listen(server);
    const sender = senderFor();
    const result = await sender.send({ url: `http://receiver.test:${port}/`, headers: {}, body: '{}' });
    assert.equal(result.outcome, 'unknown');
    assert.equal(result.responseClass, 'invalid_response');
    assert.equal(result.requestSent, true);
    await sender.close();
    await shut(server);
  });

  it('times out a receiver that never answers as unknown, within about timeoutMs', async () => {
    const { port, received, server } = await startSilentReceiver();
    const sender = senderFor({ timeoutMs: 300 });
    const result = await sender.send({ url: `http://receiver.test:${port}/`, headers: {}, body: '{}' });
    assert.equal(received(), 1);
    assert.equal(result.outcome, 'unknown');
    assert.equal(result.responseClass, 'timeout');
    assert.equal(result.requestSent, true);
    assert.ok(result.durationMs >= 290 && result.durationMs < 1300, `took ${result.durationMs} ms`);
    await sender.close();
    await shut(server);
  });

  it('calls a refused connection a failure', async () => {
    const sender = senderFor();
    const result = await sender.send({
      url: `http://receiver.test:${await closedPort()}/`,
      headers: {},
      body: '{}',
    });
    assert.equal(result.outcome, 'failure');
    assert.equal(result.responseClass, 'connect_failed');
    assert.equal(result.errorCode, 'ECONNREFUSED');
    assert.equal(result.requestSent, false);
    await sender.close();
  });

  it('calls a name that does not resolve a failure', async () => {
    const sender = senderFor({
      resolve: async () => {
        throw Object.assign(new Error('getaddrinfo ENOTFOUND'), { code: 'ENOTFOUND' });
      },
    });
    const result = await sender.send({ url: 'http://nowhere.test/', headers: {}, body: '{}' });
    assert.equal(result.outcome, 'failure');
    assert.equal(result.responseClass, 'dns_failure');
    assert.equal(result.errorCode, 'ENOTFOUND');
    assert.equal(result.requestSent, false);
    await sender.close();
  });

  it('calls a deadline that passes while the name is still looked up a failure of DNS (EAI_AGAIN, not the endpoint’s), within about timeoutMs', async () => {
    const sender = senderFor({ timeoutMs: 200, resolve: () => new Promise(() => {}) });
    const result = await sender.send({ url: 'http://silent-dns.test/', headers: {}, body: '{}' });
    assert.equal(result.outcome, 'failure');
    assert.equal(result.responseClass, 'dns_failure');
    assert.equal(result.errorCode, 'EAI_AGAIN');
    assert.equal(
      judgeAttempt(
        { outcome: result.outcome, statusCode: result.statusCode, errorCode: result.errorCode },
        { idempotent: true, clientErrorPolicy: 'retry' },
      ).endpointAtFault,
      false,
      'the sending host’s resolver, not held against the endpoint',
    );
    assert.equal(result.requestSent, false);
    assert.ok(result.durationMs >= 190 && result.durationMs < 1200, `took ${result.durationMs} ms`);
    await sender.close();
  });

  it('blames DNS only when no connection to the host is past its lookup: a stalled handshake beside a slow lookup is a timeout', async () => {
    // A's lookup answers at once and its TLS handshake never ends (the server says nothing); B, to
    // another port of the same host, asks while the resolver has stopped answering. At A's
    // deadline a lookup of its host is under way — B's, not A's.
    let connected = 0;
    const silent = net.createServer((socket) => {
      connected++;
      // Read (and ignore) the ClientHello: a paused socket would never see the client's close.
      socket.resume();
    });
    const port = await listen(silent);
    const sender = senderFor({ timeoutMs: 400, resolve: firstLookupOnly() });
    try {
      const a = sender.send({ url: `https://stall.test:${port}/`, headers: {}, body: '{}' });
      await waitFor('A connected, its handshake under way', () => connected === 1);
      const b = sender.send({ url: `https://stall.test:${port + 1}/`, headers: {}, body: '{}' });
      const [stalled, unresolved] = await Promise.all([a, b]);
      assert.equal(stalled.outcome, 'failure');
      assert.equal(stalled.responseClass, 'timeout', JSON.stringify(stalled));
      assert.equal(stalled.requestSent, false);
      assert.equal(unresolved.responseClass, 'dns_failure', JSON.stringify(unresolved));
      assert.equal(unresolved.errorCode, 'EAI_AGAIN');
    } finally {
      await sender.close();
      await shut(silent);
    }
  });

  it('a request that left and timed out is a timeout, whatever another connection to its origin is looking up', async () => {
    // The first request is received and never answered; the second, to the same origin, needs a
    // second connection, whose lookup never ends. At the first's deadline only a lookup is under way.
    const { port, received, server: silent } = await startSilentReceiver();
    const sender = senderFor({ timeoutMs: 400, resolve: firstLookupOnly() });
    try {
      const first = sender.send({ url: `http://slow.test:${port}/`, headers: {}, body: '{}' });
      await waitFor('the first request received', () => received() === 1);
      const second = sender.send({ url: `http://slow.test:${port}/`, headers: {}, body: '{}' });
      const [timedOut, unresolved] = await Promise.all([first, second]);
      assert.equal(timedOut.requestSent, true);
      assert.equal(timedOut.outcome, 'unknown');
      assert.equal(timedOut.responseClass, 'timeout', JSON.stringify(timedOut));
      assert.equal(unresolved.responseClass, 'dns_failure', JSON.stringify(unresolved));
    } finally {
      await sender.close();
      await shut(silent);
    }
  });

  it('one deadline spans the lookup and the response: each within it alone, together past it, is a timeout', async () => {
    // 250 ms to resolve and 250 ms to answer, under a 400 ms deadline: a deadline per phase would
    // let this request through.
    const slow = http.createServer((_req, res) => {
      setTimeout(() => res.writeHead(204).end(), 250);
    });
    const port = await listen(slow);
    const sender = senderFor({
      timeoutMs: 400,
      resolve: () =>
        new Promise((resolve) => setTimeout(() => resolve([{ address: '127.0.0.1', family: 4 }]), 250)),
    });
    try {
      const result = await sender.send({ url: `http://slow-both.test:${port}/`, headers: {}, body: '{}' });
      assert.equal(result.responseClass, 'timeout', JSON.stringify(result));
      assert.equal(result.requestSent, true);
      assert.ok(result.durationMs < 1000, `took ${result.durationMs} ms`);
    } finally {
      await sender.close();
      await shut(slow);
    }
  });

  it('lets a literal private address through only when allow-listed', async () => {
    let received = 0;
    const server = http.createServer((_req, res) => {
      received++;
      res.end();
    });
    const port = await listen(server);
    const closed = senderFor({ allowPrivateNetworks: [] });
    const refused = await closed.send({ url: `http://127.0.0.1:${port}/`, headers: {}, body: '' });
    assert.equal(refused.responseClass, 'destination_forbidden');
    assert.equal(refused.requestSent, false);
    assert.equal(received, 0);
    const open = senderFor({ allowPrivateNetworks: ['127.0.0.1/32'] });
    const allowed = await open.send({ url: `http://127.0.0.1:${port}/`, headers: {}, body: '' });
    assert.equal(allowed.outcome, 'success');
    assert.equal(received, 1);
    await Promise.all([closed.close(), open.close()]);
    await shut(server);
  });
});

describe('sender: options', () => {
  it('validates eagerly', () => {
    assert.throws(() => createSender({ allowPrivateNetworks: [], timeoutMs: 0 }), /timeoutMs/);
    assert.throws(() => createSender({ allowPrivateNetworks: [], timeoutMs: 1.5 }), /timeoutMs/);
    assert.throws(
      () => createSender({ allowPrivateNetworks: [], timeoutMs: 10, maxResponseBytes: -1 }),
      /maxResponseBytes/,
    );
    assert.throws(
      () => createSender({ allowPrivateNetworks: ['nope'], timeoutMs: 10 }),
      /"nope" is not a CIDR/,
    );
  });
});
