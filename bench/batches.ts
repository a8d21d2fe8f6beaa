// How a herald process batched its writes over a window, from its own /metrics
// (herald_batched_write_*): writes, items per write and time per write. Under load, a publish or a
// receipt waits for its batch's write and for part of the one ahead of it: these figures say how
// much of its latency that is. A worker's outcome writes carry its next claim: their size is how
// much work one round trip does.

import type { BatchedWrite } from '../src/ops/metrics.ts';

export interface BatchFigures {
  writes: number;
  itemsPerWrite: number;
  msPerWrite: number;
}

interface Totals {
  writes: number;
  items: number;
  seconds: number;
}

async function totals(metricsUrl: string, write: BatchedWrite): Promise<Totals> {
  const response = await fetch(metricsUrl);
  if (response.status !== 200) throw new Error(`${metricsUrl} answered ${response.status}`);
  const text = await response.text();
  const sample = (name: string): number => {
    const match = new RegExp(`^${name}\\{write="${write}"\\} (\\S+)$`, 'm').exec(text);
    if (!match) throw new Error(`${metricsUrl} has no ${name}{write="${write}"}`);
    return Number(match[1]);
  };
  return {
    writes: sample('herald_batched_write_items_count'),
    items: sample('herald_batched_write_items_sum'),
    seconds: sample('herald_batched_write_seconds_sum'),
  };
}

function between(before: Totals, after: Totals): BatchFigures {
  const writes = after.writes - before.writes;
  return {
    writes,
    itemsPerWrite: writes > 0 ? (after.items - before.items) / writes : Number.NaN,
    msPerWrite: writes > 0 ? ((after.seconds - before.seconds) * 1000) / writes : Number.NaN,
  };
}

/** Starts metering the `write` batches of the herald process that serves `metricsUrl`. */
export async function meterBatches(
  metricsUrl: string,
  write: BatchedWrite,
): Promise<{ stop(): Promise<BatchFigures> }> {
  const before = await totals(metricsUrl, write);
  return { stop: async () => between(before, await totals(metricsUrl, write)) };
}

/** Every `write` batch of the process since it started (for a process started for the purpose). */
export async function batchesSoFar(metricsUrl: string, write: BatchedWrite): Promise<BatchFigures> {
  return between({ writes: 0, items: 0, seconds: 0 }, await totals(metricsUrl, write));
}
