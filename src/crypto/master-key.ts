// Where the master key comes from: HERALD_MASTER_KEY, or — in embedded mode only — a key file
// generated once into the data directory (mode 0600), so `npm start` needs no setup.

import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { Queryable } from '../db/port.ts';
import { newestSealed } from '../db/sealed-secrets.ts';
import { ConfigError } from '../errors.ts';
import { keyIdOf, parseMasterKey, type SecretBox } from './secret-box.ts';

export const MASTER_KEY_FILE = 'master.key';

export function loadMasterKey(configured: string | undefined, dataDir: string, embedded: boolean): Buffer {
  if (configured) {
    try {
      return parseMasterKey(configured);
    } catch {
      throw new ConfigError('HERALD_MASTER_KEY', 'base64 of exactly 32 bytes');
    }
  }
  if (!embedded) throw new ConfigError('HERALD_MASTER_KEY', 'a base64 32-byte key when DATABASE_URL is set');
  const file = path.join(dataDir, MASTER_KEY_FILE);
  if (!fs.existsSync(file)) createKeyFile(dataDir, file);
  return parseMasterKey(fs.readFileSync(file, 'utf8'));
}

/**
 * Refuses a database whose newest secrets were sealed under none of `keys`. Embedded: its key file
 * lost or replaced (a backup of pgdata alone), or HERALD_MASTER_KEY set at its first start and not
 * now. On a server: a process left on an old key after a rotation re-encrypted the secrets, or
 * given another key by mistake — it would fail every attempt for want of a signing secret, and
 * as an API seal new endpoints' secrets under a key the other processes lack. The newest row of
 * each table is the sample: a rotation done as the README says seals new rows under a key every
 * process already holds (listed in HERALD_PREVIOUS_MASTER_KEYS first).
 */
export async function assertSecretsUnderKeys(
  db: Queryable,
  box: SecretBox,
  keys: readonly Buffer[],
  embeddedDir: string | null,
): Promise<void> {
  const known = new Set(keys.map(keyIdOf));
  const keyIdUnder = (sealed: Buffer) => {
    try {
      return box.keyIdOf(sealed);
    } catch {
      return null; // not a sealed value at all: a defect of its own, not the key's
    }
  };
  const unknown = (await newestSealed(db)).map(keyIdUnder).find((id) => id !== null && !known.has(id));
  if (unknown === undefined) return;
  throw new ConfigError(
    'HERALD_MASTER_KEY',
    embeddedDir === null
      ? `the key (id ${unknown}) that sealed this database's newest secrets: neither HERALD_MASTER_KEY nor HERALD_PREVIOUS_MASTER_KEYS holds it (give every process the same keys; see the README's "Keys and scopes", on changing the master key)`
      : `the key the secrets of the embedded database in ${embeddedDir} are sealed with: ${path.join(embeddedDir, MASTER_KEY_FILE)} is not it (restore the file the database was made with, or set HERALD_MASTER_KEY to that key)`,
  );
}

/**
 * Writes a new key aside, then links it into place in one step: a crash never leaves an empty key
 * file, and of two first starts at once one key wins and both read it.
 */
function createKeyFile(dataDir: string, file: string): void {
  fs.mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const aside = `${file}.${process.pid}.new`;
  fs.writeFileSync(aside, generateMasterKey(), { mode: 0o600 });
  try {
    fs.linkSync(aside, file);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
  } finally {
    fs.rmSync(aside, { force: true });
  }
}

/** The current master key first, then earlier ones that may still open old ciphertexts. */
export function loadMasterKeys(
  configured: string | undefined,
  previous: readonly string[],
  dataDir: string,
  embedded: boolean,
): Buffer[] {
  const earlier = previous.map((key) => {
    try {
      return parseMasterKey(key);
    } catch {
      throw new ConfigError('HERALD_PREVIOUS_MASTER_KEYS', 'a comma-separated list of base64 32-byte keys');
    }
  });
  return [loadMasterKey(configured, dataDir, embedded), ...earlier];
}

export const generateMasterKey = (): string => crypto.randomBytes(32).toString('base64');

/**
 * The box of a command run without HERALD_MASTER_KEY (see ConfigUse): one that reaches for a
 * secret after all is refused, naming the variable, instead of failing on something less clear.
 */
export function secretBoxWithoutKey(): SecretBox {
  const refuse = (): never => {
    throw new ConfigError('HERALD_MASTER_KEY', 'a base64 32-byte key: this command reads or writes secrets');
  };
  return {
    seal: refuse,
    open: refuse,
    get currentKeyId(): string {
      return refuse();
    },
    keyIdOf: refuse,
    digests: refuse,
  };
}
