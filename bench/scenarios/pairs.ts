// (3 + 4) The end-to-end ratio, taken again in more interleaved pairs: the peer's throughput run,
// then herald's end to end with E = 1,000, as in the first pair (steps 3 and 4). On a shared VM the
// speed drifts from one minute to the next, and one pair's ratio moved by a tenth or more from the
// next one's: the median of several says what the ratio is, their spread how far to trust it.
// Each pair delivers as much again; herald's deliveries pile up as history, which no claim reads.

import type { Context } from '../context.ts';
import { fanThroughputAgain } from './e2e.ts';
import { peerThroughputAgain } from './peer.ts';

export async function pairs(ctx: Context): Promise<void> {
  const { peer, e2eFan } = ctx.results;
  // Both halves of the first pair are needed: it is the first of the series.
  if (!peer || !e2eFan) return;
  const series = [{ peer: peer.perSecond, herald: e2eFan.perSecond }];
  ctx.results.pairs = series;
  for (let k = 2; k <= ctx.options.counts.e2ePairs; k++) {
    const pair = { peer: await peerThroughputAgain(ctx), herald: await fanThroughputAgain(ctx) };
    series.push(pair);
    ctx.log(
      `pair ${k}: peer ${Math.round(pair.peer)} jobs/s, herald ${Math.round(pair.herald)} deliveries/s`,
    );
  }
}
