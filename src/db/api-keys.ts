// API keys, stored as SHA-256 hashes. The token itself is shown once, at creation, and never kept.

import type { Queryable } from './port.ts';

/** Announced with a key's id whenever its row changes (migrations/0009). */
export const API_KEY_CHANGED_CHANNEL = 'herald_api_key_changed';

export type Scope = 'admin' | 'publish' | 'read';

export interface ApiKeyRow {
  id: string;
  name: string;
  prefix: string;
  scopes: Scope[];
  appIds: string[] | null;
  createdAt: Date;
  revokedAt: Date | null;
}

const COLUMNS = `id, name, prefix, scopes, app_ids as "appIds", created_at as "createdAt", revoked_at as "revokedAt"`;

export async function insertApiKey(
  db: Queryable,
  key: { name: string; prefix: string; hash: Buffer; scopes: Scope[]; appIds: string[] | null },
): Promise<ApiKeyRow> {
  const result = await db.query<ApiKeyRow>(
    `insert into api_key (name, prefix, hash, scopes, app_ids) values ($1, $2, $3, $4, $5) returning ${COLUMNS}`,
    [key.name, key.prefix, key.hash, key.scopes, key.appIds],
  );
  return result.rows[0]!;
}

/** The live key with this hash; revoked keys are not found. */
export async function findLiveApiKeyByHash(db: Queryable, hash: Buffer): Promise<ApiKeyRow | null> {
  const result = await db.query<ApiKeyRow>(
    `select ${COLUMNS} from api_key where hash = $1 and revoked_at is null`,
    [hash],
    'find_live_api_key',
  );
  return result.rows[0] ?? null;
}

export async function listApiKeys(db: Queryable): Promise<ApiKeyRow[]> {
  const result = await db.query<ApiKeyRow>(`select ${COLUMNS} from api_key order by id`);
  return result.rows;
}

export async function revokeApiKey(db: Queryable, id: string): Promise<boolean> {
  const result = await db.query(
    'update api_key set revoked_at = now() where id = $1 and revoked_at is null',
    [id],
  );
  return result.rowCount > 0;
}
