// The retry policy: budgets, jitter's spread and bounds, and Retry-After clamping.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { attemptsPerCycle, nextAttemptAt, type RetryPolicy } from '../src/domain/retry-policy.ts';

const policy: RetryPolicy = { schedule: [5, 300, 1800, 7200, 18000, 36000, 36000], jitter: 0.2 };
const now = new Date('2026-01-01T00:00:00Z');
const delay = (d: Date | null) => (d === null ? null : (d.getTime() - now.getTime()) / 1000);

test('eight attempts per cycle; the ninth is never scheduled', () => {
  assert.equal(attemptsPerCycle(policy), 8);
  for (let n = 1; n <= 7; n++)
    assert.notEqual(nextAttemptAt(policy, { attemptsInCycle: n, now, random: 0.5 }), null);
  assert.equal(nextAttemptAt(policy, { attemptsInCycle: 8, now, random: 0.5 }), null);
});

test('the draw spreads each wait over the whole ±20 %: 0 is 0.8 of the step, 0.5 the step, 1 would be 1.2', () => {
  // Within the bounds alone, a wait that never moved from its step would pass: this is the spread.
  policy.schedule.forEach((step, i) => {
    const at = (random: number) => delay(nextAttemptAt(policy, { attemptsInCycle: i + 1, now, random }))!;
    assert.equal(at(0), Math.round(step * 800) / 1000, `step ${step}, draw 0`);
    assert.equal(at(0.5), step, `step ${step}, draw 0.5`);
    assert.equal(at(0.75), Math.round(step * 1100) / 1000, `step ${step}, draw 0.75`);
    assert.ok(at(0.999999) > step * 1.19, `step ${step}, draw just under 1`);
  });
});

test('each wait stays within ±20 % of its step, at both ends of the random draw', () => {
  policy.schedule.forEach((step, i) => {
    for (const random of [0, 0.25, 0.5, 0.999999]) {
      const seconds = delay(nextAttemptAt(policy, { attemptsInCycle: i + 1, now, random }))!;
      assert.ok(
        seconds >= step * 0.8 - 0.001 && seconds <= step * 1.2 + 0.001,
        `${seconds} for step ${step}`,
      );
    }
  });
  assert.equal(delay(nextAttemptAt(policy, { attemptsInCycle: 1, now, random: 0.5 })), 5);
});

test('Retry-After can only push an attempt later, and never past the longest step', () => {
  const asked = (retryAfterSeconds: number) =>
    delay(nextAttemptAt(policy, { attemptsInCycle: 1, now, random: 0.5, retryAfterSeconds }));
  assert.equal(asked(60), 60);
  assert.equal(asked(1), 5, 'a shorter Retry-After does not hurry herald');
  assert.equal(asked(10 ** 9), 36000, 'clamped to the longest step');
});
