// Endpoint headers opened for attempts, cached by their sealed value so that a worker opens each
// set once, not once per attempt: a change of headers seals them anew (a new value, which misses
// the cache). Bounded: the least recently used sets are dropped first.

import { openHeaders, type StoredHeaders } from '../crypto/sealed-headers.ts';
import type { SecretBox } from '../crypto/secret-box.ts';

export interface EndpointHeaderCache {
  /** The endpoint's headers; null when they cannot be opened (a master key this worker lacks). */
  open(endpointId: string, stored: StoredHeaders): Readonly<Record<string, string>> | null;
}

export function createEndpointHeaderCache(
  box: SecretBox,
  onUnreadable: (endpointId: string, error: Error) => void,
  maxSets = 10_000,
): EndpointHeaderCache {
  const cache = new Map<string, Readonly<Record<string, string>>>();
  return {
    open(endpointId, stored) {
      // No headers, or a row from before headers were sealed: nothing to open.
      if (typeof stored !== 'string') return stored;
      // The endpoint is part of the key: the same value on another endpoint's row does not open.
      const key = `${endpointId} ${stored}`;
      const hit = cache.get(key);
      if (hit) {
        cache.delete(key);
        cache.set(key, hit);
        return hit;
      }
      let opened: Record<string, string>;
      try {
        opened = openHeaders(box, endpointId, stored);
      } catch (error) {
        onUnreadable(endpointId, error as Error);
        return null;
      }
      cache.set(key, opened);
      if (cache.size > maxSets) cache.delete(cache.keys().next().value!);
      return opened;
    },
  };
}
