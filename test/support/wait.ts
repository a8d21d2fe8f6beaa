// Waiting on a condition with a deadline: the only way tests wait.

import type { Queryable } from '../../src/db/port.ts';

export async function waitFor<T>(
  what: string,
  probe: () => Promise<T | undefined | null | false> | T | undefined | null | false,
  timeoutMs = 15_000,
  intervalMs = 25,
): Promise<T> {
  // On the process's own clock: a test may replace Date.now, the way a host's clock is stepped.
  const deadline = performance.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined && value !== null && value !== false) return value;
    } catch (error) {
      last = error;
    }
    if (performance.now() > deadline) {
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${what}${last ? `: ${(last as Error).message}` : ''}`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs));
  }
}

/**
 * Waits until `count` statements of the database's (their text containing `statement`, or one of
 * them) wait for a lock, as they do behind a lock a test holds; resolves to a waiting backend's pid.
 */
export function waitForLockWaiter(
  db: Queryable,
  statement: string | readonly string[],
  timeoutMs = 10_000,
  count = 1,
): Promise<number> {
  const statements = typeof statement === 'string' ? [statement] : statement;
  return waitFor(
    `${count} of ${statements.join(' or ')} to wait for a lock`,
    async () => {
      const { rows } = await db.query<{ pid: number }>(
        `select pid from pg_stat_activity
          where datname = current_database() and wait_event_type = 'Lock' and query like any($1)`,
        [statements.map((text) => `%${text}%`)],
      );
      return rows.length >= count ? rows[0]!.pid : undefined;
    },
    timeoutMs,
  );
}
