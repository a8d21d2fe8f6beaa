// Properties of the pure retry policy (src/domain/retry-policy.ts) and outcome policy
// (src/domain/outcome-policy.ts), over arbitrary schedules, jitters, draws and Retry-After values.
//
// Deterministic: a fixed seed (PROPERTY_SEED overrides it); PROPERTY_RUNS overrides every numRuns
// for longer local runs. A failure prints the seed and the shrunk counterexample.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import { judgeAttempt } from '../src/domain/outcome-policy.ts';
import { attemptsPerCycle, nextAttemptAt, type RetryPolicy } from '../src/domain/retry-policy.ts';

const SEED = Number(process.env['PROPERTY_SEED'] ?? 0x7e7a1);
const RUNS = process.env['PROPERTY_RUNS'] === undefined ? undefined : Number(process.env['PROPERTY_RUNS']);
const params = (numRuns: number) => ({ seed: SEED, numRuns: RUNS ?? numRuns });

// Rounding to whole milliseconds plus float error in nominal × (1 ± jitter).
const SLACK_MS = 1;

const step = fc.oneof(
  fc.integer({ min: 0, max: 1_000_000 }),
  fc.double({ min: 0, max: 1_000_000, noNaN: true, noDefaultInfinity: true }),
  fc.constantFrom(0, 0.05, 5, 300, 36_000, 1_000_000),
);
const policyArb: fc.Arbitrary<RetryPolicy> = fc.record({
  schedule: fc.array(step, { maxLength: 20 }),
  jitter: fc.oneof(fc.double({ min: 0, max: 0.5, noNaN: true }), fc.constantFrom(0, 0.2, 0.5)),
});
const random = fc.oneof(
  fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
  fc.constantFrom(0, 0.5, 1 - Number.EPSILON),
);
const now = fc.date({
  min: new Date('2000-01-01T00:00:00Z'),
  max: new Date('2100-01-01T00:00:00Z'),
  noInvalidDate: true,
});
// What parseRetryAfter can hand over (whole seconds ≥ 0, or null), and worse: negative, fractional,
// huge and infinite values, as a future caller might pass.
const retryAfter = fc.oneof(
  fc.constant(null),
  fc.constant(undefined),
  fc.integer({ min: 0, max: 2_000_000 }),
  fc.integer({ min: -2_000_000, max: -1 }),
  fc.double({ noNaN: true }),
  fc.constantFrom(0, -0, Number.MAX_SAFE_INTEGER, 1e300, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY),
);

const delayMs = (at: Date | null, from: Date): number => {
  assert.ok(at !== null, 'an attempt within the budget is scheduled');
  assert.ok(Number.isFinite(at.getTime()), `a valid date, got ${at}`);
  return at.getTime() - from.getTime();
};

