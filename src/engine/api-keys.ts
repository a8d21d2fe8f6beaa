// Creating API keys, shared by the API and the CLI.

import fs from 'node:fs';
import path from 'node:path';
import { generateApiKey } from '../crypto/api-key-token.ts';
import { type ApiKeyRow, insertApiKey, listApiKeys, revokeApiKey, type Scope } from '../db/api-keys.ts';
import { findApp } from '../db/apps.ts';
import { recordAudit } from '../db/audit.ts';
import type { Db, Queryable } from '../db/port.ts';
import { invalidField } from '../errors.ts';

/**
 * The ids of the apps a key is restricted to, named by id or uid as the caller wrote them. A key
 * stores ids (its reach is checked against them): a uid kept as written would reach nothing.
 */
export async function resolveAppIds(db: Queryable, idsOrUids: readonly string[]): Promise<string[]> {
  const ids: string[] = [];
  for (const [index, idOrUid] of idsOrUids.entries()) {
    const found = await findApp(db, idOrUid);
    if (!found) throw invalidField(['apps', index], `application ${idOrUid} not found`);
    ids.push(found.id);
  }
  return ids;
}

export async function createApiKey(
  tx: Queryable,
  actorId: string,
  spec: { name: string; scopes: Scope[]; appIds: string[] | null },
): Promise<ApiKeyRow & { key: string }> {
  const { token, prefix, hash } = generateApiKey();
  const row = await insertApiKey(tx, { ...spec, prefix, hash });
  await recordAudit(tx, {
    actor: actorId,
    action: 'api_key.created',
    appId: null,
    targetType: 'api_key',
    targetId: row.id,
    details: { scopes: spec.scopes, apps: spec.appIds },
  });
  return { ...row, key: token };
}

/** Revokes a live key and audits it; false when no live key has this id. */
export async function revokeKey(tx: Queryable, actorId: string, id: string): Promise<boolean> {
  if (!(await revokeApiKey(tx, id))) return false;
  await recordAudit(tx, {
    actor: actorId,
    action: 'api_key.revoked',
    appId: null,
    targetType: 'api_key',
    targetId: id,
  });
  return true;
}

export const LOCAL_ADMIN_KEY_FILE = 'admin.key';

/**
 * Start of an embedded database with no HERALD_ADMIN_KEY and no live admin key: create one and leave
 * it in the data dir (mode 0600, beside the master key), so a newcomer can call the API at once.
 * Returns the file's path when it created a key.
 */
export async function ensureLocalAdminKey(db: Db, dataDir: string): Promise<string | null> {
  const keys = await listApiKeys(db);
  if (keys.some((k) => k.revokedAt === null && k.scopes.includes('admin'))) return null;
  const created = await db.transaction((tx) =>
    createApiKey(tx, 'herald', { name: 'local admin', scopes: ['admin'], appIds: null }),
  );
  const file = path.join(dataDir, LOCAL_ADMIN_KEY_FILE);
  fs.writeFileSync(file, `${created.key}\n`, { mode: 0o600 });
  return file;
}
