// Where the master key comes from: HERALD_MASTER_KEY, or — in embedded mode only — a key file
// generated once into the data directory (mode 0600), so `npm start` needs no setup.

import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { ConfigError } from '../errors.ts';
import { parseMasterKey, type SecretBox } from './secret-box.ts';

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
  fs.mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  try {
    fs.writeFileSync(file, crypto.randomBytes(32).toString('base64'), { flag: 'wx', mode: 0o600 });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
  }
  return parseMasterKey(fs.readFileSync(file, 'utf8'));
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
