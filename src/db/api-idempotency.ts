// The answers kept for the API's idempotency keys (migration 0025).

import type { Queryable } from './port.ts';
import { drainBatches } from './retention.ts';

export interface KeptAnswer {
  requestSha256: Buffer;
  status: number;
  body: unknown;
}

/** How long a key's answer is kept, at least: an SDK retries within seconds, a person within hours. */
export const KEPT_FOR_HOURS = 24;

export async function findKeptAnswer(db: Queryable, scope: string, key: string): Promise<KeptAnswer | null> {
  const result = await db.query<KeptAnswer>(
    `select request_sha256 as "requestSha256", status, body from api_idempotency
      where scope = $1 and key = $2 and status is not null`,
    [scope, key],
  );
  const row = result.rows[0];
  // PGlite reads a bytea as a Uint8Array, pg as a Buffer.
  return row ? { ...row, requestSha256: Buffer.from(row.requestSha256) } : null;
}

/**
 * Takes the key for the transaction `tx`: false when another request holds it (a concurrent one
 * is waited for, until it commits or rolls back).
 */
export async function takeKey(
  tx: Queryable,
  scope: string,
  key: string,
  requestSha256: Buffer,
): Promise<boolean> {
  const result = await tx.query(
    `insert into api_idempotency (scope, key, request_sha256) values ($1, $2, $3)
     on conflict (scope, key) do nothing`,
    [scope, key, requestSha256],
  );
  return result.rowCount === 1;
}

export async function keepAnswer(
  tx: Queryable,
  scope: string,
  key: string,
  status: number,
  body: unknown,
): Promise<void> {
  await tx.query('update api_idempotency set status = $3, body = $4 where scope = $1 and key = $2', [
    scope,
    key,
    status,
    body === undefined ? null : JSON.stringify(body),
  ]);
}

/**
 * Forgets the answers kept longer than KEPT_FOR_HOURS, `batch` at a time (short transactions),
 * until none is left or the steady clock passes `until`; returns how many, and whether some are
 * left (the next maintenance pass goes on).
 */
export async function forgetOldAnswers(
  db: Queryable,
  options: { until: number; batch?: number },
): Promise<{ forgotten: number; behind: boolean }> {
  const batch = options.batch ?? 1000;
  const { done, behind } = await drainBatches(
    async () =>
      (
        await db.query(
          `delete from api_idempotency where (scope, key) in (
             select scope, key from api_idempotency where created_at < now() - make_interval(hours => $1)
              order by created_at limit $2)`,
          [KEPT_FOR_HOURS, batch],
        )
      ).rowCount,
    options.until,
    (n) => n >= batch,
  );
  return { forgotten: done, behind };
}
