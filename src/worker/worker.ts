// The delivery worker: claim due deliveries in batches (one short transaction), run each attempt
// with no transaction open, and hand the outcome to the finalizer (another short transaction,
// which also claims the deliveries that the outcomes let go next). It wakes on NOTIFY from
// publishers, falls back to polling, and recovers expired leases.

import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import type { SecretBox } from '../crypto/secret-box.ts';
import { answeredWithin, NoAnswerInTime } from '../db/answered-within.ts';
import { forgetOldAnswers } from '../db/api-idempotency.ts';
import { TEND_BATCH, tendDeferred } from '../db/deferred-queue.ts';
import {
  attemptRecovered,
  type ClaimedDelivery,
  type ClaimRequest,
  claimDeliveries,
  type RecordedOutcome,
  type RecoveredLease,
  recoverExpiredLeases,
  releaseClaim,
  releaseUnsent,
} from '../db/deliveries.ts';
import { WAKE_CHANNEL } from '../db/messages.ts';
import type { Db, Queryable } from '../db/port.ts';
import { DUE_DEAD_ROWS_TO_VACUUM, vacuumDueDeliveries } from '../db/queue-vacuum.ts';
import { newHistoryWalk, retentionPass } from '../db/retention.ts';
import type { RetryPolicy } from '../domain/retry-policy.ts';
import { steadyNow } from '../domain/steady-clock.ts';
import type { Metrics, NotSentReason } from '../ops/metrics.ts';
import type { Sender } from '../sender/send.ts';
import { type EndpointSecrets, runAttempt } from './attempt.ts';
import { createEndpointChanges, ENDPOINT_CHANGED_CHANNEL } from './endpoint-changes.ts';
import { createEndpointHeaderCache } from './endpoint-headers.ts';
import { createFinalizer, FIRST_BACKOFF_MS, type FinalizerOptions, MAX_BACKOFF_MS } from './finalizer.ts';
import { createSigningKeyCache } from './signing-keys.ts';

/** Retention is a slow clock: once a minute is plenty, unless the last pass left work behind. */
const RETENTION_EVERY_MS = 60_000;
/** How often tending walks every endpoint with held deliveries (see tendDeferred). */
const RELEASE_HELD_EVERY_MS = 30_000;
/** Tendings in one maintenance pass at most, while each step keeps filling its batch. */
const TENDINGS_PER_PASS = 10;
/** A retention pass's share of the maintenance loop, which also recovers leases. */
const RETENTION_BUDGET_MS = 2_000;

export interface WorkerOptions {
  db: Db;
  /** The sender's deadline; an attempt starts only with at least this much lease left. */
  attemptTimeoutMs: number;
  /** Days to keep finished messages with their deliveries and attempts; undefined: forever. */
  historyRetentionDays?: number | undefined;
  box: SecretBox;
  sender: Sender;
  policy: RetryPolicy;
  /** Sign under Svix's header names too (Config.svixHeaders). */
  svixHeaders?: boolean | undefined;
  log: Logger;
  leaseSeconds: number;
  disableAfterFailures: number;
  /**
   * Finds the operator's own endpoint (operational webhooks), never auto-disabled: it carries the
   * news of every other endpoint's trouble, its own included, so its failures are retried, not
   * counted. Asked at the start and on the maintenance clock: another process's start-up may
   * create it, or create it anew.
   */
  findOperatorEndpoint?: () => Promise<string | null>;
  concurrency: number;
  pollIntervalMs: number;
  metrics?: Metrics;
  /**
   * Written in the outcome's own transaction (operational webhooks; see finalizer.ts), and in the
   * lease recovery's: from the start when this process's configuration turns operational webhooks
   * on, else once the operator's endpoint is found (another process's start-up made it), so that
   * every worker reports, whichever processes carry HERALD_OPERATOR_WEBHOOK_URL. Without either,
   * outcome writes stay single statements that claim along.
   */
  afterRecord?: FinalizerOptions['afterRecord'] | undefined;
  afterRecover?: (tx: Queryable, recovered: RecoveredLease[]) => Promise<void>;
  operatorWebhooksConfigured?: boolean;
}

