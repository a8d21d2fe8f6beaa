// API key tokens: `hk_<prefix>_<secret>`.
//   prefix  8 lowercase hex chars, public: safe to show in listings, logs and audit entries
//   secret  43 base64url chars (32 random bytes)
// Only SHA-256 of the whole token is stored. The token never contains a '.', because the Svix SDKs
// read whatever follows a '.' in a token as a region name.
import { hash, randomBytes, timingSafeEqual } from 'node:crypto';

const PREFIX_BYTES = 4;
const SECRET_BYTES = 32;
// The prefix has a fixed length, so the '_' that base64url may put in the secret cannot blur the split.
const TOKEN_PATTERN = /^hk_([0-9a-f]{8})_[A-Za-z0-9_-]{43}$/;

export function generateApiKey(): { token: string; prefix: string; hash: Buffer } {
  const prefix = randomBytes(PREFIX_BYTES).toString('hex');
  const token = `hk_${prefix}_${randomBytes(SECRET_BYTES).toString('base64url')}`;
  return { token, prefix, hash: hashApiKey(token) };
}

export function hashApiKey(token: string): Buffer {
  return hash('sha256', token, 'buffer');
}

export function parseApiKeyPrefix(token: string): string | null {
  return TOKEN_PATTERN.exec(token)?.[1] ?? null;
}

export function apiKeyMatches(token: string, storedHash: Buffer): boolean {
  const presented = hashApiKey(token);
  return presented.length === storedHash.length && timingSafeEqual(presented, storedHash);
}
