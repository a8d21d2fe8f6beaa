// When to try a delivery again. Pure: the clock and the randomness are passed in.

/** Each wait is spread within ±20 % of its nominal value (DESIGN.md, invariant 8). */
export const RETRY_JITTER = 0.2;

export interface RetryPolicy {
  /** Seconds to wait after attempt n (1-based) before attempt n + 1. */
  readonly schedule: readonly number[];
  /** Spread each wait uniformly within ±jitter of its nominal value (0.2 = ±20 %). */
  readonly jitter: number;
}

export const attemptsPerCycle = (policy: RetryPolicy): number => policy.schedule.length + 1;

export interface RetryInput {
  /** Attempts made in this cycle, including the one that just ended. */
  attemptsInCycle: number;
  now: Date;
  /** A uniform draw in [0, 1). */
  random: number;
  /** What the receiver asked for, if anything (429/503 Retry-After). */
  retryAfterSeconds?: number | null | undefined;
}

/**
 * The time of the next attempt, or null when the cycle's budget is spent. A receiver's
 * Retry-After can only push the next attempt later, and never beyond the longest step of the
 * schedule: a receiver cannot make herald hammer it, nor park a delivery for a year.
 */
export function nextAttemptAt(policy: RetryPolicy, input: RetryInput): Date | null {
  if (input.attemptsInCycle >= attemptsPerCycle(policy)) return null;
  const nominal = policy.schedule[Math.max(0, input.attemptsInCycle - 1)] ?? 0;
  const random = Number.isFinite(input.random) ? input.random : 0.5;
  const jittered = nominal * (1 + policy.jitter * (2 * random - 1));
  const delaySeconds = Math.max(jittered, boundedRetryAfter(policy, input.retryAfterSeconds));
  return new Date(input.now.getTime() + Math.round(delaySeconds * 1000));
}

/**
 * A receiver's Retry-After as herald honours it: never beyond the longest step of the schedule.
 * NaN (an unparseable value) asks for nothing; Infinity is clamped like any long wait.
 */
export function boundedRetryAfter(policy: RetryPolicy, seconds: number | null | undefined): number {
  const asked = seconds === null || seconds === undefined || Number.isNaN(seconds) ? 0 : seconds;
  return Math.min(Math.max(0, asked), Math.max(0, ...policy.schedule));
}