export interface Worker {
  start(): Promise<void>;
  /** Stops claiming, waits up to `graceMs` for attempts in flight, then returns. */
  stop(graceMs?: number): Promise<void>;
  /**
   * After stop() and the sender's close (every request has ended): waits for what the attempts
   * that outlived the grace still have to write. Their requests were waited for anyway; an
   * outcome in hand is recorded, not left to lease recovery as `unknown`.
   */
  finish(): Promise<void>;
}

/**
 * What a timer may fire early by: the event loop's clock it counts from is read before the code
 * that sets it runs. A claim round that came before a throttled endpoint's slot opened would leave
 * the endpoint to the next poll.
 */
const TIMER_SLACK_MS = 10;

export function createWorker(options: WorkerOptions): Worker {
  const { db, log } = options;
  const keyCache = createSigningKeyCache(db, options.box, (endpointId, error) =>
    log.error({ endpointId, err: error.message }, 'an endpoint signing secret cannot be opened'),
  );
  const headerCache = createEndpointHeaderCache(options.box, (endpointId, error) =>
    log.error({ endpointId, err: error.message }, "an endpoint's headers cannot be opened"),
  );
  const { metrics } = options;
  // What a request's start limit keeps of the lease after its deadline, to record its outcome —
  // and to retry that write through a database blip (invariant 7): half of what the lease leaves
  // beyond the deadline, at most 5 s.
  const recordingReserveMs = Math.min(5000, (options.leaseSeconds * 1000 - options.attemptTimeoutMs) / 2);
  const finalizer = createFinalizer({
    db,
    disableAfter: options.disableAfterFailures,
    log,
    onRetry: () => metrics?.finalizationRetried(),
    // An outcome comes with its recording reserve left at least: a try of the write before it
    // takes half of that at most, so that it is written in time behind one left unanswered.
    maxTryMs: recordingReserveMs / 2,
    written: (items, seconds) => metrics?.batchWritten('outcome', items, seconds),
    // Read at every write: see WorkerOptions.afterRecord.
    get afterRecord() {
      return reportsToOperator() ? options.afterRecord : undefined;
    },
    // An outcome write frees endpoints: it claims for the free slots in the same call and commit.
    claimAlong: {
      reserve() {
        if (!running) return null;
        const slots = reserveSlots();
        if (slots === null) return null;
        return {
          request: slots.request,
          claimed(claimed) {
            // A wake-up refused while this claim held the slots was not answered by it.
            if (slots.settle(claimed)) nudge();
            if (running) track(dispatching, startClaimed(claimed, slots.request.claimId));
            else giveBackWhileStopping(claimed);
          },
          released(leftBehind) {
            if (slots.settle(null, leftBehind)) nudge();
          },
        };
      },
    },
  });
  const minClaim = Math.max(1, Math.floor(options.concurrency / 4));
  // Expired leases are looked for a few times per lease, so a dead worker's deliveries come back
  // soon after their lease ends, without a query per claim round.
  const recoverEveryMs = Math.min(5000, (options.leaseSeconds * 1000) / 4);
  // A claim round's answer is awaited for half a lease (1 to 30 s): one left unanswered (a
  // connection gone silent) is given back by its id while its leases still run, instead of after
  // the client's query deadline, when recovery has made its unsent attempts unknown.
  const claimAnswerMs = Math.min(30_000, Math.max(1000, options.leaseSeconds * 500));

  let running = false;
  let loop: Promise<void> | null = null;
  let maintenanceLoop: Promise<void> | null = null;
  let stopping = new AbortController();
  /**
   * A lease from the stop on: by then every lease this worker claimed before its stop has expired
   * (one claimed by a claim left unanswered, landing later, may run longer: lease recovery takes
   * it), and herald's close drops the database. Give-backs are not retried past it.
   */
  let leasesOverAt = Number.POSITIVE_INFINITY;
  let unlisten: (() => Promise<void>) | null = null;
  /** Endpoint changes heard: a request claimed before one is withdrawn as it is about to leave. */
  const endpointChanges = createEndpointChanges(options.leaseSeconds * 1000);
  let operatorEndpointId: string | null = null;
  const reportsToOperator = () => options.operatorWebhooksConfigured === true || operatorEndpointId !== null;
  let listenFailed = false;
  let wake: (() => void) | null = null;
  /**
   * Attempts claimed whose response is not in yet (their outcomes are written afterwards), and
   * slots reserved by a claim under way.
   */
  let inFlight = 0;
  /** Attempts whose request is done and whose outcome is being written. */
  let recording = 0;
  const attempts = new Set<Promise<void>>();
  /** Leases being given back unsent: claimed while stopping, or of a claim not started. */
  const givingBack = new Set<Promise<void>>();
  /** Claims made with an outcome write, whose attempts are being started. */
  const dispatching = new Set<Promise<void>>();
  let cursor = '';
  /** The last claim was full, or a wake-up found no free slot: due work may be waiting. */
  let mayHaveMore = true;
  /** Wake-ups that found no free slot; a claim under way when one came must not clear `mayHaveMore`. */
  let refusals = 0;
  const refused = () => {
    refusals++;
    mayHaveMore = true;
  };
  let lastRetention = 0;
  let lastReleaseHeld = 0;
  /** The last retention pass ran out of time with work left: the next maintenance pass goes on. */
  let retentionBehind = false;
  // Where history pruning's walk stands, from pass to pass (retention.ts).
  const historyWalk = newHistoryWalk();
  /** So did the last forgetting of old idempotency answers. */
  let answersBehind = false;
  /** Dead due rows that the last VACUUM left (see vacuumDueDeliveries). */
  let dueDeadLeft = 0;

  // A wake-up that arrives while a round is running (a NOTIFY, a finished attempt) must not be
  // lost: it is remembered, and the next idle() returns at once instead of sleeping.
  let wakePending = false;
  const nudge = () => {
    if (wake) wake();
    else wakePending = true;
  };

  function idle(ms: number): Promise<void> {
    if (wakePending) {
      wakePending = false;
      return Promise.resolve();
    }
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

  /**
   * Runs a write that ends leases herald did not send, retried with backoff while the database
   * fails, as long as the leases last (`until`, on the steady clock); then the last error is
   * thrown, and lease recovery takes what is left. Given up, an unsent lease is recovered as
   * `unknown`: nobody recorded that it was not sent. A stopping worker goes on trying too (stop()
   * waits for its give-backs): the leases it gives back as it stops are most of what it gives back.
   */
  async function whileLeased<T>(until: number, reason: NotSentReason, write: () => Promise<T>): Promise<T> {
    for (let backoff = FIRST_BACKOFF_MS; ; backoff = Math.min(backoff * 2, MAX_BACKOFF_MS)) {
      try {
        return await write();
      } catch (error) {
        if (steadyNow() + backoff >= Math.min(until, leasesOverAt)) throw error;
        log.warn({ err: (error as Error).message, backoff, reason }, 'retrying a give-back of unsent leases');
        await sleep(backoff);
      }
    }
  }

  /**
   * Gives an unsent attempt's lease back (budget kept, attempt row removed), counted and logged.
   * A lease that lease recovery took first (this worker was stalled past it) is not given back
   * nor counted here: recovery closed its attempt as unknown and counted it as a recovery. stop()
   * waits for it, past the grace for attempts: the database must still be there to take it.
   */
  function giveBack(
    claim: ClaimedDelivery,
    reason: NotSentReason,
    message: string,
    details: Record<string, unknown> = {},
    level: 'warn' | 'info' = 'warn',
  ): Promise<void> {
    const given = releaseCounted(claim, reason, message, details, level);
    track(
      givingBack,
      given.catch(() => {}),
    );
    return given;
  }

  async function releaseCounted(
    claim: ClaimedDelivery,
    reason: NotSentReason,
    message: string,
    details: Record<string, unknown>,
    level: 'warn' | 'info',
  ): Promise<void> {
    const released = await whileLeased(claim.leaseEndsBy.getTime(), reason, () => releaseUnsent(db, claim));
    // Not found: recovery took it, unless an earlier try committed unseen (the check failing, as
    // recovery is by far the likelier).
    if (!released && (await attemptRecovered(db, claim.attemptId).catch(() => true))) {
      log.warn(
        { deliveryId: claim.deliveryId, attemptId: claim.attemptId, reason, ...details },
        'not sent, but its lease was recovered first; recovery recorded the attempt as unknown',
      );
      return;
    }
    metrics?.attemptNotSent(reason);
    log[level]({ deliveryId: claim.deliveryId, ...details }, message);
  }

  /** Starts what an outcome write claimed along, on its own: nothing waits for it but stop(). */
  const startClaimed = (claimed: ClaimedDelivery[], claimId: string): Promise<void> =>
    dispatch(claimed, claimId).catch((error: Error) =>
      log.error({ err: error.message }, 'claimed deliveries could not be started'),
    );

  /** The worker began stopping while a claim ran: what it claimed is given back unsent. */
  const giveBackWhileStopping = (claimed: readonly ClaimedDelivery[]): void => {
    for (const claim of claimed) {
      giveBack(claim, 'stopping', 'claimed while stopping; given back unsent').catch((error: Error) =>
        log.error(
          { deliveryId: claim.deliveryId, err: error.message },
          'could not give back a lease claimed while stopping; lease recovery will',
        ),
      );
    }
  };

  /**
   * Gives back, unsent, every lease of a claim this worker does not start: the claim's answer was
   * lost (it may have committed unseen), or its signing keys could not be read. Only this worker
   * could have sent them, so this is safe whenever it runs; a claim still running on the server
   * is waited for. Retried while the database fails, as long as the leases last; lease recovery
   * takes whatever is left. The deliveries are due again: the next claim
   * round takes them (not at once: a failing claim must not turn into a tight loop).
   */
  async function giveBackClaim(claimId: string, reason: 'claim_lost' | 'keys_unavailable'): Promise<void> {
    try {
      const until = steadyNow() + options.leaseSeconds * 1000;
      const released = await whileLeased(until, reason, () => releaseClaim(db, claimId));
      if (released > 0) {
        metrics?.attemptNotSent(reason, released);
        log.warn({ claimId, released, reason }, 'a claim was not started; its leases were given back unsent');
      }
    } catch (error) {
      log.error(
        { claimId, reason, err: (error as Error).message },
        'could not give back the leases of a claim that was not started; lease recovery will',
      );
    }
  }

  async function deliver(claim: ClaimedDelivery, secrets: EndpointSecrets): Promise<void> {
    // The slot is for the request: it is given back as soon as the response is in, and the
    // outcome is written meanwhile (group commit). The endpoint stays busy until then — its
    // delivery is `sending` — so the freed slot goes to another endpoint.
    let slotHeld = true;
    let claimedAlong = false;
    /** How long the request took, once it was sent and answered. */
    let sentForMs: number | null = null;
    const releaseSlot = () => {
      if (!slotHeld) return;
      slotHeld = false;
      inFlight--;
      // A freed slot is worth a claim only when work may be waiting for one.
      if (mayHaveMore) nudge();
    };
    try {
      // A worker that was stalled (GC, SIGSTOP, a slow host) after its claim may find its lease
      // nearly gone — or already recovered and taken by another worker. Sending then could put a
      // second request in flight at the endpoint. An attempt starts only if its whole deadline,
      // and time to record its outcome, fit in what is left of the lease; otherwise the lease is
      // given back, unsent. The sender applies the same rule again once the request has its turn
      // at its origin (startBy). Both are on this process's steady clock, as the lease's end is:
      // neither a clock behind the database's nor a step of this host's clock may stretch it.
      const startBy = new Date(claim.leaseEndsBy.getTime() - options.attemptTimeoutMs - recordingReserveMs);
      if (steadyNow() > startBy.getTime()) {
        await giveBack(claim, 'lease_short', 'too little of the lease left to send; not sent');
        return;
      }
      const result = await runAttempt(
        {
          sender: options.sender,
          policy: options.policy,
          svixHeaders: options.svixHeaders,
          operatorEndpointId,
        },
        claim,
        secrets,
        startBy,
        () => !endpointChanges.changedSince(claim.endpointId, claimSentAt(claim)),
      );
      releaseSlot();
      if (result.kind === 'not_started' && result.withdrawn) {
        // Routine (an operator's change): claimed again, it goes out as the endpoint is now, or,
        // deleted or disabled, not at all. Its budget is kept.
        await giveBack(
          claim,
          'endpoint_changed',
          'its endpoint changed while it waited to be sent; given back unsent',
          { endpointId: claim.endpointId, queuedMs: result.queuedMs },
          'info',
        );
        return;
      }
      if (result.kind === 'not_started') {
        // Its request waited for a connection to its origin (shared with other endpoints) until
        // its deadline no longer fitted in the lease — herald's congestion, not the endpoint's
        // doing — or until the worker began stopping. No outcome is recorded; the attempt and
        // its budget are given back.
        if (!running)
          await giveBack(claim, 'stopping', 'waiting for its origin when the worker stopped; not sent');
        else
          await giveBack(
            claim,
            'origin_congested',
            'congested: the request waited for a connection to its origin past its start limit; not sent',
            { queuedMs: result.queuedMs },
          );
        return;
      }
      sentForMs = result.durationMs;
      if (metrics) observeFirstAttempt(metrics, claim, options.leaseSeconds);
      recording++;
      let recorded: RecordedOutcome | null;
      try {
        ({ outcome: recorded, claimedAlong } = await finalizer.record(result, claim.leaseEndsBy));
      } finally {
        recording--;
      }
      // Only outcomes that were written count: a discarded result's attempt is marked unknown by
      // lease recovery, which counts it there (herald_lease_recoveries_total) instead.
      if (recorded?.recorded) metrics?.attemptRecorded(result);
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
      releaseSlot();
      // The endpoint is free again. The write that recorded its outcome claimed along, after the
      // outcome and on a snapshot that sees it, unless it could not (operational webhooks share
      // that transaction; no free slot; a retried write): then a claim round takes it.
      if (!claimedAlong || mayHaveMore) nudge();
      // A throttled endpoint's slot opens again later: a claim round then takes its next delivery,
      // whether or not another wake-up comes before the next poll. The outcome write moved that
      // to the spacing after the write's start less the request's duration; now, after the write,
      // is later (and TIMER_SLACK_MS later still).
      if (claim.throttle) {
        nudgeAt(claim.throttle.until.getTime());
        if (sentForMs !== null) nudgeAt(steadyNow() - sentForMs + claim.throttle.spacingMs + TIMER_SLACK_MS);
      }
    }
  }

  function nudgeAt(steadyTime: number): void {
    const timer = setTimeout(() => {
      if (running) nudge();
    }, steadyTime - steadyNow());
    timer.unref();
  }

  /**
   * LISTENs for wake-ups; on failure the worker polls, and maintenance tries again (a listener's
   * lost connection it restores itself, but one that never listened is not its to retry).
   */
  async function listenForWakeUps(): Promise<void> {
    if (unlisten) return;
    try {
      const unlistenWake = await db.listen(WAKE_CHANNEL, nudge);
      const unlistenChanges = await db
        .listen(ENDPOINT_CHANGED_CHANNEL, endpointChanges.heard)
        .catch(async (error: Error) => {
          await unlistenWake();
          throw error;
        });
      unlisten = async () => {
        await unlistenWake();
        await unlistenChanges();
      };
      if (listenFailed) log.info('listening for wake-ups again');
      listenFailed = false;
    } catch (error) {
      if (!listenFailed)
        log.warn({ err: (error as Error).message }, 'LISTEN unavailable; relying on polling');
      listenFailed = true;
    }
  }

  /**
   * A LISTEN that failed, tending the deferred deliveries, lease recovery, the due table's vacuum
   * and payload retention, on a clock of their own: a wake-up's claim never waits behind them
   * (they ran at the head of a claim round once, which showed as the p99 of the
   * publish-to-receiver latency). Each step on its own, so that one failing (a lock timeout, a
   * damaged row) does not keep the others from running at every pass — retention above all,
   * which would otherwise stop for as long as lease recovery or the vacuum fails.
   */
  async function maintain(): Promise<void> {
    if (running) await listenForWakeUps();
    endpointChanges.forgetOld();
    // First: deferred deliveries coming due must reach the claims whatever else fails below.
    await step('tending the deferred deliveries', tend);
    await step('finding the operator endpoint', findOperatorEndpoint);
    await step('lease recovery', recoverLeases);
    await step('vacuuming the due deliveries', async () => {
      const left = await vacuumDueDeliveries(db, dueDeadLeft + DUE_DEAD_ROWS_TO_VACUUM);
      if (left !== null) {
        dueDeadLeft = left;
        log.debug({ deadLeft: left }, 'vacuumed the due deliveries');
      }
    });
    // On the steady clock: a step back of the wall clock must not hold retention off for as long.
    const due = steadyNow() - lastRetention >= RETENTION_EVERY_MS;
    if (due) lastRetention = steadyNow();
    if (due || retentionBehind) await step('retention', retain);
    // A step of its own: retention failing (a long walk past the query deadline) must not keep
    // the kept answers growing.
    if (due || answersBehind) await step('forgetting old idempotency answers', forgetAnswers);
  }

  async function step(name: string, run: () => Promise<void>): Promise<void> {
    // A pass under way when the worker is told to stop goes no further: stop() waits for it, and
    // each step left could take a query's whole deadline against a slow database.
    if (!running) return;
    try {
      await run();
    } catch (error) {
      log.error({ err: (error as Error).message }, `maintenance: ${name} failed`);
    }
  }

  async function findOperatorEndpoint(): Promise<void> {
    if (options.findOperatorEndpoint) operatorEndpointId = await options.findOperatorEndpoint();
  }

  /** When a claim was sent, on the steady clock: every claim asks for the worker's lease length. */
  const claimSentAt = (claim: ClaimedDelivery) => claim.leaseEndsBy.getTime() - options.leaseSeconds * 1000;

  async function recoverLeases(): Promise<void> {
    const afterRecover = reportsToOperator() ? options.afterRecover : undefined;
    const recovered = afterRecover
      ? await db.transaction(async (tx) => {
          const rows = await recoverExpiredLeases(tx, options.policy);
          await afterRecover(tx, rows);
          return rows;
        })
      : await recoverExpiredLeases(db, options.policy);
    if (recovered.length > 0) {
      metrics?.leasesRecovered(recovered.length);
      log.warn({ count: recovered.length }, 'recovered expired leases; attempts marked unknown');
    }
  }

  async function retain(): Promise<void> {
    const pass = await retentionPass(db, {
      historyRetentionDays: options.historyRetentionDays,
      budgetMs: RETENTION_BUDGET_MS,
      historyWalk,
    });
    retentionBehind = pass.behind;
    if (pass.expired > 0) log.info({ count: pass.expired }, 'removed payloads past their retention period');
    if (pass.pruned > 0)
      log.info({ count: pass.pruned }, 'pruned finished messages past the history retention');
    if (pass.claims > 0)
      log.info({ count: pass.claims }, 'pruned inbound claims of pruned messages past the history retention');
    if (pass.behind) log.info('retention is behind; the next maintenance pass goes on');
  }

  async function forgetAnswers(): Promise<void> {
    const { forgotten, behind } = await forgetOldAnswers(db, { until: steadyNow() + RETENTION_BUDGET_MS });
    answersBehind = behind;
    if (forgotten > 0) log.info({ count: forgotten }, 'forgot the answers of old idempotency keys');
  }

  /** Moves deferred deliveries coming due back into the claims' reach (migration 0030). */
  async function tend(): Promise<void> {
    const releaseHeld = steadyNow() - lastReleaseHeld >= RELEASE_HELD_EVERY_MS;
    for (let pass = 0; pass < TENDINGS_PER_PASS && running; pass++) {
      const tended = await tendDeferred(db, releaseHeld);
      // Another worker was tending: the walk over held rows is still this one's to do.
      if (!tended.tended) return;
      if (releaseHeld) lastReleaseHeld = steadyNow();
      if (tended.requeued + tended.held + tended.released > 0)
        log.debug(tended, 'tended deferred deliveries');
      if (tended.requeued + tended.released > 0) nudge();
      if (Math.max(tended.requeued, tended.held, tended.released) < TEND_BATCH) return;
    }
  }

  async function maintenance(): Promise<void> {
    while (running) {
      // Each step catches and logs its own failure (step()).
      await maintain();
      await sleep(recoverEveryMs, undefined, { signal: stopping.signal }).catch(() => {});
    }
  }

  /**
   * How many deliveries a claim should ask for now; 0: none. Outcomes waiting for their write may
   * number up to `concurrency` for free; beyond that each takes a slot, so a slow database slows
   * the claims instead of piling up results in memory. A claim costs a round trip and a commit
   * whatever its size: while requests are in flight, it waits until a quarter of the slots are
   * free and claims for all of them at once.
   */
  function claimable(): number {
    const free = options.concurrency - inFlight - Math.max(0, recording - options.concurrency);
    return free <= 0 || (inFlight > 0 && free < minClaim) ? 0 : free;
  }

  /**
   * Reserves the free slots for one claim (a claim round's, or an outcome write's claim along):
   * while it runs, another claim must not count them as free. `settle` gives them back with what
   * was claimed (null: the claim failed — whatever it may have committed unseen is given back)
   * and tells whether a wake-up found no free slot meanwhile.
   */
  function reserveSlots(): {
    request: ClaimRequest & { claimId: string };
    settle(claimed: ClaimedDelivery[] | null, leftBehind?: Promise<unknown>): boolean;
  } | null {
    const free = claimable();
    if (free === 0) {
      // Woken without claiming: work may be waiting for a slot.
      refused();
      return null;
    }
    inFlight += free;
    const refusalsBefore = refusals;
    const claimId = randomUUID();
    return {
      request: { batch: free, leaseSeconds: options.leaseSeconds, afterEndpoint: cursor, claimId },
      settle(claimed, leftBehind) {
        inFlight -= free;
        if (claimed === null) {
          const giveBack = () => giveBackClaim(claimId, 'claim_lost');
          track(givingBack, giveBack());
          // A claim left unanswered may still reach the database after that give-back, and claim:
          // what it claims is given back once it settles. (stop() waits for that, as it would
          // have waited for the claim.)
          if (leftBehind) track(givingBack, leftBehind.then(giveBack, giveBack));
        }
        const refusedMeanwhile = refusals !== refusalsBefore;
        // A full batch suggests more due work; a partial one took everything due and free —
        // unless a wake-up found no free slot meanwhile.
        if (claimed) mayHaveMore = claimed.length === free || refusedMeanwhile;
        return refusedMeanwhile;
      },
    };
  }

  async function round(): Promise<number> {
    const slots = reserveSlots();
    if (slots === null) return 0;
    let claimed: ClaimedDelivery[];
    const claiming = claimDeliveries(db, slots.request);
    try {
      claimed = await answeredWithin(claiming, claimAnswerMs);
    } catch (error) {
      slots.settle(null, error instanceof NoAnswerInTime ? claiming : undefined);
      throw error;
    }
    slots.settle(claimed);
    if (running) await dispatch(claimed, slots.request.claimId);
    else giveBackWhileStopping(claimed);
    return claimed.length;
  }

  /** Starts the attempts of a claim's deliveries; the round robin continues after the last one. */
  async function dispatch(claimed: ClaimedDelivery[], claimId: string): Promise<void> {
    if (claimed.length === 0) {
      cursor = '';
      return;
    }
    cursor = claimed.at(-1)!.endpointId;
    inFlight += claimed.length;
    let keys: Map<string, Buffer[]>;
    try {
      keys = await keyCache.keysFor(new Map(claimed.map((c) => [c.endpointId, c.secretVersion])));
    } catch (error) {
      // Without keys nothing can be signed: the leases are given back, unsent (and their first
      // attempts are still to come).
      inFlight -= claimed.length;
      track(givingBack, giveBackClaim(claimId, 'keys_unavailable'));
      throw error;
    }
    for (const claim of claimed) {
      const secrets = {
        keys: keys.get(claim.endpointId) ?? [],
        headers: headerCache.open(claim.endpointId, claim.headers),
      };
      track(attempts, deliver(claim, secrets));
    }
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
      // (publish NOTIFY, a freed slot, a finished outcome) or the poll interval, backing off
      // while the database fails.
      if (claimed > 0 && mayHaveMore && inFlight < options.concurrency && recording < options.concurrency)
        continue;
      await idle(
        failures > 0 ? Math.min(options.pollIntervalMs * 2 ** failures, 30_000) : options.pollIntervalMs,
      );
    }
  }

  /** What attempts handed over is written: their outcomes, and the leases they gave back. */
  async function writesDone(): Promise<void> {
    await finalizer.drain();
    await Promise.all(givingBack);
  }

  return {
    async start() {
      if (running) return;
      running = true;
      leasesOverAt = Number.POSITIVE_INFINITY;
      options.sender.resumeStarting();
      // A database away at the start must not stop it: the maintenance clock asks again.
      await step('finding the operator endpoint', findOperatorEndpoint);
      await listenForWakeUps();
      stopping = new AbortController();
      loop = run();
      maintenanceLoop = maintenance();
    },
    async stop(graceMs = 10_000) {
      // The grace counts from the stop: a claim or a maintenance pass (a long retention delete)
      // still running spends it, rather than extending the stop by its own length.
      const grace = new Promise<'timeout'>((resolve) => setTimeout(resolve, graceMs, 'timeout').unref());
      leasesOverAt = steadyNow() + options.leaseSeconds * 1000;
      running = false;
      // Requests still waiting for their origin are not sent now: their leases go back unsent,
      // budget kept, instead of going out one by one while the process is being stopped.
      options.sender.stopStarting();
      nudge();
      stopping.abort();
      await loop;
      await maintenanceLoop;
      await unlisten?.();
      // A worker started again listens again.
      unlisten = null;
      // Attempts that an outcome write claimed just before the stop are under way too.
      await Promise.all(dispatching);
      // (A grace spent on a claim or a pass that outlasted it says nothing of attempts: none may be left.)
      const inGrace = Promise.all(attempts).then(() => 'done' as const);
      if (attempts.size > 0 && (await Promise.race([inGrace, grace])) === 'timeout') {
        log.warn(
          { inFlight: attempts.size },
          'stopping: attempts still in flight after the grace; each ends within the attempt timeout, and its outcome is recorded before exit',
        );
      }
      await writesDone();
    },
    async finish() {
      await Promise.all(attempts);
      await writesDone();
    },
  };
}

/** Keeps `work` in `set` until it settles (what stop() waits for). */
function track(set: Set<Promise<void>>, work: Promise<void>): void {
  set.add(work);
  void work.finally(() => set.delete(work));
}

/**
 * Publish-to-first-attempt latency, for the scheduled first attempt of each delivery (cycle 1,
 * attempt 1; a manual resend to an endpoint the message was never routed to would measure the
 * operator, not herald), once the attempt has run: a lease given back unsent returns its delivery
 * to attempt 1, to be claimed again. Both ends are database times — the attempt started at the
 * claim's now(), which is its lease expiry minus the lease — so clock skew between hosts does not
 * enter.
 */
function observeFirstAttempt(metrics: Metrics, claim: ClaimedDelivery, leaseSeconds: number): void {
  if (claim.cycle !== 1 || claim.attemptsInCycle !== 1 || claim.trigger !== 'scheduled') return;
  const startedAt = claim.leaseExpiresAt.getTime() - leaseSeconds * 1000;
  metrics.firstAttempt((startedAt - claim.messageCreatedAt.getTime()) / 1000);
}
