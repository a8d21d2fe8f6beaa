// Pinning against DNS tricks. Every socket in this file is on loopback: the "public" receiver
// is 127.0.0.2 (the only allow-listed address), the "internal" canary is 127.0.0.1 on the SAME
// port, so one URL reaches either, depending on which address the connection is pinned to.
// The canary must see zero connections.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import http from 'node:http';
import net, { type AddressInfo } from 'node:net';
import { after, before, beforeEach, describe, it } from 'node:test';
import { createAddressPolicy } from '../src/sender/destination.ts';
import { checkDestination, createSender, type Resolver } from '../src/sender/send.ts';

const PUBLIC = '127.0.0.2';
const INTERNAL = '127.0.0.1';
const ALLOW = [`${PUBLIC}/32`];

let port = 0;
let publicRequests = 0;
let canaryConnections = 0;
// The public receiver closes every connection, so each send needs a new one (and a new lookup).
const receiver = http.createServer((_req, res) => {
  publicRequests++;
  res.setHeader('connection', 'close');
  res.end('ok');
});
const canary = net.createServer((socket) => {
  canaryConnections++;
  socket.destroy();
});

async function listenOn(server: net.Server, host: string, wanted: number): Promise<number> {
  server.listen(wanted, host);
  await once(server, 'listening');
  return (server.address() as AddressInfo).port;
}

/** Binds the receiver and the canary to one port number on two loopback addresses. */
async function bindPair(): Promise<number> {
  for (let tries = 0; tries < 20; tries++) {
    const candidate = await listenOn(receiver, PUBLIC, 0);
    try {
      return await listenOn(canary, INTERNAL, candidate);
    } catch {
      receiver.close();
      await once(receiver, 'close');
    }
  }
  throw new Error('no port free on both loopback addresses');
}

/** Answers each call with the next entry of `script`, repeating the last one. */
function scripted(...script: string[][]): Resolver & { calls: () => number } {
  let calls = 0;
  const resolve = async () => {
    const answer = script[Math.min(calls, script.length - 1)] ?? [];
    calls++;
    return answer.map((address) => ({ address, family: net.isIPv6(address) ? (6 as const) : (4 as const) }));
  };
  return Object.assign(resolve, { calls: () => calls });
}

const url = () => `http://hooks.example:${port}/in`;

before(async () => {
  port = await bindPair();
});
after(async () => {
  receiver.closeAllConnections();
  receiver.close();
  canary.close();
  await Promise.all([once(receiver, 'close'), once(canary, 'close')]);
});
beforeEach(() => {
  publicRequests = 0;
  canaryConnections = 0;
});

describe('pinning', () => {
  it('reaches the allowed public address (the setup works)', async () => {
    const sender = createSender({
      allowPrivateNetworks: ALLOW,
      timeoutMs: 3000,
      resolve: scripted([PUBLIC]),
    });
    const result = await sender.send({ url: url(), headers: {}, body: '{}' });
    assert.equal(result.outcome, 'success');
    assert.equal(publicRequests, 1);
    assert.equal(canaryConnections, 0);
    await sender.close();
  });

  it('refuses a name that rebinds between registration and the attempt', async () => {
    const resolve = scripted([PUBLIC], [INTERNAL]);
    const policy = createAddressPolicy(ALLOW);
    assert.equal(
      (await checkDestination(url(), policy, resolve)).ok,
      true,
      'registration saw the public answer',
    );
    const sender = createSender({ allowPrivateNetworks: ALLOW, timeoutMs: 3000, resolve });
    const result = await sender.send({ url: url(), headers: {}, body: '{}' });
    assert.equal(result.outcome, 'failure');
    assert.equal(result.responseClass, 'destination_forbidden');
    assert.equal(result.requestSent, false);
    assert.equal(canaryConnections, 0);
    assert.equal(publicRequests, 0);
    await sender.close();
  });

  it('judges every new connection: public first, private next is refused', async () => {
    const resolve = scripted([PUBLIC], [INTERNAL]);
    const sender = createSender({ allowPrivateNetworks: ALLOW, timeoutMs: 3000, resolve });
    const first = await sender.send({ url: url(), headers: {}, body: '{}' });
    const second = await sender.send({ url: url(), headers: {}, body: '{}' });
    assert.equal(first.outcome, 'success');
    assert.equal(second.responseClass, 'destination_forbidden');
    assert.equal(second.requestSent, false);
    assert.equal(resolve.calls(), 2, 'each connection resolved afresh');
    assert.equal(publicRequests, 1);
    assert.equal(canaryConnections, 0);
    await sender.close();
  });

  for (const answer of [
    [PUBLIC, INTERNAL],
    [INTERNAL, PUBLIC],
    [PUBLIC, '::1'],
    [PUBLIC, '::ffff:127.0.0.1'],
  ]) {
    it(`refuses a mixed answer ${answer.join(' + ')} outright`, async () => {
      const sender = createSender({
        allowPrivateNetworks: ALLOW,
        timeoutMs: 3000,
        resolve: scripted(answer),
      });
      const result = await sender.send({ url: url(), headers: {}, body: '{}' });
      assert.equal(result.outcome, 'failure');
      assert.equal(result.responseClass, 'destination_forbidden');
      assert.equal(result.requestSent, false);
      assert.equal(publicRequests, 0, 'not even the public answer is used');
      assert.equal(canaryConnections, 0);
      assert.equal((await checkDestination(url(), createAddressPolicy(ALLOW), scripted(answer))).ok, false);
      await sender.close();
    });
  }

  for (const host of [
    '2130706433',
    '0177.0.0.1',
    '0x7f.1',
    '127.1',
    '[::ffff:127.0.0.1]',
    '[::ffff:7f00:1]',
  ]) {
    it(`refuses the literal ${host} (an alternate spelling of the canary) without connecting`, async () => {
      const resolve: Resolver = () => assert.fail('a literal address is never resolved');
      const sender = createSender({ allowPrivateNetworks: ALLOW, timeoutMs: 3000, resolve });
      // Twice: the second attempt gets the verdict the sender remembers for the URL.
      for (let attempt = 0; attempt < 2; attempt++) {
        const result = await sender.send({ url: `http://${host}:${port}/`, headers: {}, body: '{}' });
        assert.equal(result.responseClass, 'destination_forbidden');
        assert.equal(result.requestSent, false);
      }
      assert.equal(canaryConnections, 0);
      await sender.close();
    });
  }
});
