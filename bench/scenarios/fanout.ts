// (8) fan-out: one message to the 1,000-endpoint app, published through the library with no
// worker running; the time until the publish has committed (one delivery row per endpoint).

import { EVENT_TYPE, PAYLOAD } from '../config.ts';
import type { Context } from '../context.ts';
import { nowMs } from '../stats.ts';

export async function fanout(ctx: Context): Promise<void> {
  const { counts } = ctx.options;
  const h = await ctx.herald();
  const app = await ctx.fanApp();
  // One unmeasured publish warms the connection, the plan cache and the endpoint pages.
  await h.herald.publish(app, { eventType: EVENT_TYPE, payload: PAYLOAD });
  const commitMs: number[] = [];
  for (let i = 0; i < counts.fanoutPublishes; i++) {
    const t0 = nowMs();
    await h.herald.publish(app, { eventType: EVENT_TYPE, payload: PAYLOAD });
    commitMs.push(nowMs() - t0);
  }
  ctx.results.fanout = { commitMs, endpoints: counts.fanEndpoints };
}
