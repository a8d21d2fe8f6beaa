// How a `herald api` process batched its writes over a window, from its own /metrics
// (herald_batched_write_*): writes, items per write and time per write. Under load, a publish or a
// receipt waits for its batch's write and for part of the one ahead of it: these figures say how
// much of its latency that is.

export type BatchedWrite = 'publish' | 'intake';

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

async function totals(apiUrl: string, write: BatchedWrite): Promise<Totals> {
  const response = await fetch(`${apiUrl}/metrics`);
  if (response.status !== 200) throw new Error(`${apiUrl}/metrics answered ${response.status}`);
  const text = await response.text();
  const sample = (name: string): number => {
    const match = new RegExp(`^${name}\\{write="${write}"\\} (\\S+)$`, 'm').exec(text);
    if (!match) throw new Error(`${apiUrl}/metrics has no ${name}{write="${write}"}`);
    return Number(match[1]);
  };
  return {
    writes: sample('herald_batched_write_items_count'),
    items: sample('herald_batched_write_items_sum'),
    seconds: sample('herald_batched_write_seconds_sum'),
  };
}

/** Starts metering the `write` batches of the herald process at `apiUrl`. */
export async function meterBatches(
  apiUrl: string,
  write: BatchedWrite,
): Promise<{ stop(): Promise<BatchFigures> }> {
  const before = await totals(apiUrl, write);
  return {
    async stop() {
      const after = await totals(apiUrl, write);
      const writes = after.writes - before.writes;
      return {
        writes,
        itemsPerWrite: writes > 0 ? (after.items - before.items) / writes : Number.NaN,
        msPerWrite: writes > 0 ? ((after.seconds - before.seconds) * 1000) / writes : Number.NaN,
      };
    },
  };
}
