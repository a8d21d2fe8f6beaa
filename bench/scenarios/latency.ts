// (6) herald publish-to-receiver latency: one `herald worker` process, idle; messages published
// through the library at a fixed moderate rate (open loop), each to an app with one endpoint, so
// every delivery rides the LISTEN/NOTIFY wake-up. Latency = receiver arrival − publish call start.
// The worker is warm when it is measured, as the peer's is (see WARM_UP), and the database has
// flushed what the scenarios before wrote (a CHECKPOINT), as before the peer's.

import { EVENT_TYPE, PAYLOAD } from '../config.ts';
import type { Context } from '../context.ts';
import { settle } from '../db.ts';
import { createAppWithEndpoints, heraldEnv } from '../herald-setup.ts';
import { closedLoop, openLoop, sleep } from '../load.ts';
import { startHeraldProcess } from '../processes.ts';
import { joinLatencies } from '../stats.ts';

/**
 * Messages a new worker delivers before the measured ones. The peer's latency is taken with the
 * runner that has just done its throughput run: its code compiled, its connections open and their
 * plans cached. A worker that has just started pays for all of that in its first deliveries — the
 * first one took ~300 ms on a slow day of the VM, and the few behind it waited for it, over 1 % of
 * the samples: the p99 measured the start, not the path.
 */
const WARM_UP = 200;

export async function latency(ctx: Context): Promise<void> {
  const { counts, concurrency } = ctx.options;
  const h = await ctx.herald();
  const app = 'bench-latency';
  await createAppWithEndpoints(h, app, 1, `${ctx.receiver.url}/latency`);
  const publishOne = () => h.herald.publish(app, { eventType: EVENT_TYPE, payload: PAYLOAD });
  const worker = await startHeraldProcess('worker', heraldEnv(ctx.db.url, concurrency));
  try {
    await ctx.receiver.reset();
    const warming = await closedLoop(WARM_UP, 4, 60_000, async () => {
      await publishOne();
    });
    const warmed = await ctx.receiver.waitForCount(WARM_UP, 60_000);
    if (warming.truncated || !warmed.complete)
      throw new Error(`herald latency: ${warmed.count} of ${WARM_UP} warm-up messages arrived`);
    await settle(ctx.db.url, ctx.notes);
    // Let the worker settle into waiting for a wake-up.
    await sleep(1000);
    await ctx.receiver.reset();
    await ctx.receiver.track(true);
    const sentAt = new Map<string, number>();
    const n = counts.latencySamples;
    // From when the publish was due, not when the loop got to it: a stall of the event loop that
    // delays the call is part of the latency, as it is of the peer's (scenarios/peer.ts).
    await openLoop(n, counts.latencyRate, (n / counts.latencyRate) * 1000 + 10_000, async (_i, dueAt) => {
      const published = await publishOne();
      sentAt.set(published.message.id, dueAt);
    });
    const arrived = await ctx.receiver.waitForCount(n, counts.waitMaxSeconds * 1000);
    if (!arrived.complete)
      ctx.notes.push(`herald latency: ${arrived.count} of ${n} messages arrived in time`);
    const arrivals = await ctx.receiver.drain();
    await ctx.receiver.track(false);
    ctx.results.latency = joinLatencies(sentAt, arrivals);
  } finally {
    await worker.stop();
  }
}
