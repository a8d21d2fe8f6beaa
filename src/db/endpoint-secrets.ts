// Endpoint signing secrets, sealed at rest. Rotation demotes the current secret to a grace
// period (it keeps signing until then) and installs a new one; the endpoint's secret_version
// moves on so workers drop their cached keys.

import type { Queryable } from './port.ts';

export interface SealedSecret {
  sealed: Buffer;
  createdAt: Date;
}

export async function insertCurrentSecret(db: Queryable, appId: string, endpointId: string, sealed: Buffer) {
  await db.query('insert into endpoint_secret (app_id, endpoint_id, sealed) values ($1, $2, $3)', [
    appId,
    endpointId,
    sealed,
  ]);
}

export async function currentSecret(db: Queryable, endpointId: string): Promise<Buffer | null> {
  const result = await db.query<{ sealed: Uint8Array }>(
    'select sealed from endpoint_secret where endpoint_id = $1 and expires_at is null',
    [endpointId],
  );
  const row = result.rows[0];
  return row ? Buffer.from(row.sealed) : null;
}

/** Secrets that sign right now: the current one and any still inside its grace period. */
export async function liveSecrets(
  db: Queryable,
  endpointIds: readonly string[],
): Promise<Map<string, { version: number; sealed: Buffer[] }>> {
  const result = await db.query<{ endpointId: string; version: number; sealed: Uint8Array }>(
    `select s.endpoint_id as "endpointId", e.secret_version as version, s.sealed
       from endpoint_secret s join endpoint e on e.id = s.endpoint_id
      where s.endpoint_id = any($1) and (s.expires_at is null or s.expires_at > now())
      order by s.endpoint_id, s.expires_at is not null, s.id desc`,
    [endpointIds],
  );
  const byEndpoint = new Map<string, { version: number; sealed: Buffer[] }>();
  for (const row of result.rows) {
    const entry = byEndpoint.get(row.endpointId) ?? { version: row.version, sealed: [] };
    entry.sealed.push(Buffer.from(row.sealed));
    byEndpoint.set(row.endpointId, entry);
  }
  return byEndpoint;
}

/**
 * Previous secrets still signing beside the current one, at most (Svix's limit): each adds a
 * signature to every request, and a header grown past what receivers take (8 KiB a line for
 * nginx) would be refused, until the endpoint is disabled for it.
 */
export const MAX_PREVIOUS_SECRETS = 5;

/**
 * Makes `sealed` the current secret; the current one signs on for `graceSeconds`. Refused (false)
 * when MAX_PREVIOUS_SECRETS still sign and the current one would join them — but not with no
 * grace: then it stops signing at once, which is how a leaked secret is replaced however many
 * rotations came before. Rotations of one endpoint take turns (its row locked), and the secrets
 * whose grace has ended go.
 */
export async function rotateSecret(
  db: Queryable,
  appId: string,
  endpointId: string,
  sealed: Buffer,
  graceSeconds: number,
): Promise<boolean> {
  await db.query('select 1 from endpoint where id = $1 for no key update', [endpointId]);
  await db.query('delete from endpoint_secret where endpoint_id = $1 and expires_at <= now()', [endpointId]);
  const previous = await db.query<{ n: number }>(
    'select count(*)::int as n from endpoint_secret where endpoint_id = $1 and expires_at is not null',
    [endpointId],
  );
  if (graceSeconds > 0 && previous.rows[0]!.n >= MAX_PREVIOUS_SECRETS) return false;
  await db.query(
    `update endpoint_secret set expires_at = now() + make_interval(secs => $2)
      where endpoint_id = $1 and expires_at is null`,
    [endpointId, graceSeconds],
  );
  await insertCurrentSecret(db, appId, endpointId, sealed);
  await db.query(
    'update endpoint set secret_version = secret_version + 1, updated_at = now() where id = $1',
    [endpointId],
  );
  return true;
}
