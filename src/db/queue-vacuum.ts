// The due table is a queue: every delivery enters it when published and leaves it when claimed.
// A deleted row stays in the table and in its index until VACUUM, and the claim's walk over
// endpoints with due work steps over every dead index entry between two live ones: after a burst
// of 100,000 deliveries the walk read ~2,000 index pages per claim (4 ms) until autovacuum came
// round, which it does once a minute at most (autovacuum_naptime). Workers vacuum the table
// themselves once enough rows have died; after that the walk took 0.03 ms.

import type { Queryable } from './port.ts';

/** Dead rows that make a VACUUM worth it: some 200 index pages for the walk to step over. */
export const DUE_DEAD_ROWS_TO_VACUUM = 10_000;

/**
 * Vacuums delivery_due when PostgreSQL's statistics count at least `minDeadRows` dead rows in it;
 * returns whether it did. SKIP_LOCKED: when another worker (or autovacuum) is vacuuming it
 * already, this one does not wait. VACUUM cannot run inside a transaction: `db` must be the pool.
 */
export async function vacuumDueDeliveries(
  db: Queryable,
  minDeadRows = DUE_DEAD_ROWS_TO_VACUUM,
): Promise<boolean> {
  const stats = await db.query<{ dead: number }>(
    `select n_dead_tup::float8 as dead from pg_stat_user_tables where relid = 'delivery_due'::regclass`,
  );
  const dead = stats.rows[0]?.dead ?? 0;
  if (dead < minDeadRows) return false;
  await db.query('vacuum (skip_locked) delivery_due');
  return true;
}
