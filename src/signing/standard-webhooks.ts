// Standard Webhooks (https://www.standardwebhooks.com), the scheme Svix uses:
// `webhook-signature: v1,<base64 HMAC-SHA256(key, "<id>.<timestamp>.<body>")>`, space-separated when
// several secrets are live (rotation), so a receiver holding either secret accepts the message.
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

const SECRET_PREFIX = 'whsec_';
const SIGNATURE_VERSION = 'v1';
// The same bounds the Svix server applies, so any secret it accepts can be imported here and vice versa.
const SVIX_SECRET_PATTERN = /^(whsec_)?[a-zA-Z0-9+/=]{32,100}$/;
const MIN_SECRET_BYTES = 24;
const MAX_SECRET_BYTES = 75;

export function generateEndpointSecret(): string {
  return SECRET_PREFIX + randomBytes(MIN_SECRET_BYTES).toString('base64');
}

export function decodeEndpointSecret(secret: string): Buffer {
  const key = decodeCanonicalBase64(withoutSecretPrefix(secret));
  if (key === null || key.length === 0) {
    throw new Error('invalid endpoint secret: expected "whsec_" followed by non-empty standard base64');
  }
  return key;
}

export function isValidEndpointSecret(secret: string): boolean {
  if (!SVIX_SECRET_PATTERN.test(secret)) return false;
  const key = decodeCanonicalBase64(withoutSecretPrefix(secret));
  return key !== null && key.length >= MIN_SECRET_BYTES && key.length <= MAX_SECRET_BYTES;
}

/** A secret as herald keeps and shows it: with its `whsec_` prefix, which Svix lets callers omit. */
export function withSecretPrefix(secret: string): string {
  return SECRET_PREFIX + withoutSecretPrefix(secret);
}

function withoutSecretPrefix(secret: string): string {
  return secret.startsWith(SECRET_PREFIX) ? secret.slice(SECRET_PREFIX.length) : secret;
}

export function signPayload(args: {
  msgId: string;
  timestampSeconds: number;
  body: string | Buffer;
  keys: readonly Buffer[];
}): string {
  if (args.keys.length === 0) {
    throw new Error('signPayload needs at least one key: an unsigned webhook cannot be verified');
  }
  if (!isWholeSeconds(args.timestampSeconds)) {
    // Receivers parse the header as an integer; anything else would be signed but never verify.
    throw new TypeError(
      `webhook timestamp must be whole seconds since the epoch, got ${args.timestampSeconds}`,
    );
  }
  const { msgId, timestampSeconds, body } = args;
  return args.keys
    .map((key) => `${SIGNATURE_VERSION},${hmac(key, msgId, timestampSeconds, body).toString('base64')}`)
    .join(' ');
}

export function verifySignature(args: {
  msgId: string;
  timestampSeconds: number;
  body: string | Buffer;
  signatureHeader: string;
  keys: readonly Buffer[];
}): boolean {
  // The timestamp comes from a request header: a malformed one is a failed verification, not an error.
  if (!isWholeSeconds(args.timestampSeconds)) return false;
  const presented = v1SignaturesIn(args.signatureHeader);
  if (presented.length === 0) return false;
  return args.keys.some((key) => {
    const expected = hmac(key, args.msgId, args.timestampSeconds, args.body);
    return presented.some((candidate) => equalInConstantTime(candidate, expected));
  });
}

function v1SignaturesIn(header: string): Buffer[] {
  const signatures: Buffer[] = [];
  for (const spaced of header.split(' ')) {
    // A header sent twice arrives joined by ", " (Node's way with repeated headers): the entry
    // before the join ends in that comma, which base64 never holds.
    const entry = spaced.endsWith(',') ? spaced.slice(0, -1) : spaced;
    const comma = entry.indexOf(',');
    // Other versions (e.g. the asymmetric v1a) are skipped, as the spec asks, not treated as failures.
    if (comma === -1 || entry.slice(0, comma) !== SIGNATURE_VERSION) continue;
    const decoded = decodeCanonicalBase64(entry.slice(comma + 1));
    if (decoded !== null) signatures.push(decoded);
  }
  return signatures;
}

function hmac(key: Buffer, msgId: string, timestampSeconds: number, body: string | Buffer): Buffer {
  // A Buffer body is hashed as received: re-encoding it as a string could alter bytes that are not valid UTF-8.
  return createHmac('sha256', key).update(`${msgId}.${timestampSeconds}.`).update(body).digest();
}

function isWholeSeconds(timestampSeconds: number): boolean {
  return Number.isSafeInteger(timestampSeconds) && timestampSeconds >= 0;
}

function equalInConstantTime(a: Buffer, b: Buffer): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}

// Buffer.from(…, 'base64') silently skips characters it does not know; requiring the text to survive a
// round trip rejects those instead of verifying a mangled value.
function decodeCanonicalBase64(text: string): Buffer | null {
  const decoded = Buffer.from(text, 'base64');
  return decoded.toString('base64') === text ? decoded : null;
}
