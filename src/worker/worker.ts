// The delivery worker: claim due deliveries in batches (one short transaction), run each attempt
// with no transaction open, and hand the outcome to the finalizer (another short transaction).
// It wakes on NOTIFY from publishers, falls back to polling, and recovers expired leases.

import type { Logger } from 'pino';
import type { SecretBox } from '../crypto/secret-box.ts';
import { type ClaimedDelivery, claimDeliveries, recoverExpiredLeases } from '../db/deliveries.ts';
import { WAKE_CHANNEL } from '../db/messages.ts';
import type { Db } from '../db/port.ts';
import { expireOldPayloads } from '../db/retention.ts';
import { attemptsPerCycle, type RetryPolicy } from '../domain/retry-policy.ts';
import type { Sender } from '../sender/send.ts';
import { runAttempt } from './attempt.ts';
import { createFinalizer } from './finalizer.ts';
import { createSigningKeyCache } from './signing-keys.ts';

/** Payload retention is a slow clock: once a minute is plenty, and each run is a small batch. */
const RETENTION_EVERY_MS = 60_000;

export interface WorkerOptions {
  db: Db;
  box: SecretBox;
  sender: Sender;
  policy: RetryPolicy;
  log: Logger;
  leaseSeconds: number;
  disableAfterFailures: number;
  concurrency: number;
  pollIntervalMs: number;
}

export interface Worker {
  start(): Promise<void>;
  /** Stops claiming, waits up to `graceMs` for attempts in flight, then returns. */
  stop(graceMs?: number): Promise<void>;
  /** Attempts currently in flight (claimed and not yet recorded). */
  readonly inFlight: number;
}

export function createWorker(options: WorkerOptions): Worker {
  const { db, log } = options;
  const keyCache = createSigningKeyCache(db, options.box, (endpointId, error) =>
    log.error({ endpointId, err: error.message }, 'an endpoint signing secret cannot be opened'),
  );
  const finalizer = createFinalizer({ db, disableAfter: options.disableAfterFailures, log });
  const maxAttempts = attemptsPerCycle(options.policy);
  // Expired leases are looked for a few times per lease, so a dead worker's deliveries come back
  // soon after their lease ends, without a query per claim round.
  const recoverEveryMs = Math.min(5000, (options.leaseSeconds * 1000) / 4);

  let running = false;
  let loop: Promise<void> | null = null;
  let unlisten: (() => Promise<void>) | null = null;
  let wake: (() => void) | null = null;
  let inFlight = 0;
  const attempts = new Set<Promise<void>>();
  let cursor = '';
  let lastRecovery = 0;
  let lastRetention = 0;

  const nudge = () => wake?.();

  function idle(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(done, ms);
      function done() {
        clearTimeout(timer);
        wake = null;
        resolve();
      }
      wake = done;
    });
  }

  async function deliver(claim: ClaimedDelivery, keys: readonly Buffer[]): Promise<void> {
    try {
      const result = await runAttempt({ sender: options.sender, policy: options.policy }, claim, keys);
      await finalizer.record(result, claim.leaseExpiresAt);
      log.debug(
        {
          messageId: claim.messageId,
          deliveryId: claim.deliveryId,
          attemptId: claim.attemptId,
          outcome: result.outcome,
        },
        'attempt finished',
      );
    } catch (error) {
      // Whatever went wrong, the lease is still held: recovery will mark the attempt unknown.
      log.error({ deliveryId: claim.deliveryId, err: (error as Error).message }, 'attempt crashed');
    } finally {
      inFlight--;
      nudge();
    }
  }

  async function round(): Promise<number> {
    if (Date.now() - lastRecovery >= recoverEveryMs) {
      lastRecovery = Date.now();
      const recovered = await recoverExpiredLeases(db, maxAttempts);
      if (recovered.length > 0)
        log.warn({ count: recovered.length }, 'recovered expired leases; attempts marked unknown');
    }
    if (Date.now() - lastRetention >= RETENTION_EVERY_MS) {
      lastRetention = Date.now();
      const expired = await expireOldPayloads(db);
      if (expired > 0) log.info({ count: expired }, 'removed payloads past their retention period');
    }
    const free = options.concurrency - inFlight;
    if (free <= 0) return 0;
    const claimed = await claimDeliveries(db, free, options.leaseSeconds, cursor);
    if (claimed.length === 0) {
      cursor = '';
      return 0;
    }
    cursor = claimed.at(-1)!.endpointId;
    inFlight += claimed.length;
    let keys: Map<string, Buffer[]>;
    try {
      keys = await keyCache.keysFor(new Map(claimed.map((c) => [c.endpointId, c.secretVersion])));
    } catch (error) {
      // Without keys nothing can be signed; the leases run out and recovery retries them.
      inFlight -= claimed.length;
      throw error;
    }
    for (const claim of claimed) {
      const attempt = deliver(claim, keys.get(claim.endpointId) ?? []);
      attempts.add(attempt);
      void attempt.finally(() => attempts.delete(attempt));
    }
    return claimed.length;
  }

  async function run(): Promise<void> {
    let failures = 0;
    while (running) {
      let claimed = 0;
      try {
        claimed = await round();
        failures = 0;
      } catch (error) {
        failures++;
        log.error({ err: (error as Error).message }, 'claim round failed');
      }
      if (!running) break;
      // A full batch suggests more due work: go again at once. Otherwise wait for a wake-up
      // (publish NOTIFY, a freed slot) or the poll interval, backing off while the database fails.
      if (claimed > 0 && inFlight < options.concurrency) continue;
      await idle(
        failures > 0 ? Math.min(options.pollIntervalMs * 2 ** failures, 30_000) : options.pollIntervalMs,
      );
    }
  }

  return {
    get inFlight() {
      return inFlight;
    },
    async start() {
      if (running) return;
      running = true;
      try {
        unlisten = await db.listen(WAKE_CHANNEL, nudge);
      } catch (error) {
        log.warn({ err: (error as Error).message }, 'LISTEN unavailable; relying on polling');
      }
      loop = run();
    },
    async stop(graceMs = 10_000) {
      running = false;
      nudge();
      await loop;
      await unlisten?.();
      const grace = new Promise<'timeout'>((resolve) => setTimeout(resolve, graceMs, 'timeout').unref());
      if ((await Promise.race([Promise.all(attempts).then(() => 'done' as const), grace])) === 'timeout') {
        log.warn({ inFlight }, 'stopping with attempts in flight; their leases will be recovered');
      }
      await finalizer.drain();
    },
  };
}
