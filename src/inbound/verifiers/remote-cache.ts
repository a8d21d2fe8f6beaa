// A small cache for things fetched over the network to verify requests (a JWKS, SNS signing
// certificates). Concurrent misses share one fetch; entries expire after a TTL so rotated keys are
// picked up. A fetch that fails is not remembered when there is nothing better, so the next request
// tries again; when a value was fetched before, the cache keeps answering with it (stale-if-error)
// and tries again only after the TTL or the refresh floor: a provider's brief outage, or a forged
// request that forces a refresh, never throws away keys that still verify. Time comes from the
// caller (the `now` a verifier is given), which keeps expiry testable without waiting.

export interface RemoteCache<T> {
  get(key: string, now: Date): Promise<T>;
  /**
   * Fetch again unless the entry is younger than `minAgeMs`: e.g. when a token names a key id
   * the cached JWKS lacks. The floor stops forged key ids from turning into a fetch each.
   * Resolves to what that fetch brought (within the floor, what the last one brought); rejects
   * when it failed — the cache keeps the value before it for get().
   */
  refresh(key: string, now: Date, minAgeMs: number): Promise<T>;
}

export interface RemoteCacheOptions<T> {
  /** `now`: the caller's, as for expiry. */
  load: (key: string, now: Date) => Promise<T>;
  ttlMs: number;
  /**
   * The least recently used entries go first beyond this, so request-controlled keys cannot grow
   * it without bound, and a key in use is not pushed out by keys used once.
   */
  maxEntries: number;
}

interface Entry<T> {
  value: Promise<T>;
  fetchedAtMs: number;
  /** The fetch itself: what a refresh within the floor answers (its failure included). */
  fetched: Promise<T>;
}

export function createRemoteCache<T>(options: RemoteCacheOptions<T>): RemoteCache<T> {
  const entries = new Map<string, Entry<T>>();

  /** Puts `entry` last in the map's order: the most recently used. */
  function touch(key: string, entry: Entry<T>): void {
    entries.delete(key);
    entries.set(key, entry);
    while (entries.size > options.maxEntries) {
      const oldest = entries.keys().next().value;
      if (oldest === undefined) break;
      entries.delete(oldest);
    }
  }

  /** Fetches `key` again; the entry answers with the value before it should the fetch fail. */
  function fetch(key: string, nowMs: number, before: Entry<T> | undefined): Entry<T> {
    const fetched = options.load(key, new Date(nowMs));
    const entry: Entry<T> = {
      value: before === undefined ? fetched : fetched.catch(() => before.value),
      fetchedAtMs: nowMs,
      fetched,
    };
    touch(key, entry);
    if (before === undefined)
      fetched.catch(() => {
        // Only this attempt is forgotten; a newer one that replaced it stays.
        if (entries.get(key) === entry) entries.delete(key);
      });
    return entry;
  }

  return {
    get(key, now) {
      const entry = entries.get(key);
      const nowMs = now.getTime();
      if (entry === undefined || nowMs - entry.fetchedAtMs >= options.ttlMs)
        return fetch(key, nowMs, entry).value;
      touch(key, entry);
      return entry.value;
    },
    async refresh(key, now, minAgeMs) {
      const entry = entries.get(key);
      const nowMs = now.getTime();
      // The fetch's own outcome, not the cached value: a caller that needed what is new must not
      // take the old for it. Within the floor, the last fetch's (one still under way is shared; a
      // failed one still fails).
      if (entry !== undefined && nowMs - entry.fetchedAtMs < minAgeMs) return entry.fetched;
      return fetch(key, nowMs, entry).fetched;
    },
  };
}
