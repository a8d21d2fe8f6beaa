// (6) herald publish-to-receiver latency: one `herald worker` process, idle; messages published
// through the library at a fixed moderate rate (open loop), each to an app with one endpoint, so
// every delivery rides the LISTEN/NOTIFY wake-up. Latency = receiver arrival − publish call start.

import { EVENT_TYPE, PAYLOAD } from '../config.ts';
import type { Context } from '../context.ts';
import { createAppWithEndpoints, heraldEnv } from '../herald-setup.ts';
import { openLoop, sleep } from '../load.ts';
import { startHeraldProcess } from '../processes.ts';
import { joinLatencies, nowMs } from '../stats.ts';

export async function latency(ctx: Context): Promise<void> {
  const { counts, concurrency } = ctx.options;
  const h = await ctx.herald();
  const app = 'bench-latency';
  await createAppWithEndpoints(h, app, 1, `${ctx.receiver.url}/latency`);
  const worker = await startHeraldProcess('worker', heraldEnv(ctx.db.url, concurrency));
  try {
    // Let the worker settle into waiting for a wake-up.
    await sleep(1000);
    await ctx.receiver.reset();
    await ctx.receiver.track(true);
    const sentAt = new Map<string, number>();
    const n = counts.latencySamples;
    await openLoop(n, counts.latencyRate, (n / counts.latencyRate) * 1000 + 10_000, async () => {
      const t0 = nowMs();
      const published = await h.herald.publish(app, { eventType: EVENT_TYPE, payload: PAYLOAD });
      sentAt.set(published.message.id, t0);
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
