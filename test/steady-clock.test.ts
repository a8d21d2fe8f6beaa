// The clock deadlines run on (src/domain/steady-clock.ts): a step back of the wall clock does not
// move it back, and a jump forward — the host resumed from a suspend, while leases ran on in the
// database — moves it forward. The wall clock is replaced for the test, the way a host's clock
// would be stepped.

import assert from 'node:assert/strict';
import { afterEach, test } from 'node:test';
import { steadyNow } from '../src/domain/steady-clock.ts';

const realNow = Date.now;
afterEach(() => {
  Date.now = realNow;
});
const stepWallClock = (byMs: number) => {
  const from = Date.now;
  Date.now = () => from() + byMs;
};

test('a step back of the wall clock does not move the deadline clock back', () => {
  const before = steadyNow();
  stepWallClock(-60_000);
  const after = steadyNow();
  assert.ok(after >= before, `${after - before} ms`);
  assert.ok(after - before < 1000, `it moved on by ${after - before} ms, not by the step`);
});

test('a jump forward of the wall clock (a resumed suspend) moves the deadline clock forward with it', () => {
  const before = steadyNow();
  stepWallClock(90_000);
  const after = steadyNow();
  // (Less any lead the wall clock had already taken by drifting: a millisecond or so.)
  assert.ok(after - before >= 89_000, `it moved on by ${after - before} ms`);
  // And it never runs back when the wall clock is stepped back again.
  Date.now = realNow;
  assert.ok(steadyNow() >= after);
});
