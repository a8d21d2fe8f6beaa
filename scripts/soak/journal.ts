// Append-only logs of what happened: kept in memory for the checker, and written as JSON lines
// to the run directory, so a failed soak can be examined after the fact.

import fs from 'node:fs';
import path from 'node:path';

export interface Journal<T> {
  readonly records: T[];
  push(record: T): void;
  close(): Promise<void>;
}

export function createJournal<T>(dir: string, name: string): Journal<T> {
  const records: T[] = [];
  const stream = fs.createWriteStream(path.join(dir, `${name}.jsonl`), { flags: 'a' });
  stream.on('error', () => {});
  return {
    records,
    push(record) {
      records.push(record);
      stream.write(`${JSON.stringify(record)}\n`);
    },
    close: () => new Promise<void>((resolve) => stream.end(resolve)),
  };
}

/** The soak's clock: milliseconds since the epoch, the same clock PostgreSQL's now() reads. */
export const now = (): number => Date.now();

export const sleep = (ms: number): Promise<void> =>
  new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
