// (3) The peer: graphile-worker on the same PostgreSQL (schema graphile_worker in the scratch
// database) and the same receiver, one HTTP POST of the same payload per job. Throughput: N jobs
// queued while the runner is stopped, then the runner starts and the receiver counts them in.
// Latency: jobs added one at a time at a fixed moderate rate to an idle runner, add → arrival;
// the runner is the one that has just run the throughput, warm, as herald's worker is when measured.
// The throughput run alone is also one half of each interleaved pair (scenarios/pairs.ts).

import { Logger, makeWorkerUtils, runMigrations, type WorkerUtils } from 'graphile-worker';
import { PAYLOAD } from '../config.ts';
import type { Context } from '../context.ts';
import { settle, withClient } from '../db.ts';
import { meterDeliveries, openLoop, sleep } from '../load.ts';
import { sampleMemory, startPeerWorker } from '../processes.ts';
import { joinLatencies, rate } from '../stats.ts';

const quiet = new Logger(() => (level, message) => {
  if (level === 'error') console.error(`[peer] ${message}`);
});

const workerUtils = (connectionString: string) =>
  makeWorkerUtils({ connectionString, schema: 'graphile_worker', logger: quiet, maxPoolSize: 4 });

/**
 * Throughput: N jobs queued while no runner runs, then a runner starts and the receiver counts
 * them in. Returns the figure and the runner, still running and warm (the caller stops it).
 */
async function throughput(ctx: Context, utils: WorkerUtils) {
  const { concurrency, counts } = ctx.options;
  for (let from = 0; from < counts.peerJobs; from += 1000) {
    const batch = Array.from({ length: Math.min(1000, counts.peerJobs - from) }, (_, k) => ({
      identifier: 'post',
      // The event travels in the job, as it does in a graphile-worker user's: its row is as large
      // as herald's message, and the worker reads it back, as herald's does.
      payload: { id: `t${from + k}`, event: PAYLOAD },
    }));
    await utils.addJobs(batch);
  }
  // The statistics autovacuum would give the job table by now (this server runs without it):
  // after a VACUUM of the empty table they say it holds nothing, and graphile-worker's fetch of
  // jobs, planned for an empty table, took seconds a call over 100,000 jobs that carry events.
  await withClient(ctx.db.url, (client) => client.query('analyze graphile_worker._private_jobs'));
  await ctx.receiver.reset();
  const worker = await startPeerWorker(ctx.db.url, ctx.receiver.url, concurrency);
  const memory = sampleMemory(worker.pid);
  try {
    const meter = await meterDeliveries(ctx, worker.pid);
    const stats = await ctx.receiver.waitForCount(counts.peerJobs, counts.waitMaxSeconds * 1000);
    const cpu = meter.stop(stats.count);
    if (!stats.complete) {
      ctx.notes.push(
        `peer: ${stats.count} of ${counts.peerJobs} jobs arrived within ${counts.waitMaxSeconds} s`,
      );
    }
    const windowMs = stats.lastAt - stats.firstAt;
    ctx.log(`peer: ${stats.count} jobs delivered in ${(windowMs / 1000).toFixed(2)} s`);
    const result = {
      perSecond: rate(stats.count - 1, windowMs),
      count: stats.count,
      elapsedMs: windowMs,
      peakRssBytes: memory.stop(),
      cpu,
    };
    return { result, worker };
  } catch (error) {
    memory.stop();
    await worker.stop();
    throw error;
  }
}

export async function peer(ctx: Context): Promise<void> {
  const { counts } = ctx.options;
  const connectionString = ctx.db.url;
  await runMigrations({ connectionString, schema: 'graphile_worker', logger: quiet });
  const utils = await workerUtils(connectionString);
  try {
    const { result, worker } = await throughput(ctx, utils);
    ctx.results.peer = result;
    try {
      // Latency, with the runner idle in between, after the throughput run's writes are flushed.
      await settle(connectionString, ctx.notes);
      await sleep(1000);
      await ctx.receiver.reset();
      await ctx.receiver.track(true);
      const addedAt = new Map<string, number>();
      const n = counts.latencySamples;
      // From when the job was due (see scenarios/latency.ts).
      await openLoop(n, counts.latencyRate, (n / counts.latencyRate) * 1000 + 10_000, async (i, dueAt) => {
        const id = `l${i}`;
        addedAt.set(id, dueAt);
        await utils.addJob('post', { id, event: PAYLOAD });
      });
      const arrived = await ctx.receiver.waitForCount(n, counts.waitMaxSeconds * 1000);
      if (!arrived.complete) ctx.notes.push(`peer latency: ${arrived.count} of ${n} jobs arrived in time`);
      const arrivals = await ctx.receiver.drain();
      await ctx.receiver.track(false);
      ctx.results.peerLatency = joinLatencies(addedAt, arrivals);
    } finally {
      await worker.stop();
    }
  } finally {
    await utils.release();
  }
}

/** The peer's throughput run alone, for the interleaved pairs (scenarios/pairs.ts): jobs per second. */
export async function peerThroughput(ctx: Context): Promise<number> {
  await runMigrations({ connectionString: ctx.db.url, schema: 'graphile_worker', logger: quiet });
  const utils = await workerUtils(ctx.db.url);
  try {
    const { result, worker } = await throughput(ctx, utils);
    await worker.stop();
    return result.perSecond;
  } finally {
    await utils.release();
  }
}
