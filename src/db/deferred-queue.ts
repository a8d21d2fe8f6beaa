// Deliveries that wait long — retries more than a minute ahead, and the backlogs of endpoints that
// are closed: disabled (migration 0030), or resting after failures for more than the horizon
// (0033) — wait in delivery_deferred, out of the claims' walk. The workers tend it on their
// maintenance clock: rows coming due go back to delivery_due, closed endpoints' rows are held, and
// held rows of endpoints open again (enabled, their rest ending) are released.

import type { Queryable } from './port.ts';

/** Rows each step of one tending moves at most; a step that fills it runs again at once. */
export const TEND_BATCH = 5000;

export interface Tended {
  /** Rows coming due, moved back to delivery_due. */
  requeued: number;
  /** Rows of closed endpoints (disabled, or resting past the horizon) that were put on hold. */
  held: number;
  /** Held rows of endpoints open again, released. */
  released: number;
  /** False when another worker was tending: this one did nothing. */
  tended: boolean;
}

/**
 * One tending of the deferred rows; `releaseHeld` also walks every endpoint with held rows (the
 * safety net for a hold that raced with an enable, and for backlogs past what an enable releases
 * at once). Another worker tending at the same time makes this one return zeros, `tended` false.
 */
export async function tendDeferred(db: Queryable, releaseHeld: boolean, batch = TEND_BATCH): Promise<Tended> {
  const { rows } = await db.query<Tended>('select * from herald_tend_deferred($1, $2)', [batch, releaseHeld]);
  return rows[0] ?? { requeued: 0, held: 0, released: 0, tended: false };
}
