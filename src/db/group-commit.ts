// Group commit in the application. Callers that arrive while a write is under way wait for the
// next one, which writes all of them in one statement: N concurrent callers share one round trip
// and one commit (one WAL flush) instead of queueing for N. At low load a caller finds no write
// under way and goes at once, so nothing waits for a batch to fill.
//
// A batch is atomic, so one bad item would fail its neighbours. When the database REJECTED the
// statement (an ERROR: nothing was committed), each item is written again on its own, and only the
// bad one fails. Any other failure (connection lost, server gone) may have come after the commit:
// retrying could write twice, so every caller of the batch gets that error, as a caller of a
// single write would.

import { refusedStatementCode } from './server-error.ts';

/**
 * Where a write goes. `pipelined`: on the group commit's own connection in pipeline mode
 * (Db.pipeline), right behind the write under way there, which the database runs as soon as that
 * one has committed: no pause while herald reads an answer and sends the next batch, and no second
 * transaction competing with the first for the same cores and pages. `beside`: on a connection of
 * the pool, where it runs at once, beside the pipeline's (for callers held up behind a long write).
 */
export type WriteLane = 'pipelined' | 'beside';

export interface GroupCommitOptions<O = unknown, I = unknown> {
  /** Items per statement at most. */
  maxBatch: number;
  /**
   * Writes on the pipeline at once, at most (at least 1). The first goes as soon as a caller
   * comes; a further one only when `splitAt` callers are waiting. Below that, callers gather
   * behind the write under way, and fewer, larger batches cost the database less per item than
   * more, smaller ones.
   */
  pipelined: number;
  /** Writes beside the pipeline at once, at most: each starts when callers have waited `maxWaitMs`. */
  beside: number;
  /**
   * Whether a writer beside the pipeline goes on with the queue for as long as callers wait (a
   * second transaction under load, on another core of the database: worth it where the
   * database's share of an item is large, as a receipt's), or takes one batch and leaves (where
   * it is small, as a publish's: the pipeline alone costs less per item).
   */
  besideStays: boolean;
  /** Callers waiting that are worth a further write on the pipeline (1..maxBatch). */
  splitAt: number;
  /**
   * How long callers wait behind the writes under way before a write beside them takes them: a
   * long write (a fan-out to many endpoints) would otherwise hold up every publish queued behind
   * it on the pipeline.
   */
  maxWaitMs: number;
  /**
   * Told of every write that committed: its results and how long it took, from the call to the
   * commit's answer (a batch the database rejected is not told; its items written alone are). A
   * caller's wait is its batch's write and part of the one before it, so these figures are what a
   * publish's latency is made of (metrics: herald_batched_write_*). It runs before the callers get
   * their results, so it must not throw: the write committed (Metrics.batchWritten never throws).
   */
  written?: (results: readonly O[], seconds: number) => void;
  /**
   * Callers waiting for a write, at most (default MAX_QUEUED_WRITES). Past that a caller is
   * refused at once with `overloaded()`: when callers come faster than the database commits, each
   * one waiting holds its item (a payload of up to the body limit) in memory, and its client,
   * given up waiting, sends it again on top. Refused, it is told to come back (a 503 with
   * Retry-After).
   */
  maxQueued?: number;
  overloaded: () => Error;
  /**
   * A bound on a batch's size besides `maxBatch`: items are taken while their `of` adds up to
   * `max` at most (one item at least, whatever its size). Where items may be large (inbound bodies
   * up to 8 MiB), a batch of `maxBatch` of them could pass what one statement's text can hold, and
   * the whole batch would fail for no item's fault. The callers waiting hold QUEUED_BATCHES
   * batches' worth at most: past that a caller is refused as past `maxQueued` — 2,048 bodies of
   * 8 MiB would be 16 GiB held while the database struggles.
   */
  batchSize?: { of: (item: I) => number; max: number };
}

export type Write<I, O> = (items: I[], lane: WriteLane) => Promise<O[]>;

