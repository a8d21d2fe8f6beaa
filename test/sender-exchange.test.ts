// The sender's dispatch handler (src/sender/exchange.ts) on a real undici Agent against a real
// local server: an attempt ended before undici started its request never writes a byte of it.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { Agent } from 'undici';
import { DeadlineExceededError } from '../src/sender/errors.ts';
import { Exchange } from '../src/sender/exchange.ts';

/** POSTs `{}` to `path` through `agent` with a fresh Exchange (1 KiB read, 64 bytes kept). */
function post(agent: Agent, port: number, path: string): Exchange {
  const exchange = new Exchange(1024, 64);
  agent.dispatch({ origin: `http://127.0.0.1:${port}`, path, method: 'POST', body: '{}' }, exchange);
  return exchange;
}

/** An Agent whose connections to `port` are made only once `connect()` is called. */
function connectingWhenTold(port: number): { agent: Agent; connect: () => void } {
  let connect!: () => void;
  const mayConnect = new Promise<void>((resolve) => {
    connect = resolve;
  });
  const agent = new Agent({
    connect: (_options, callback) => {
      void mayConnect.then(() => {
        const socket = net.connect(port, '127.0.0.1');
        socket.once('connect', () => callback(null, socket));
        socket.once('error', (error) => callback(error, null));
      });
    },
  });
  return { agent, connect };
}

describe('sender exchange', () => {
  let requests = 0;
  const server = http.createServer((req, res) => {
    requests++;
    req.resume();
    req.on('end', () => {
      if (req.url === '/hints-then-reset') {
        res.writeEarlyHints({ link: '</style.css>; rel=preload; as=style' });
        // Flushed before the connection breaks: the client has the 103 and nothing after it.
        setImmediate(() => req.socket.destroy());
      } else if (req.url === '/hints') {
        // An informational response first: the status that counts is the one after it.
        res.writeEarlyHints({ link: '</style.css>; rel=preload; as=style' });
        res.writeHead(201).end('created');
      } else res.writeHead(204).end();
    });
  });
  let port = 0;
  before(async () => {
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    port = (server.address() as AddressInfo).port;
  });
  after(async () => {
    server.closeAllConnections();
    server.close();
    await once(server, 'close');
  });

  it('ends an attempt undici has not started at once, and aborts the request when it starts', {
    timeout: 5000,
  }, async () => {
    // Connections are made only when the test says so: the request waits for one meanwhile.
    const { agent, connect } = connectingWhenTold(port);
    try {
      const ended = post(agent, port, '/ended');
      ended.abort(new DeadlineExceededError('attempt deadline passed'));
      await assert.rejects(ended.response, DeadlineExceededError);
      assert.equal(ended.requestSent, false);

      connect();
      // undici is done with it only once it started and was aborted (had it been written, only
      // once its response ended): the server has seen nothing.
      await ended.finished;
      assert.equal(requests, 0, 'the ended request was never written');
      assert.equal(ended.requestSent, false);

      const next = post(agent, port, '/next');
      assert.equal((await next.response).statusCode, 204);
      assert.equal(next.requestSent, true);
      assert.equal(requests, 1);
    } finally {
      await agent.close();
    }
  });

  it('does not start a request past its deadline, even before the timer that ends it has run', {
    timeout: 5000,
  }, async () => {
    // The connection is made after the deadline, and nothing calls abort(): as when a stalled
    // event loop runs the connect callback before the deadline's timer.
    const before = requests;
    const { agent, connect } = connectingWhenTold(port);
    try {
      // Its deadline is now: the connection, made after this, is made past it.
      const late = new Exchange(1024, 64, performance.now());
      agent.dispatch({ origin: `http://127.0.0.1:${port}`, path: '/late', method: 'POST', body: '{}' }, late);
      connect();
      await assert.rejects(late.response, DeadlineExceededError);
      await late.finished;
      assert.equal(late.requestSent, false);
      assert.equal(requests, before, 'the late request was never written');
    } finally {
      await agent.close();
    }
  });

  it('has no status when the connection breaks after an informational (1xx) response', {
    timeout: 5000,
  }, async () => {
    const agent = new Agent();
    try {
      const exchange = post(agent, port, '/hints-then-reset');
      // No final status: an error after the request went out (unknown), not a 103 "response".
      await assert.rejects(exchange.response);
      assert.equal(exchange.requestSent, true);
      await exchange.finished;
    } finally {
      await agent.close();
    }
  });

  it('takes the final status and body after an informational (1xx) response', { timeout: 5000 }, async () => {
    const agent = new Agent();
    try {
      const exchange = post(agent, port, '/hints');
      const response = await exchange.response;
      assert.equal(response.statusCode, 201);
      assert.equal(response.body.toString('utf8'), 'created');
      assert.equal(exchange.requestSent, true);
      await exchange.finished;
    } finally {
      await agent.close();
    }
  });
});
