// Inbound sources and their sealed secrets.

import type { Queryable } from './port.ts';

/** Announces the id of every source created, changed or deleted, at commit (migration 0006). */
export const SOURCE_CHANGED_CHANNEL = 'herald_source_changed';

export interface SourceRow {
  id: string;
  uid: string | null;
  scheme: string;
  settings: Record<string, unknown>;
  appId: string;
  eventType: string;
  businessKey: string;
  retentionDays: number | null;
  createdAt: Date;
  updatedAt: Date;
}

export type SourceFields = Omit<SourceRow, 'id' | 'createdAt' | 'updatedAt'>;

const COLUMNS = `id, uid, scheme, settings, app_id as "appId", event_type as "eventType",
  business_key as "businessKey", retention_days as "retentionDays", created_at as "createdAt",
  updated_at as "updatedAt"`;

export async function insertSource(db: Queryable, f: SourceFields): Promise<SourceRow> {
  const result = await db.query<SourceRow>(
    `insert into source (uid, scheme, settings, app_id, event_type, business_key, retention_days)
     values ($1, $2, $3, $4, $5, $6, $7) returning ${COLUMNS}`,
    [f.uid, f.scheme, JSON.stringify(f.settings), f.appId, f.eventType, f.businessKey, f.retentionDays],
  );
  return result.rows[0]!;
}

export async function updateSource(db: Queryable, id: string, f: SourceFields): Promise<SourceRow> {
  const result = await db.query<SourceRow>(
    `update source set uid = $2, scheme = $3, settings = $4, app_id = $5, event_type = $6, business_key = $7,
        retention_days = $8, updated_at = now()
      where id = $1 returning ${COLUMNS}`,
    [id, f.uid, f.scheme, JSON.stringify(f.settings), f.appId, f.eventType, f.businessKey, f.retentionDays],
  );
  return result.rows[0]!;
}

export async function findSource(db: Queryable, idOrUid: string): Promise<SourceRow | null> {
  const result = await db.query<SourceRow>(
    `select ${COLUMNS} from source where id = $1 or uid = $1 order by id = $1 desc limit 1`,
    [idOrUid],
    'find_source',
  );
  return result.rows[0] ?? null;
}

/**
 * The source's row, locked until the transaction ends: a change merged onto it cannot undo one
 * that committed after the caller first read the source (two PATCHes of different fields at once
 * each keep what the other set). No key update: receipts of the source, whose claims' foreign key
 * takes a key share on its row, go on meanwhile (a change of its uid takes the stronger lock as
 * it updates).
 */
export async function lockSource(tx: Queryable, id: string): Promise<SourceRow | null> {
  const result = await tx.query<SourceRow>(`select ${COLUMNS} from source where id = $1 for no key update`, [
    id,
  ]);
  return result.rows[0] ?? null;
}

export async function listSources(db: Queryable, appIds: readonly string[] | null): Promise<SourceRow[]> {
  const result = await db.query<SourceRow>(
    `select ${COLUMNS} from source where $1::text[] is null or app_id = any($1) order by id`,
    [appIds],
  );
  return result.rows;
}

/** false: the source was deleted meanwhile. */
export async function deleteSource(db: Queryable, id: string): Promise<boolean> {
  return (await db.query('delete from source where id = $1', [id])).rowCount === 1;
}

export async function insertSourceSecret(db: Queryable, sourceId: string, sealed: Buffer): Promise<void> {
  await db.query('insert into source_secret (source_id, sealed) values ($1, $2)', [sourceId, sealed]);
}

/** An SNS subscription confirmation kept for the operator (migration 0043), its token sealed. */
export interface SubscriptionToken {
  topicArn: string;
  sealed: Buffer;
  receivedAt: Date;
}

/** Keeps the latest confirmation of a source's topic: SNS sends one again when asked to. */
export async function keepSubscriptionToken(
  db: Queryable,
  sourceId: string,
  topicArn: string,
  sealed: Buffer,
): Promise<void> {
  await db.query(
    `insert into source_subscription_token (source_id, topic_arn, sealed) values ($1, $2, $3)
     on conflict (source_id, topic_arn) do update set sealed = excluded.sealed, received_at = now()`,
    [sourceId, topicArn, sealed],
  );
}

export async function subscriptionTokens(db: Queryable, sourceId: string): Promise<SubscriptionToken[]> {
  const result = await db.query<{ topicArn: string; sealed: Uint8Array; receivedAt: Date }>(
    `select topic_arn as "topicArn", sealed, received_at as "receivedAt"
       from source_subscription_token where source_id = $1 order by topic_arn`,
    [sourceId],
  );
  return result.rows.map((r) => ({ ...r, sealed: Buffer.from(r.sealed) }));
}

/**
 * Secrets in their overlap period, at most, that a rotation leaves verifying beside the new ones.
 * A request that verifies with none of them is checked against each (an unsigned flood, an
 * 8 MiB body each): rotated again and again, with no bound, they would make every forged request
 * cost the API process thousands of HMACs.
 */
export const MAX_OVERLAPPING_SOURCE_SECRETS = 5;

/**
 * Gives the secrets in use an overlap period and installs the new ones; the source's version
 * moves. Refused (false) when more than MAX_OVERLAPPING_SOURCE_SECRETS would overlap. Rotations
 * of one source take turns (its row locked), and the secrets whose overlap has ended go.
 */
export async function rotateSourceSecrets(
  db: Queryable,
  sourceId: string,
  sealed: readonly Buffer[],
  overlapSeconds: number,
): Promise<boolean> {
  await db.query('select 1 from source where id = $1 for no key update', [sourceId]);
  await db.query('delete from source_secret where source_id = $1 and expires_at <= now()', [sourceId]);
  const live = await db.query<{ n: number }>(
    'select count(*)::int as n from source_secret where source_id = $1',
    [sourceId],
  );
  // With no overlap the secrets that verify now stop at once: how a leaked one is replaced.
  if (overlapSeconds > 0 && live.rows[0]!.n > MAX_OVERLAPPING_SOURCE_SECRETS) return false;
  await db.query(
    `update source_secret
        set expires_at = least(coalesce(expires_at, 'infinity'), now() + make_interval(secs => $2))
      where source_id = $1 and (expires_at is null or expires_at > now())`,
    [sourceId, overlapSeconds],
  );
  // Each secret written bumps the source's updated_at (migration 0006's trigger).
  for (const s of sealed) await insertSourceSecret(db, sourceId, s);
  return true;
}

/**
 * Sealed secrets that verify right now: the current one first, then those still overlapping; and
 * how long until the first of them expires (null: none does). Both by the database's clock, which
 * wrote the expiries: a cache that compared them with this process's clock would keep an expired
 * secret verifying, or rebuild at every request, for as long as the two clocks differ.
 */
export async function liveSourceSecrets(
  db: Queryable,
  sourceId: string,
): Promise<{ sealed: Buffer[]; firstExpiresInMs: number | null }> {
  const result = await db.query<{ sealed: Uint8Array; expiresInMs: number | null }>(
    `select sealed, (extract(epoch from expires_at - now()) * 1000)::float8 as "expiresInMs"
       from source_secret
      where source_id = $1 and (expires_at is null or expires_at > now())
      order by expires_at is not null, id desc`,
    [sourceId],
  );
  const expiries = result.rows.flatMap((r) => (r.expiresInMs === null ? [] : [r.expiresInMs]));
  return {
    sealed: result.rows.map((r) => Buffer.from(r.sealed)),
    firstExpiresInMs: expiries.length > 0 ? Math.min(...expiries) : null,
  };
}