/**
 * Characters of payload in one batch, at most (publishes, receipts: GroupCommitOptions.batchSize):
 * far below what one statement's parameter and a string can hold, whatever the body limits.
 */
export const MAX_BATCH_CHARS = 32 * 1024 * 1024;

/** Callers of a group commit waiting at most (publishes, receipts): several batches' worth. */
const MAX_QUEUED_WRITES = 2048;
/** Batches' worth of `batchSize` that the callers waiting may hold at most. */
const QUEUED_BATCHES = 4;

/** Returns `submit(item)`, which resolves to the item's result once its batch has committed. */
export function createGroupCommit<I, O>(
  untimedWrite: Write<I, O>,
  options: GroupCommitOptions<O, I>,
): (item: I) => Promise<O> {
  if (!(options.splitAt >= 1 && options.splitAt <= options.maxBatch)) {
    throw new RangeError(`group commit: splitAt must be 1..maxBatch, got ${options.splitAt}`);
  }
  if (!(options.pipelined >= 1)) {
    throw new RangeError(`group commit: pipelined must be at least 1, got ${options.pipelined}`);
  }
  const { written } = options;
  const write: Write<I, O> = written
    ? async (items, lane) => {
        const startedAt = performance.now();
        const results = await untimedWrite(items, lane);
        written(results, (performance.now() - startedAt) / 1000);
        return results;
      }
    : untimedWrite;
  interface Waiting {
    item: I;
    /** Its share of the queue's size (batchSize.of). */
    size: number;
    resolve: (result: O) => void;
    reject: (error: unknown) => void;
  }
  const queue: Waiting[] = [];
  /** What the callers waiting hold, by batchSize.of. */
  let queuedSize = 0;
  const maxQueuedSize = (options.batchSize?.max ?? Number.POSITIVE_INFINITY) * QUEUED_BATCHES;
  /** The queue's first `n` callers, out of the queue. */
  const take = (n: number): Waiting[] => {
    const taken = queue.splice(0, n);
    for (const w of taken) queuedSize -= w.size;
    return taken;
  };
  const writers: Record<WriteLane, number> = { pipelined: 0, beside: 0 };
  /** When each write on the pipeline was sent (performance.now()), oldest first. */
  const onThePipeline: { sentAt: number }[] = [];
  /** Armed while callers wait behind the writes under way: then a write beside them takes them. */
  let waitTimer: NodeJS.Timeout | null = null;

  /**
   * Whether a write sent now on the pipeline would start soon: not behind one that has run for
   * `maxWaitMs` already (a long write: its callers are for a write beside it, once they have waited).
   */
  function pipelineMoving(): boolean {
    const oldest = onThePipeline[0];
    return oldest === undefined || performance.now() - oldest.sentAt < options.maxWaitMs;
  }

  function armWaitTimer(): void {
    if (waitTimer !== null || writers.beside >= options.beside) return;
    waitTimer = setTimeout(() => {
      waitTimer = null;
      if (queue.length > 0 && writers.beside < options.beside) void writer('beside');
    }, options.maxWaitMs);
  }

  async function writeBatch(batch: Waiting[], lane: WriteLane): Promise<void> {
    const sent = { sentAt: performance.now() };
    if (lane === 'pipelined') onThePipeline.push(sent);
    try {
      const results = await write(
        batch.map((w) => w.item),
        lane,
      );
      for (const [i, w] of batch.entries()) w.resolve(results[i]!);
    } catch (error) {
      if (batch.length > 1 && rejectedForAnItem(error)) {
        // Items held by a lock (55P03, past the functions' 2 s lock timeout: migration 0038)
        // wait their 2 s again alone: one after another on the pipeline, k of them would hold
        // it — and every tenant's writes behind it — k × 2 s. Beside it, on the pool, at once.
        const aloneLane = refusedStatementCode(error) === LOCK_NOT_AVAILABLE ? 'beside' : lane;
        await Promise.all(batch.map((w) => writeAlone(w, aloneLane)));
      } else for (const w of batch) w.reject(error);
    } finally {
      if (lane === 'pipelined') onThePipeline.splice(onThePipeline.indexOf(sent), 1);
    }
  }

  async function writeAlone(w: Waiting, lane: WriteLane): Promise<void> {
    try {
      w.resolve((await write([w.item], lane))[0]!);
    } catch (error) {
      w.reject(error);
    }
  }

  /** How many of the queue's first items the next batch takes: maxBatch, within batchSize. */
  function nextBatchLength(): number {
    const { batchSize } = options;
    if (batchSize === undefined) return options.maxBatch;
    let total = 0;
    let taken = 0;
    while (taken < queue.length && taken < options.maxBatch) {
      total += batchSize.of(queue[taken]!.item);
      if (taken > 0 && total > batchSize.max) break;
      taken++;
    }
    return taken;
  }

  /**
   * A pipelined writer takes the queue as long as there is one, unless the pipeline is held up by
   * a long write; a writer beside, one batch unless `besideStays`.
   */
  async function writer(lane: WriteLane): Promise<void> {
    writers[lane]++;
    try {
      while (queue.length > 0 && (lane === 'beside' || pipelineMoving())) {
        if (waitTimer !== null) {
          clearTimeout(waitTimer);
          waitTimer = null;
        }
        await writeBatch(take(nextBatchLength()), lane);
        if (lane === 'beside' && !options.besideStays) break;
      }
    } finally {
      writers[lane]--;
      if (queue.length > 0) armWaitTimer();
    }
  }

  return (item) =>
    new Promise<O>((resolve, reject) => {
      const size = options.batchSize?.of(item) ?? 0;
      // (One caller is always let in, whatever its size, as a batch always takes one.)
      if (
        queue.length >= (options.maxQueued ?? MAX_QUEUED_WRITES) ||
        (queue.length > 0 && queuedSize + size > maxQueuedSize)
      ) {
        reject(options.overloaded());
        return;
      }
      queue.push({ item, size, resolve, reject });
      queuedSize += size;
      // (A writer that takes the queue disarms the timer.)
      if (
        writers.pipelined === 0 ||
        (writers.pipelined < options.pipelined && queue.length >= options.splitAt)
      ) {
        void writer('pipelined');
      } else armWaitTimer();
    });
}