describe('retry policy', () => {
  test('the budget is the schedule length + 1, exactly', () => {
    fc.assert(
      fc.property(
        policyArb,
        fc.nat({ max: 30 }),
        random,
        now,
        retryAfter,
        (policy, attemptsInCycle, r, at, ra) => {
          const budget = policy.schedule.length + 1;
          assert.equal(attemptsPerCycle(policy), budget);
          const next = nextAttemptAt(policy, { attemptsInCycle, now: at, random: r, retryAfterSeconds: ra });
          if (attemptsInCycle >= budget) assert.equal(next, null, `attempt ${attemptsInCycle} of ${budget}`);
          else
            assert.ok(
              next !== null && Number.isFinite(next.getTime()),
              `attempt ${attemptsInCycle} of ${budget}`,
            );
        },
      ),
      params(2000),
    );
  });

  test('without Retry-After the delay stays within ±jitter of its step; random = 0.5 is the step itself', () => {
    fc.assert(
      fc.property(
        policyArb.filter((p) => p.schedule.length > 0),
        fc.nat(),
        random,
        now,
        fc.constantFrom(null, undefined),
        (policy, pick, r, at, ra) => {
          const n = (pick % policy.schedule.length) + 1;
          const nominal = policy.schedule[n - 1]! * 1000;
          const ms = delayMs(
            nextAttemptAt(policy, { attemptsInCycle: n, now: at, random: r, retryAfterSeconds: ra }),
            at,
          );
          assert.ok(
            ms >= nominal * (1 - policy.jitter) - SLACK_MS,
            `${ms} ms below step ${nominal} ms − jitter`,
          );
          assert.ok(
            ms <= nominal * (1 + policy.jitter) + SLACK_MS,
            `${ms} ms above step ${nominal} ms + jitter`,
          );
          const centred = delayMs(nextAttemptAt(policy, { attemptsInCycle: n, now: at, random: 0.5 }), at);
          assert.ok(
            Math.abs(centred - nominal) <= SLACK_MS,
            `random 0.5 gives ${centred}, step is ${nominal}`,
          );
        },
      ),
      params(2000),
    );
  });

  test('the delay never decreases as the random draw grows', () => {
    fc.assert(
      fc.property(
        policyArb.filter((p) => p.schedule.length > 0),
        fc.nat(),
        random,
        random,
        now,
        (policy, pick, a, b, at) => {
          const n = (pick % policy.schedule.length) + 1;
          const [lo, hi] = a <= b ? [a, b] : [b, a];
          const early = delayMs(nextAttemptAt(policy, { attemptsInCycle: n, now: at, random: lo }), at);
          const late = delayMs(nextAttemptAt(policy, { attemptsInCycle: n, now: at, random: hi }), at);
          assert.ok(early <= late, `${early} ms for draw ${lo} > ${late} ms for draw ${hi}`);
        },
      ),
      params(1000),
    );
  });

  test('Retry-After only pushes later: never earlier than the jittered step, never past the longest step', () => {
    fc.assert(
      fc.property(policyArb, fc.nat(), random, now, retryAfter, (policy, pick, r, at, ra) => {
        const n = (pick % (policy.schedule.length + 1)) + 1;
        fc.pre(n <= policy.schedule.length);
        const jittered = delayMs(nextAttemptAt(policy, { attemptsInCycle: n, now: at, random: r }), at);
        const ms = delayMs(
          nextAttemptAt(policy, { attemptsInCycle: n, now: at, random: r, retryAfterSeconds: ra }),
          at,
        );
        const longestMs = Math.round(Math.max(0, ...policy.schedule) * 1000);
        assert.ok(ms >= jittered, `Retry-After ${ra} made it earlier: ${ms} < ${jittered} ms`);
        assert.ok(
          ms <= Math.max(jittered, longestMs + SLACK_MS),
          `Retry-After ${ra} went past the longest step: ${ms} > max(${jittered}, ${longestMs}) ms`,
        );
        // And within those bounds it is honoured: the receiver's wish, clamped to the longest step.
        const asked = typeof ra === 'number' && ra > 0 ? Math.min(ra * 1000, longestMs) : 0;
        if (asked > jittered + SLACK_MS) {
          assert.ok(Math.abs(ms - asked) <= SLACK_MS, `Retry-After ${ra}: ${ms} ms, expected ${asked} ms`);
        } else {
          assert.ok(ms - jittered <= SLACK_MS, `Retry-After ${ra} ≤ the jittered step changed the delay`);
        }
      }),
      params(3000),
    );
  });
});

describe('outcome policy', () => {
  const outcome = fc.constantFrom<'success' | 'failure' | 'unknown'>('success', 'failure', 'unknown');
  const statusCode = fc.oneof(
    fc.constant(null),
    fc.integer({ min: 100, max: 599 }),
    fc.constantFrom(200, 204, 400, 401, 403, 404, 405, 409, 410, 413, 415, 422, 429, 500, 503),
  );
  const contract = fc.record({
    idempotent: fc.boolean(),
    clientErrorPolicy: fc.constantFrom<'retry' | 'dead-letter'>('retry', 'dead-letter'),
  });
  const VALIDATION = new Set([400, 404, 405, 409, 413, 415, 422]);

  test('success never stops a cycle; unknown stops iff not idempotent; 410 disables; 401/403 flag', () => {
    fc.assert(
      fc.property(outcome, statusCode, contract, (o, code, c) => {
        const verdict = judgeAttempt({ outcome: o, statusCode: code }, c);
        if (o === 'success') assert.equal(verdict.stopCycle, false);
        if (o === 'unknown') assert.equal(verdict.stopCycle, !c.idempotent);
        if (o === 'failure') {
          // Only a dead-letter endpoint stops on a validation answer; everything else backs off.
          assert.equal(
            verdict.stopCycle,
            c.clientErrorPolicy === 'dead-letter' && code !== null && VALIDATION.has(code),
          );
        }
        assert.equal(verdict.disableEndpoint, code === 410 ? 'gone' : null);
        assert.equal(verdict.credentialsRejected, code === 401 || code === 403);
      }),
      params(3000),
    );
  });

  test("an error of the sending host's own is not held against the endpoint; the receiver's are", () => {
    const hostSide = [
      'EAI_AGAIN',
      'ENETUNREACH',
      'ENETDOWN',
      'EADDRNOTAVAIL',
      'EMFILE',
      'ENFILE',
      'ENOBUFS',
      'ENOMEM',
    ];
    const receivers = [
      'ECONNREFUSED',
      'ECONNRESET',
      'ENOTFOUND',
      'EHOSTUNREACH',
      'CERT_HAS_EXPIRED',
      'ETIMEDOUT',
    ];
    fc.assert(
      fc.property(fc.constantFrom(...hostSide, ...receivers, null), contract, (errorCode, c) => {
        const verdict = judgeAttempt({ outcome: 'failure', statusCode: null, errorCode }, c);
        assert.equal(verdict.endpointAtFault, !hostSide.includes(errorCode ?? ''));
      }),
      params(500),
    );
  });
});
