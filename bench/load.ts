// Load shapes. Both are bounded in count and in time: past `maxMs` no new work starts.

import type { BatchFigures } from './batches.ts';
import type { Context, Throughput } from './context.ts';
import { type CpuMeter, meterCpu } from './cpu.ts';
import { nowMs, rate } from './stats.ts';

export interface LoadResult {
  /** Operations that completed. */
  done: number;
  /** From the first start to the last completion. */
  elapsedMs: number;
  /** Per-operation duration in ms, in completion order. */
  durations: number[];
  /** True when the deadline stopped the loop before `count`. */
  truncated: boolean;
}

/** Closed loop: `concurrency` workers take the next index until `count` are done. */
export async function closedLoop(
  count: number,
  concurrency: number,
  maxMs: number,
  op: (i: number) => Promise<void>,
): Promise<LoadResult> {
  const durations: number[] = [];
  let next = 0;
  let truncated = false;
  const start = nowMs();
  const deadline = start + maxMs;
  let failed = false;
  async function worker(): Promise<void> {
    while (next < count && !failed) {
      if (nowMs() > deadline) {
        truncated = true;
        return;
      }
      const i = next++;
      const t0 = nowMs();
      try {
        await op(i);
      } catch (error) {
        // One failure ends the loop: the other workers stop taking work.
        failed = true;
        throw error;
      }
      durations.push(nowMs() - t0);
    }
  }
  await Promise.all(Array.from({ length: Math.min(concurrency, count) }, worker));
  return { done: durations.length, elapsedMs: nowMs() - start, durations, truncated };
}

/**
 * A throughput figure: `warm` operations first (not measured), then `count` timed ones, each loop
 * at the run's concurrency; `op` gets the operation's index across both. A timed loop cut short by
 * its deadline is noted under `label`. The timed loop's CPU per operation is metered for the named
 * `processes`, PostgreSQL (when on this machine) and this process (as `self`, "client" unless
 * named); with `batches`, so is how the herald process under test batched its writes.
 */
export async function measureThroughput(
  ctx: Pick<Context, 'options' | 'notes' | 'postmasterPid'>,
  label: string,
  warm: number,
  count: number,
  op: (i: number) => Promise<void>,
  meters: {
    processes?: Record<string, number>;
    self?: string;
    batches?: () => Promise<{ stop(): Promise<BatchFigures> }>;
  } = {},
): Promise<Throughput> {
  const { concurrency } = ctx.options;
  await closedLoop(warm, concurrency, 30_000, op);
  const batchMeter = await meters.batches?.();
  const meter = meterCpu(meters.processes ?? {}, {
    postmaster: ctx.postmasterPid,
    self: meters.self ?? 'client',
  });
  const timed = await closedLoop(count, concurrency, 120_000, (i) => op(warm + i));
  const perOperation = meter.stop(timed.done);
  const batches = await batchMeter?.stop();
  if (timed.truncated) ctx.notes.push(`${label} stopped at its deadline after ${timed.done}`);
  return {
    perSecond: rate(timed.done, timed.elapsedMs),
    count: timed.done,
    elapsedMs: timed.elapsedMs,
    cpu: perOperation,
    ...(batches ? { batches } : {}),
  };
}

/**
 * Open loop at a fixed rate: operation i starts at start + i / rate whether or not earlier ones
 * finished (no coordinated omission). Resolves when every started operation has settled.
 */
export async function openLoop(
  count: number,
  perSecond: number,
  maxMs: number,
  op: (i: number, scheduledAt: number) => Promise<void>,
): Promise<LoadResult> {
  const durations: number[] = [];
  const running: Promise<void>[] = [];
  const failures: unknown[] = [];
  const start = nowMs();
  const interval = 1000 / perSecond;
  let truncated = false;
  for (let i = 0; i < count; i++) {
    const at = start + i * interval;
    if (at - start > maxMs) {
      truncated = true;
      break;
    }
    const wait = at - nowMs();
    if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
    running.push(
      op(i, at).then(
        () => {
          durations.push(nowMs() - at);
        },
        (error: unknown) => {
          failures.push(error);
        },
      ),
    );
  }
  await Promise.all(running);
  if (failures.length > 0) throw failures[0];
  return { done: durations.length, elapsedMs: nowMs() - start, durations, truncated };
}

/**
 * Meters a worker delivering to the receiver: the worker's, the receiver's and the server's CPU per
 * request the receiver counts from now on, to `stop(count)` at the receiver's count then.
 */
export async function meterDeliveries(
  ctx: Pick<Context, 'receiver' | 'postmasterPid'>,
  workerPid: number,
): Promise<CpuMeter> {
  const { count: before } = await ctx.receiver.stats();
  const meter = meterCpu(
    { worker: workerPid, receiver: ctx.receiver.pid },
    { postmaster: ctx.postmasterPid },
  );
  return { stop: (count) => meter.stop(count - before) };
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));
