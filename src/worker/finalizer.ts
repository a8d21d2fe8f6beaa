// Records attempt outcomes. Results that arrive while a write is under way are written together
// in the next one (group commit), so a busy worker spends one round trip per batch, not per
// attempt; the first try of each write also claims the next deliveries for the worker (claim
// along). A write that fails (database down, connection cut) is retried with backoff for as long
// as the results' leases last, recording only — and so, once, is one left unanswered past half
// of what is left of them (tryDeadlineMs): fencing makes a repeated outcome write harmless,
// because an item whose lease is no longer held is simply not applied, and a claim that failed —
// or may have committed unseen — is not repeated behind the worker's back.

import type { Logger } from 'pino';
import { answeredWithin, NoAnswerInTime } from '../db/answered-within.ts';
import {
  type AttemptResult,
  type ClaimedDelivery,
  type ClaimRequest,
  existingDeliveries,
  type RecordedOutcome,
  recordOutcomes,
  recordOutcomesAndClaim,
} from '../db/deliveries.ts';
import type { Db, Queryable } from '../db/port.ts';
import { steadyNow } from '../domain/steady-clock.ts';

export interface PendingResult {
  result: AttemptResult;
  leaseEndsBy: Date;
  done: (recorded: Recorded) => void;
}

export interface FinalizerOptions {
  db: Queryable & Pick<Db, 'transaction'>;
  disableAfter: number;
  log: Logger;
  maxBatch?: number;
  onRetry?: (() => void) | undefined;
  /**
   * The longest a try of a write is given before the next goes (default 10 s): results queued
   * behind it wait for it, with what is left of their leases (the worker's recording reserve).
   */
  maxTryMs?: number;
  /**
   * Told of every write that committed: its outcomes and how long its committing try took — with
   * the claim it carries, or with `afterRecord`'s writes in its transaction. Failed tries and the
   * waits between them are not in it: they are counted by `onRetry`. It runs once the outcomes are
   * handed back, and must not throw (Metrics.batchWritten never throws).
   */
  written?: ((items: number, seconds: number) => void) | undefined;
  /**
   * Runs in the transaction that records the outcomes (operational webhooks): what it writes
   * commits with them or not at all. Without it the write stays one autocommit statement.
   */
  afterRecord?:
    | ((tx: Queryable, results: AttemptResult[], recorded: RecordedOutcome[]) => Promise<void>)
    | undefined;
  /**
   * Claims with each outcome write (not with `afterRecord`): the write that frees endpoints claims
   * their next deliveries in the same call and commit.
   */
  claimAlong?: ClaimAlong;
}

/** The worker's side of claiming with an outcome write. */
export interface ClaimAlong {
  /** Slots for the next write to claim, reserved until it settles; null: claim nothing. */
  reserve(): ClaimReservation | null;
}

/** Slots reserved for one claim, and what becomes of them. */
export interface ClaimReservation {
  readonly request: ClaimRequest;
  /** The write committed with these claims (`request.batch` of them at most). */
  claimed(claimed: ClaimedDelivery[]): void;
  /**
   * The write failed: nothing was claimed — unless it was left behind unanswered (`leftBehind`),
   * when it may still claim: whatever it claims is given back by the claim's id once it settles.
   */
  released(leftBehind?: Promise<unknown>): void;
}

export interface Recorded {
  /** null: not written within the lease (lease recovery will mark the attempt unknown). */
  outcome: RecordedOutcome | null;
  /** The write that recorded it claimed along: the endpoint it freed was considered at once. */
  claimedAlong: boolean;
}

export interface Finalizer {
  record(result: AttemptResult, leaseEndsBy: Date): Promise<Recorded>;
  /** Resolves once everything handed over so far is written or given up. */
  drain(): Promise<void>;
}

/** Retries of a write while the database fails: the first wait, doubling up to the last. */
export const FIRST_BACKOFF_MS = 50;
export const MAX_BACKOFF_MS = 2000;
/** The shortest and (by default) the longest time a try of a write is given (see tryDeadlineMs). */
const MIN_TRY_MS = 1000;
const MAX_TRY_MS = 10_000;

/**
 * How long a try of a write may go unanswered before the next try goes, on another connection:
 * half of what is left of the shortest lease of its results and of those queued behind it, at
 * most `maxTryMs`, at least a second (a write answers in milliseconds; one of 500 outcomes on a
 * struggling database, in a second or two). A connection gone silent
 * (a failover, a NAT's timeout: no reset) would otherwise hold the write until the client's query
 * deadline — as long as a lease — with no try left to make inside it (invariant 7). The try left
 * behind may still commit: fencing makes the two harmless to each other.
 */
function tryDeadlineMs(waiting: readonly PendingResult[], maxTryMs: number): number {
  const shortest = Math.min(...waiting.map((p) => p.leaseEndsBy.getTime()));
  return Math.max(MIN_TRY_MS, Math.min(maxTryMs, (shortest - steadyNow()) / 2));
}

