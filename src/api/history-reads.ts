// The gate in front of reads whose cost grows with an endpoint's or an app's history: endpoint
// stats count every delivery of a window, and a list page filtered on something few messages
// carry walks the history until it has a page. Each holds a connection of the API's pool for as
// long as it reads. Ungated, one read key's concurrent calls, well within its rate limit, could
// take every connection of the pool for seconds, and publishes, receipts and every other call of
// every tenant would wait behind them.
//
// So at most `running` such reads use the pool at once in one API process (a quarter of it),
// up to `waiting` more wait their turn in order, and one caller holds at most `perCaller` of
// those places, running or waiting: a caller past its share, or arriving when the queue is full,
// is answered `overloaded` (503, Retry-After) at once, having read nothing.

import { HeraldError } from '../errors.ts';
import type { Metrics } from '../ops/metrics.ts';

export interface HistoryReads {
  /** Runs `read` when its turn comes; `overloaded` when the caller or the queue is full. */
  run<T>(caller: string, read: () => Promise<T>): Promise<T>;
}

export interface HistoryReadLimits {
  running: number;
  waiting: number;
  perCaller: number;
}

/** The limits for an API whose pool holds `poolSize` connections. */
export function historyReadLimits(poolSize: number): HistoryReadLimits {
  const running = Math.max(1, Math.floor(poolSize / 4));
  return { running, waiting: running * 4, perCaller: running };
}

export function createHistoryReads(
  limits: HistoryReadLimits,
  metrics?: Pick<Metrics, 'historyReadsWaiting' | 'historyReadRefused'>,
): HistoryReads {
  let running = 0;
  const queue: (() => void)[] = [];
  const heldBy = new Map<string, number>();
  const refuse = (detail: string) => {
    metrics?.historyReadRefused();
    return new HeraldError('overloaded', `${detail}; retry in a second`);
  };

  const release = (caller: string) => {
    const held = heldBy.get(caller)! - 1;
    if (held === 0) heldBy.delete(caller);
    else heldBy.set(caller, held);
    const next = queue.shift();
    if (next) {
      metrics?.historyReadsWaiting(queue.length);
      next();
    } else running--;
  };

  return {
    async run(caller, read) {
      const held = heldBy.get(caller) ?? 0;
      if (held >= limits.perCaller) {
        throw refuse(`${held} reads of history from this caller are running or waiting already`);
      }
      if (running >= limits.running && queue.length >= limits.waiting) {
        throw refuse('too many reads of history are waiting');
      }
      heldBy.set(caller, held + 1);
      // A place freed by a read that ends passes straight to the first in line: `running` counts
      // it for them, and nobody arriving in between can take it.
      if (running < limits.running) running++;
      else
        await new Promise<void>((resolve) => {
          queue.push(resolve);
          metrics?.historyReadsWaiting(queue.length);
        });
      try {
        return await read();
      } finally {
        release(caller);
      }
    },
  };
}
