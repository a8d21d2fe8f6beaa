// The per-address count of failed authentications (src/api/auth-failures.ts) on a clock of its
// own: the limit, the window that resets it, and what counts as one address.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { clientOf, createAuthFailureLimiter } from '../src/api/auth-failures.ts';

describe('auth failure limiter', () => {
  test('blocks an address at the limit until its window ends, and no other address', () => {
    let now = 1_000_000;
    const limiter = createAuthFailureLimiter({ limit: 2, windowMs: 60_000, now: () => now });
    assert.equal(limiter.blockedFor('10.0.0.1'), 0);
    assert.equal(limiter.recordFailure('10.0.0.1'), false);
    assert.equal(limiter.blockedFor('10.0.0.1'), 0);
    assert.equal(limiter.recordFailure('10.0.0.1'), true, 'the failure that reaches the limit says so');
    assert.equal(limiter.blockedFor('10.0.0.1'), 60);
    assert.equal(limiter.recordFailure('10.0.0.1'), false, 'only once per window');
    assert.equal(limiter.blockedFor('10.0.0.2'), 0);
    now += 59_500;
    assert.equal(limiter.blockedFor('10.0.0.1'), 1);
    now += 500;
    assert.equal(limiter.blockedFor('10.0.0.1'), 0, 'a new window starts from nothing');
  });

  test('a limit of 0 never blocks', () => {
    const limiter = createAuthFailureLimiter({ limit: 0 });
    for (let i = 0; i < 10; i++) assert.equal(limiter.recordFailure('10.0.0.1'), false);
    assert.equal(limiter.blockedFor('10.0.0.1'), 0);
  });

  test('IPv6 counts per /64; an IPv4-mapped address is its IPv4 address', () => {
    assert.equal(clientOf('2001:db8:1:2:aaaa::1'), clientOf('2001:db8:1:2:bbbb::2'));
    assert.notEqual(clientOf('2001:db8:1:2::1'), clientOf('2001:db8:1:3::1'));
    assert.equal(clientOf('::ffff:192.0.2.7'), '192.0.2.7');
    assert.equal(clientOf('192.0.2.7'), '192.0.2.7');
    const limiter = createAuthFailureLimiter({ limit: 1 });
    limiter.recordFailure('2001:db8:1:2::1');
    assert.ok(limiter.blockedFor('2001:db8:1:2:ffff::9') > 0);
    assert.equal(limiter.blockedFor('2001:db8:1:3::1'), 0);
  });
});

test('past the addresses it tracks, the others count by their block, and past twice as many all together: a flood does not switch the limit off', () => {
  const limiter = createAuthFailureLimiter({ limit: 2, maxAddresses: 3 });
  for (const address of ['10.0.0.1', '10.0.0.2', '10.0.0.3']) limiter.recordFailure(address);
  // The table is full: these two of one /24 count together, and reach the limit together.
  limiter.recordFailure('10.0.0.4');
  assert.equal(limiter.blockedFor('10.0.0.5'), 0);
  limiter.recordFailure('10.0.0.5');
  assert.ok(limiter.blockedFor('10.0.0.6') > 0, 'a new address counts with its block past the table');
  assert.equal(limiter.blockedFor('10.0.0.1'), 0, 'a tracked address keeps its own count');
  // A client in another block is not put over the limit by that block's failures...
  assert.equal(limiter.blockedFor('192.0.2.7'), 0, 'another block keeps its own count');
  // ...and an IPv6 attacker's /48 counts as one.
  limiter.recordFailure('2001:db8:1:1::1');
  limiter.recordFailure('2001:db8:1:2::1');
  assert.ok(limiter.blockedFor('2001:db8:1:3::1') > 0);
  assert.equal(limiter.blockedFor('2001:db8:2::1'), 0);
  // Past twice as many entries, the rest count as one.
  for (const address of ['198.51.100.1', '203.0.113.1']) limiter.recordFailure(address);
  limiter.recordFailure('192.0.2.8');
  limiter.recordFailure('100.64.0.1');
  assert.ok(limiter.blockedFor('100.65.0.1') > 0, 'a new block counts with the others past twice the table');
});
