// AES-256-GCM envelope for secrets at rest (endpoint and source secrets).
//
// Layout of a sealed value:
//   offset  0  1 byte   version (1)
//   offset  1  8 bytes  key id, ASCII: first 8 hex chars of SHA-256(master key)
//   offset  9 12 bytes  random IV
//   offset 21 16 bytes  GCM tag
//   offset 37  …        ciphertext
//
// The caller's `aad` is the owning row's id, so a ciphertext copied onto another row does not open.
// The version byte and key id are authenticated too (GCM additional data = header || aad), so every
// byte of the envelope is covered by the tag.
import { createCipheriv, createDecipheriv, createHash, createHmac, randomBytes } from 'node:crypto';

const VERSION = 1;
const KEY_BYTES = 32;
const KEY_ID_LENGTH = 8;
const IV_BYTES = 12;
const TAG_BYTES = 16;
const HEADER_BYTES = 1 + KEY_ID_LENGTH;
const MIN_SEALED_BYTES = HEADER_BYTES + IV_BYTES + TAG_BYTES;

export interface SecretBox {
  seal(plaintext: string, aad: string): Buffer;
  open(sealed: Buffer, aad: string): string;
  readonly currentKeyId: string;
  /** Which key sealed `sealed`, so a re-encryption job can find values not under the current key. */
  keyIdOf(sealed: Buffer): string;
  /**
   * Keyed digests of `data` for one `purpose`: HMAC-SHA256 under a key derived from each master
   * key, the current one's first (the one to keep). Equal data gives equal digests, but one kept
   * in the database does not let whoever reads it test guesses of what it covers (a secret in a
   * request body) without the master key. A digest kept under a previous master key is among them
   * while that key is listed: a rotation must not make kept data look changed.
   */
  digests(purpose: string, data: string): readonly [Buffer, ...Buffer[]];
}

/**
 * A value sealed under a master key this process was not given: another process of the same
 * deployment may hold it (a rotation rolling out), so callers answer it as unavailable, not as
 * broken.
 */
export class UnknownMasterKeyError extends Error {
  readonly keyId: string;
  constructor(keyId: string) {
    super(`cannot open secret: sealed under unknown key id ${JSON.stringify(keyId)}`);
    this.keyId = keyId;
  }
}

export function keyIdOf(key: Buffer): string {
  return createHash('sha256').update(key).digest('hex').slice(0, KEY_ID_LENGTH);
}

export function parseMasterKey(base64: string): Buffer {
  // Tolerates the trailing newline of a key kept in a file; anything else must be exact.
  const text = base64.trim();
  const key = Buffer.from(text, 'base64');
  if (key.toString('base64') !== text || key.length !== KEY_BYTES) {
    throw new Error(`invalid master key: expected ${KEY_BYTES} bytes of base64`);
  }
  return key;
}

/** The first key seals; the others only open, while values are re-encrypted under a new master key. */
export function createSecretBox(keys: readonly Buffer[]): SecretBox {
  const current = keys[0];
  if (current === undefined) throw new Error('secret box needs at least one key');
  const keysById = indexKeysById(keys);
  const currentKeyId = keyIdOf(current);

  return {
    currentKeyId,
    seal(plaintext, aad) {
      const header = headerFor(currentKeyId);
      const iv = randomBytes(IV_BYTES);
      const cipher = createCipheriv('aes-256-gcm', current, iv);
      cipher.setAAD(additionalData(header, aad));
      const ciphertext = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
      return Buffer.concat([header, iv, cipher.getAuthTag(), ciphertext]);
    },
    open(sealed, aad) {
      const keyId = readKeyId(sealed);
      const key = keysById.get(keyId);
      if (key === undefined) throw new UnknownMasterKeyError(keyId);
      return decrypt(key, sealed, aad);
    },
    keyIdOf: readKeyId,
    digests(purpose, data) {
      const under = (master: Buffer) => {
        const key = createHmac('sha256', master).update(`herald digest: ${purpose}`).digest();
        return createHmac('sha256', key).update(data).digest();
      };
      // The current key is the first.
      return keys.map(under) as [Buffer, ...Buffer[]];
    },
  };
}

function decrypt(key: Buffer, sealed: Buffer, aad: string): string {
  const iv = sealed.subarray(HEADER_BYTES, HEADER_BYTES + IV_BYTES);
  const tag = sealed.subarray(HEADER_BYTES + IV_BYTES, MIN_SEALED_BYTES);
  const decipher = createDecipheriv('aes-256-gcm', key, iv, { authTagLength: TAG_BYTES });
  decipher.setAAD(additionalData(sealed.subarray(0, HEADER_BYTES), aad));
  decipher.setAuthTag(tag);
  try {
    const plaintext = Buffer.concat([decipher.update(sealed.subarray(MIN_SEALED_BYTES)), decipher.final()]);
    return plaintext.toString('utf8');
  } catch {
    // Node's own message ("unable to authenticate data") does not say what the operator should suspect.
    throw new Error('cannot open secret: it was tampered with or belongs to another row');
  }
}

function indexKeysById(keys: readonly Buffer[]): Map<string, Buffer> {
  const byId = new Map<string, Buffer>();
  for (const key of keys) {
    if (key.length !== KEY_BYTES) {
      throw new Error(`secret box key must be exactly ${KEY_BYTES} bytes, got ${key.length}`);
    }
    const id = keyIdOf(key);
    const known = byId.get(id);
    // A 32-bit id can collide; two different keys under one id would make one of them unopenable.
    if (known !== undefined && !known.equals(key)) throw new Error(`two master keys share key id ${id}`);
    byId.set(id, key);
  }
  return byId;
}

function headerFor(keyId: string): Buffer {
  return Buffer.concat([Buffer.of(VERSION), Buffer.from(keyId, 'ascii')]);
}

function additionalData(header: Buffer, aad: string): Buffer {
  // The header has a fixed length, so header || aad cannot be confused with another split.
  return Buffer.concat([header, Buffer.from(aad, 'utf8')]);
}

function readKeyId(sealed: Buffer): string {
  if (sealed.length < MIN_SEALED_BYTES) {
    throw new Error(`cannot open secret: ${sealed.length} bytes is shorter than any sealed value`);
  }
  const version = sealed[0];
  if (version !== VERSION) throw new Error(`cannot open secret: unsupported envelope version ${version}`);
  // latin1, not ascii: ascii decoding drops the high bit, which would hide a corrupted key id.
  return sealed.toString('latin1', 1, HEADER_BYTES);
}
