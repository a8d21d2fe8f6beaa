// A small cache for things fetched over the network to verify requests (a JWKS, SNS signing
// certificates). Concurrent misses share one fetch; failures are not cached, so the next request
// tries again; entries expire after a TTL so rotated keys are picked up. Time comes from the
// caller (the `now` a verifier is given), which keeps expiry testable without waiting.

export interface RemoteCache<T> {
  get(key: string, now: Date): Promise<T>;
  /**
   * Fetch again unless the entry is younger than `minAgeMs`: e.g. when a token names a key id
   * the cached JWKS lacks. The floor stops forged key ids from turning into a fetch each.
   * Resolves to the fresh value, or null when the entry was too young to refetch.
   */
  refresh(key: string, now: Date, minAgeMs: number): Promise<T | null>;
}

export interface RemoteCacheOptions<T> {
  load: (key: string) => Promise<T>;
  ttlMs: number;
  /** Oldest entries go first beyond this, so request-controlled keys cannot grow it without bound. */
  maxEntries: number;
}

interface Entry<T> {
  value: Promise<T>;
  loadedAtMs: number;
}

export function createRemoteCache<T>(options: RemoteCacheOptions<T>): RemoteCache<T> {
  const entries = new Map<string, Entry<T>>();

  function load(key: string, nowMs: number): Promise<T> {
    const entry: Entry<T> = { value: options.load(key), loadedAtMs: nowMs };
    entries.delete(key);
    entries.set(key, entry);
    while (entries.size > options.maxEntries) {
      const oldest = entries.keys().next().value;
      if (oldest === undefined) break;
      entries.delete(oldest);
    }
    entry.value.catch(() => {
      // Only this attempt is forgotten; a newer one that replaced it stays.
      if (entries.get(key) === entry) entries.delete(key);
    });
    return entry.value;
  }

  return {
    get(key, now) {
      const entry = entries.get(key);
      const nowMs = now.getTime();
      if (entry !== undefined && nowMs - entry.loadedAtMs < options.ttlMs) return entry.value;
      return load(key, nowMs);
    },
    async refresh(key, now, minAgeMs) {
      const entry = entries.get(key);
      const nowMs = now.getTime();
      if (entry !== undefined && nowMs - entry.loadedAtMs < minAgeMs) return null;
      return load(key, nowMs);
    },
  };
}
