// Strict decoding and constant-time comparison. Signatures are compared as decoded bytes, so
// "ABCD" and "abcd" hex are the same signature and no comparison ever runs on text.

import { createHmac, timingSafeEqual } from 'node:crypto';

export type DigestAlgorithm = 'sha256' | 'sha512';
export type SignatureEncoding = 'hex' | 'base64';

const HEX = /^(?:[0-9a-fA-F]{2})+$/;
const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** null for odd length or any non-hex character; Buffer.from would stop there silently instead. */
export function decodeHex(text: string): Buffer | null {
  return HEX.test(text) ? Buffer.from(text, 'hex') : null;
}

/**
 * Standard, padded base64 only. Buffer.from skips characters it does not know and ignores
 * non-zero padding bits; both would let many texts decode to one signature.
 */
export function decodeBase64(text: string): Buffer | null {
  if (text === '' || !BASE64.test(text)) return null;
  const decoded = Buffer.from(text, 'base64');
  return decoded.toString('base64') === text ? decoded : null;
}

export function decodeSignature(text: string, encoding: SignatureEncoding): Buffer | null {
  return encoding === 'hex' ? decodeHex(text) : decodeBase64(text);
}

export function equalBytes(a: Buffer, b: Buffer): boolean {
  // timingSafeEqual throws on unequal lengths; the length itself is public (fixed per algorithm).
  return a.length === b.length && timingSafeEqual(a, b);
}

export function hmac(algorithm: DigestAlgorithm, key: Buffer, parts: readonly (string | Buffer)[]): Buffer {
  const mac = createHmac(algorithm, key);
  // The body goes in as a Buffer: re-encoding it as text could change bytes that are not UTF-8.
  for (const part of parts) mac.update(part);
  return mac.digest();
}

export const DIGEST_BYTES: Readonly<Record<DigestAlgorithm, number>> = { sha256: 32, sha512: 64 };

/**
 * True when any key produces any of the presented signatures. Every provider here allows
 * several live secrets during rotation, and some (Stripe, Standard Webhooks) several signatures.
 */
export function anyKeyMatches(
  keys: readonly Buffer[],
  presented: readonly Buffer[],
  expectedFor: (key: Buffer) => Buffer,
): boolean {
  return keys.some((key) => {
    const expected = expectedFor(key);
    return presented.some((candidate) => equalBytes(candidate, expected));
  });
}

/**
 * The secrets of the HMAC schemes other than Standard Webhooks are used as their UTF-8 bytes,
 * exactly as each provider shows them (Stripe's "whsec_…" included). An empty list is a
 * configuration error, found when the verifier is built rather than as a 401 on every request.
 */
export function utf8Keys(scheme: string, secrets: readonly string[]): Buffer[] {
  if (secrets.length === 0) throw new Error(`${scheme} verification needs at least one secret`);
  return secrets.map((secret, index) => {
    if (secret.length === 0) throw new Error(`${scheme} secret #${index + 1} is empty`);
    return Buffer.from(secret, 'utf8');
  });
}