export function createFinalizer(options: FinalizerOptions): Finalizer {
  const queue: PendingResult[] = [];
  const maxBatch = options.maxBatch ?? 500;
  let running: Promise<void> | null = null;

  /**
   * Logs each result the write discarded (invariant 5), once. A lease lost is a warning: this
   * worker stalled past it, or the database was away. A delivery gone is routine — its endpoint,
   * its app or its message was deleted while the request was out — and said so, at info: it
   * would otherwise raise the alarm of a stalled worker at every delete.
   */
  async function logDiscarded(discarded: readonly PendingResult[]): Promise<void> {
    if (discarded.length === 0) return;
    const ids = discarded.map((p) => p.result.deliveryId);
    // Not knowing (the database away again) tells of a lost lease, as before this look.
    const existing = await existingDeliveries(options.db, ids).catch(() => new Set(ids));
    for (const { result } of discarded) {
      const details = { deliveryId: result.deliveryId, outcome: result.outcome };
      if (existing.has(result.deliveryId))
        options.log.warn(details, 'lease lost before the outcome was recorded; result discarded');
      else options.log.info(details, 'its delivery was deleted while the request was out; result discarded');
    }
  }

  async function writeWithRetry(batch: PendingResult[]): Promise<void> {
    let backoff = FIRST_BACKOFF_MS;
    let live = batch;
    /**
     * A try was left behind unanswered. The tries after it wait for their answers: on a database
     * that is slow rather than gone, each would otherwise leave one more copy of the write queued
     * behind the first's row locks, a pool connection each.
     */
    let leftOne = false;
    for (let firstTry = true; ; firstTry = false) {
      try {
        const startedAt = performance.now();
        const results = live.map((p) => p.result);
        const { afterRecord } = options;
        // The results queued behind this try wait for it too.
        const tryMs = leftOne
          ? Number.POSITIVE_INFINITY
          : tryDeadlineMs([...live, ...queue], options.maxTryMs ?? MAX_TRY_MS);
        const { recorded, claimedAlong } = afterRecord
          ? await answeredWithin(
              options.db.transaction(async (tx) => {
                const rows = await recordOutcomes(tx, results, options.disableAfter);
                await afterRecord(tx, results, rows);
                return { recorded: rows, claimedAlong: false };
              }),
              tryMs,
            )
          : await recordAndClaim(results, firstTry, tryMs);
        const seconds = (performance.now() - startedAt) / 1000;
        const byDelivery = new Map(recorded.map((r) => [r.deliveryId, r]));
        await logDiscarded(live.filter((p) => !byDelivery.get(p.result.deliveryId)?.recorded));
        for (const p of live) p.done({ outcome: byDelivery.get(p.result.deliveryId) ?? null, claimedAlong });
        options.written?.(live.length, seconds);
        return;
      } catch (error) {
        if (error instanceof NoAnswerInTime) leftOne = true;
        options.onRetry?.();
        const now = steadyNow();
        const expired = live.filter((p) => p.leaseEndsBy.getTime() <= now + backoff);
        for (const p of expired) {
          options.log.error(
            { deliveryId: p.result.deliveryId, outcome: p.result.outcome, err: (error as Error).message },
            'could not record the outcome within the lease; lease recovery will mark the attempt unknown',
          );
          p.done({ outcome: null, claimedAlong: false });
        }
        live = live.filter((p) => !expired.includes(p));
        if (live.length === 0) return;
        options.log.warn(
          { err: (error as Error).message, pending: live.length, backoff },
          'retrying outcome write',
        );
        await new Promise((resolve) => setTimeout(resolve, backoff));
        backoff = Math.min(backoff * 2, MAX_BACKOFF_MS);
      }
    }
  }

  async function recordAndClaim(
    results: AttemptResult[],
    claiming: boolean,
    tryMs: number,
  ): Promise<{ recorded: RecordedOutcome[]; claimedAlong: boolean }> {
    const reservation = claiming ? (options.claimAlong?.reserve() ?? null) : null;
    if (reservation === null) {
      return {
        recorded: await answeredWithin(recordOutcomes(options.db, results, options.disableAfter), tryMs),
        claimedAlong: false,
      };
    }
    const writing = recordOutcomesAndClaim(options.db, results, options.disableAfter, reservation.request);
    let written: Awaited<typeof writing>;
    try {
      written = await answeredWithin(writing, tryMs);
    } catch (error) {
      // Its slots go back now, not when a write left behind settles (a query deadline away).
      reservation.released(error instanceof NoAnswerInTime ? writing : undefined);
      throw error;
    }
    reservation.claimed(written.claimed);
    return { recorded: written.recorded, claimedAlong: true };
  }

  async function pump(): Promise<void> {
    while (queue.length > 0) {
      await writeWithRetry(nextBatch());
    }
    running = null;
  }

  /**
   * Up to maxBatch results, in order, one per delivery: a write answers by delivery, so a stale
   * lease's result and its delivery's live one (a stalled attempt's, recovered and claimed again)
   * go in separate writes, each told whether it was recorded.
   */
  function nextBatch(): PendingResult[] {
    const batch: PendingResult[] = [];
    const later: PendingResult[] = [];
    const deliveries = new Set<string>();
    for (const pending of queue) {
      const { deliveryId } = pending.result;
      if (batch.length < maxBatch && !deliveries.has(deliveryId)) {
        deliveries.add(deliveryId);
        batch.push(pending);
      } else {
        later.push(pending);
      }
    }
    queue.length = 0;
    queue.push(...later);
    return batch;
  }

  return {
    record(result, leaseEndsBy) {
      return new Promise((done) => {
        queue.push({ result, leaseEndsBy, done });
        running ??= pump();
      });
    },
    async drain() {
      while (running) await running;
    },
  };
}
