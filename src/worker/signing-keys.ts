// Decrypted signing keys, cached per endpoint and secret version so that a worker opens each
// sealed secret once, not once per attempt. Rotation bumps the version, which misses the cache.
// The cache is bounded: the least recently used endpoint's keys are dropped first.

import type { SecretBox } from '../crypto/secret-box.ts';
import { liveSecrets } from '../db/endpoint-secrets.ts';
import type { Queryable } from '../db/port.ts';
import { steadyNow } from '../domain/steady-clock.ts';
import { decodeEndpointSecret } from '../signing/standard-webhooks.ts';

export interface SigningKeyCache {
  /** The raw HMAC keys for each endpoint, current first, at the given secret versions. */
  keysFor(wanted: ReadonlyMap<string, number>): Promise<Map<string, Buffer[]>>;
}

export function createSigningKeyCache(
  db: Queryable,
  box: SecretBox,
  onUnreadable: (endpointId: string, error: Error) => void,
  maxEndpoints = 10_000,
): SigningKeyCache {
  const cache = new Map<string, { version: number; keys: Buffer[]; loadedAt: number }>();
  // Keys of a rotated-out secret stop signing at its expiry; refresh now and then to notice it.
  const maxAgeMs = 60_000;

  return {
    async keysFor(wanted) {
      const now = steadyNow();
      const found = new Map<string, Buffer[]>();
      const missing: string[] = [];
      for (const [endpointId, version] of wanted) {
        const hit = cache.get(endpointId);
        if (hit && hit.version === version && now - hit.loadedAt < maxAgeMs) {
          cache.delete(endpointId);
          cache.set(endpointId, hit);
          found.set(endpointId, hit.keys);
        } else {
          missing.push(endpointId);
        }
      }
      if (missing.length === 0) return found;
      const loaded = await liveSecrets(db, missing);
      for (const [endpointId, entry] of loaded) {
        const keys: Buffer[] = [];
        for (const sealed of entry.sealed) {
          // One unreadable secret must not hold up the other endpoints of the batch: that
          // endpoint's attempt fails as `no_signing_secret` and the rest go out.
          try {
            keys.push(decodeEndpointSecret(box.open(sealed, endpointId)));
          } catch (error) {
            onUnreadable(endpointId, error as Error);
          }
        }
        cache.set(endpointId, { version: entry.version, keys, loadedAt: now });
        found.set(endpointId, keys);
      }
      while (cache.size > maxEndpoints) cache.delete(cache.keys().next().value!);
      return found;
    },
  };
}