/**
 * Returns `call()`, which runs `run` at most once at a time. Calls that arrive while a run is under
 * way share ONE run after it (a run that started before a caller came may be too early for it,
 * as a wake-up sent before the caller's commit is): every caller's run starts after its call.
 */
export function coalesced(run: () => Promise<void>): () => Promise<void> {
  let running: Promise<void> | null = null;
  let next: Promise<void> | null = null;
  const call = (): Promise<void> => {
    if (running === null) {
      running = run().finally(() => {
        running = null;
      });
      return running;
    }
    next ??= running
      .catch(() => {})
      .then(() => {
        next = null;
        return call();
      });
    return next;
  };
  return call;
}

/**
 * SQLSTATE classes of errors that no one item causes, or not surely, and that its items written
 * alone would meet again, many writes instead of one while the database struggles: a statement
 * cancelled or past its timeout, the server shutting down (57), out of resources (53), a system
 * error (58), a lost connection (08). Every caller is told to retry (503).
 */
const NOT_AN_ITEMS_FAULT = /^(57|53|58|08)/;

/** lock_not_available: a write waited for a row lock past its lock timeout. */
const LOCK_NOT_AVAILABLE = '55P03';

/**
 * An ERROR reported by the server for an autocommit statement (it did not commit) that one of its
 * items may have caused — a constraint, a value out of range, a deadlock between batches: its
 * items are worth writing alone, so that one bad item fails alone.
 */
function rejectedForAnItem(error: unknown): boolean {
  const code = refusedStatementCode(error);
  return code !== null && !NOT_AN_ITEMS_FAULT.test(code);
}
