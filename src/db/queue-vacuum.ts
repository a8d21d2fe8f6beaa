// The due table is a queue: every delivery enters it when published and leaves it when claimed.
// A deleted row stays in the table and in its index until VACUUM, and the claim's walk over
// endpoints with due work steps over every dead index entry between two live ones: after a burst
// of 100,000 deliveries the walk read ~2,000 index pages per claim (4 ms) until autovacuum came
// round, which it does once a minute at most (autovacuum_naptime). Workers vacuum the table
// themselves once enough rows have died; after that the walk took 0.03 ms.

import type { Queryable } from './port.ts';

/** Dead rows that make a VACUUM worth it: some 200 index pages for the walk to step over. */
export const DUE_DEAD_ROWS_TO_VACUUM = 10_000;

async function deadDueRows(db: Queryable): Promise<number> {
  const stats = await db.query<{ dead: number }>(
    `select n_dead_tup::float8 as dead from pg_stat_user_tables where relid = 'delivery_due'::regclass`,
  );
  return stats.rows[0]?.dead ?? 0;
}

/**
 * Vacuums delivery_due when PostgreSQL's statistics count at least `minDeadRows` dead rows in it;
 * returns the dead rows counted after the VACUUM, or null when it did not run one. Rows that a
 * VACUUM cannot remove (a long transaction still sees them, or the role does not own the table
 * and VACUUM only warns) are still counted after it: the caller adds them to its next threshold,
 * so that they do not bring a VACUUM on every call. SKIP_LOCKED: when another worker (or
 * autovacuum) is vacuuming it already, this one does not wait. VACUUM cannot run inside a
 * transaction: `db` must be the pool.
 */
export async function vacuumDueDeliveries(db: Queryable, minDeadRows: number): Promise<number | null> {
  if ((await deadDueRows(db)) < minDeadRows) return null;
  await db.query('vacuum (skip_locked) delivery_due');
  return deadDueRows(db);
}
