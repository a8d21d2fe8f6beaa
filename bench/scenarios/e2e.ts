// (4) herald end to end: N messages published (library face) to one app with E endpoints while no
// worker runs, then ONE `herald worker` process starts and the receiver counts the deliveries in;
// the rate is taken between the first and the last arrival, and the CPU per delivery of the worker,
// PostgreSQL and the receiver from the worker's start-up message until the receiver has them all
// (as the peer's). Afterwards the run waits until every delivery is recorded as succeeded (every
// attempt recorded), and reports how long that took.

import { batchesSoFar } from '../batches.ts';
import { EVENT_TYPE, PAYLOAD } from '../config.ts';
import type { Context } from '../context.ts';
import { settle } from '../db.ts';
import { createAppWithEndpoints, heraldEnv } from '../herald-setup.ts';
import { closedLoop, meterDeliveries, sleep } from '../load.ts';
import { sampleMemory, startHeraldProcess } from '../processes.ts';
import { nowMs, rate } from '../stats.ts';

async function succeeded(ctx: Context, app: string): Promise<number> {
  const h = await ctx.herald();
  const result = await h.herald.core.db.query<{ n: number }>(
    `select count(*)::int as n from delivery where app_id = (select id from app where uid = $1) and state = 'succeeded'`,
    [app],
  );
  return result.rows[0]!.n;
}

async function runCase(ctx: Context, app: string, messages: number, endpoints: number) {
  const h = await ctx.herald();
  const { concurrency } = ctx.options;
  const expected = messages * endpoints;
  // This run's deliveries recorded as succeeded: the interleaved pairs run this case again.
  const succeededBefore = await succeeded(ctx, app);
  const recordedSoFar = async () => (await succeeded(ctx, app)) - succeededBefore;
  // The backlog is not measured: a few publishers keep herald's pool small for later scenarios.
  const published = await closedLoop(messages, 8, 300_000, async () => {
    await h.herald.publish(app, { eventType: EVENT_TYPE, payload: PAYLOAD });
  });
  if (published.truncated)
    throw new Error(`published only ${published.done} of ${messages} messages to ${app}`);
  await ctx.receiver.reset();
  // Its /metrics on an ephemeral port: how it batched its outcome writes (with their claims).
  const worker = await startHeraldProcess('worker', {
    ...heraldEnv(ctx.db.url, concurrency),
    HERALD_METRICS_PORT: '0',
  });
  const { metricsUrl } = worker;
  if (metricsUrl === null)
    throw new Error(`herald worker did not say where its /metrics is:\n${worker.tail()}`);
  const memory = sampleMemory(worker.pid);
  try {
    const meter = await meterDeliveries(ctx, worker.pid);
    const { waitMaxSeconds } = ctx.options.counts;
    const stats = await ctx.receiver.waitForCount(expected, waitMaxSeconds * 1000);
    const cpu = meter.stop(stats.count);
    if (!stats.complete) {
      ctx.notes.push(
        `e2e ${app}: ${stats.count} of ${expected} deliveries arrived within ${waitMaxSeconds} s; rate taken over those`,
      );
    }
    const doneAt = nowMs();
    const windowMs = stats.lastAt - stats.firstAt;
    // Outcomes are written after the response (group commit): wait until all are recorded.
    const deadline = Date.now() + (stats.complete ? 120_000 : 0);
    let recorded = await recordedSoFar();
    while (recorded < expected && Date.now() < deadline) {
      await sleep(50);
      recorded = await recordedSoFar();
    }
    if (recorded < expected && stats.complete) {
      ctx.notes.push(
        `e2e ${app}: only ${recorded} of ${expected} deliveries recorded as succeeded after 120 s`,
      );
    }
    // All of this worker's outcome writes, the first ones (before it said it started) and the
    // last ones (after the receiver had every request) included.
    const batches = await batchesSoFar(metricsUrl, 'outcome');
    ctx.log(
      `e2e ${app}: ${stats.count} requests for ${expected} deliveries in ${(windowMs / 1000).toFixed(2)} s` +
        ` (${stats.count - expected} repeats); all recorded ${((nowMs() - doneAt) / 1000).toFixed(2)} s later`,
    );
    return {
      perSecond: rate(stats.count - 1, windowMs),
      count: stats.count,
      elapsedMs: windowMs,
      recordedMs: nowMs() - stats.firstAt,
      peakRssBytes: memory.stop(),
      cpu,
      batches,
    };
  } finally {
    memory.stop();
    await worker.stop();
  }
}

/** The case with E = 1,000 (the fan-out app's endpoints). */
async function fanCase(ctx: Context) {
  const { counts } = ctx.options;
  return runCase(ctx, await ctx.fanApp(), counts.e2eFanMessages, counts.fanEndpoints);
}

/** The E = 1,000 case's deliveries per second, for the interleaved pairs (scenarios/pairs.ts). */
export async function fanThroughput(ctx: Context): Promise<number> {
  return (await fanCase(ctx)).perSecond;
}

export async function e2e(ctx: Context): Promise<void> {
  const { counts } = ctx.options;
  const h = await ctx.herald();
  await createAppWithEndpoints(h, 'bench-e2e-one', 1, `${ctx.receiver.url}/e2e-one`);
  // After the peer's 100,000 jobs were added and deleted: their dead rows are vacuumed now (see
  // settle), not left to slow herald's run or be vacuumed in the middle of it.
  await settle(ctx.db.url, ctx.notes);
  ctx.results.e2eOne = await runCase(ctx, 'bench-e2e-one', counts.e2eOneMessages, 1);
  await settle(ctx.db.url, ctx.notes);
  ctx.results.e2eFan = { ...(await fanCase(ctx)), endpoints: counts.fanEndpoints };
}
