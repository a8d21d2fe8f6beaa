// (3 + 4) The end-to-end ratio in interleaved pairs, taken back to back: the peer's throughput
// run, then herald's end to end with E = 1,000, N times. Steps 3 and 4 take their figures minutes
// apart (the peer's latency run, E = 1 and the fan-out app's set-up come between), and on a
// shared VM whose speed drifts from one minute to the next one pair's ratio moved by a tenth or
// more from the next one's: the median of pairs taken a minute each says what the ratio is, and
// their spread how far to trust it. Each half starts on a vacuumed database after a checkpoint
// (db.ts, settle). Each pair delivers as much again as steps 3 and 4; herald's deliveries stay
// as history (which no claim reads) for the scenarios after this one.

import type { Context } from '../context.ts';
import { settle } from '../db.ts';
import { fanThroughput } from './e2e.ts';
import { peerThroughput } from './peer.ts';

export async function pairs(ctx: Context): Promise<void> {
  const series: { peer: number; herald: number }[] = [];
  ctx.results.pairs = series;
  const runs = { peer: peerThroughput, herald: fanThroughput };
  for (let k = 1; k <= ctx.options.counts.e2ePairs; k++) {
    // Which goes first alternates, so that a drift of the VM's speed, or of what the halves leave
    // behind, does not favour the same side in every pair.
    const order = k % 2 === 1 ? (['peer', 'herald'] as const) : (['herald', 'peer'] as const);
    const pair = { peer: 0, herald: 0 };
    for (const side of order) {
      await settle(ctx.db.url, ctx.notes);
      pair[side] = await runs[side](ctx);
    }
    series.push(pair);
    ctx.log(
      `pair ${k}: peer ${Math.round(pair.peer)} jobs/s, herald ${Math.round(pair.herald)} deliveries/s`,
    );
  }
}
