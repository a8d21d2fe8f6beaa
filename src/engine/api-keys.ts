// Creating API keys, shared by the API and the CLI.

import fs from 'node:fs';
import path from 'node:path';
import { generateApiKey } from '../crypto/api-key-token.ts';
import { type ApiKeyRow, insertApiKey, listApiKeys, type Scope } from '../db/api-keys.ts';
import { recordAudit } from '../db/audit.ts';
import type { Db, Queryable } from '../db/port.ts';

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

export const LOCAL_ADMIN_KEY_FILE = 'admin.key';

/**
 * First start of an embedded database with no HERALD_ADMIN_KEY: create one admin key and leave
 * it in the data dir (mode 0600, beside the master key), so a newcomer can call the API at once.
 * Returns the file's path when it created a key.
 */
export async function ensureLocalAdminKey(db: Db, dataDir: string): Promise<string | null> {
  if ((await listApiKeys(db)).length > 0) return null;
  const created = await db.transaction((tx) =>
    createApiKey(tx, 'herald', { name: 'local admin', scopes: ['admin'], appIds: null }),
  );
  const file = path.join(dataDir, LOCAL_ADMIN_KEY_FILE);
  fs.writeFileSync(file, `${created.key}\n`, { mode: 0o600 });
  return file;
}
