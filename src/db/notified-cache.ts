// A read-through cache of rows that the database announces whenever one changes: a trigger sends
// the row's id on a channel when the changing transaction commits (see migration 0006), and every
// process holding the row evicts it. Rows read on a hot path (the source of each inbound request,
// the app of each publish) then cost no query, and a change made anywhere takes effect as soon as
// its commit is announced.
//
// What could make an entry stale, and what guards it:
// - a change committed while the row was being read: any announcement received during a read
//   keeps that read's result out of the cache (a generation count);
// - a change committed before this process listened: nothing is read into the cache before the
//   LISTEN is in place;
// - announcements missed while the listening connection was down: when it is back, the listener
//   hears an empty payload and everything is evicted; until then entries expire after `maxAgeMs`
//   at most. Where LISTEN fails, nothing is cached (it is tried again a minute later).

import type { Logger } from 'pino';
import { steadyNow } from '../domain/steady-clock.ts';
import type { Db } from './port.ts';

export interface NotifiedCacheOptions<V> {
  db: Db;
  /** The channel the trigger announces changed ids on ('' for everything). */
  channel: string;
  /** Reads rows by the keys callers use (ids or other unique names); absent ones are left out. */
  load: (keys: readonly string[]) => Promise<Map<string, V>>;
  /** The id a change announcement names. */
  idOf: (row: V) => string;
  /** Entries kept at most (default 10,000); past that the cache starts afresh. */
  maxEntries?: number;
  /** How long an entry may be served without an announcement (default 5 s): the bound while LISTEN is down. */
  maxAgeMs?: number;
  log: Logger;
}

/** A `load` for callers that name one row at a time: `find` reads it by the key it was asked for. */
export function loadOne<V>(find: (key: string) => Promise<V | null>) {
  return async ([key]: readonly string[]): Promise<Map<string, V>> => {
    const row = await find(key!);
    return new Map(row ? [[key!, row]] : []);
  };
}

export interface NotifiedCache<V> {
  /** The rows of these keys; what is not cached is read in one `load`. Absent keys are left out. */
  getMany(keys: readonly string[]): Promise<Map<string, V>>;
  get(key: string): Promise<V | null>;
  /**
   * Evicts the row with this id now: a change this process just committed, which its callers
   * must see before the announcement arrives.
   */
  forget(id: string): void;
  close(): Promise<void>;
}

const RETRY_LISTEN_MS = 60_000;

export function createNotifiedCache<V>(options: NotifiedCacheOptions<V>): NotifiedCache<V> {
  const { maxEntries = 10_000, maxAgeMs = 5_000 } = options;
  const entries = new Map<string, { row: V; until: number }>();
  let generation = 0;
  let listening: Promise<(() => Promise<void>) | null> | null = null;
  let listenFailedAt = 0;
  let closed = false;

  const evict = (id: string) => {
    generation++;
    if (id === '') entries.clear();
    else for (const [key, entry] of entries) if (options.idOf(entry.row) === id) entries.delete(key);
  };

  /** Resolves once announcements are heard (true), or false when they cannot be now. */
  async function heard(): Promise<boolean> {
    if (closed) return false;
    if (listening === null && steadyNow() - listenFailedAt >= RETRY_LISTEN_MS) {
      listening = options.db.listen(options.channel, evict).catch((error: Error) => {
        options.log.warn(
          { channel: options.channel, err: error.message },
          'cannot LISTEN for changes; reading every time until it can',
        );
        listenFailedAt = steadyNow();
        listening = null;
        return null;
      });
    }
    return (await listening) !== null;
  }

  async function getMany(keys: readonly string[]): Promise<Map<string, V>> {
    if (!(await heard())) return options.load(keys);
    const found = new Map<string, V>();
    const missing: string[] = [];
    const now = steadyNow();
    for (const key of keys) {
      const cached = entries.get(key);
      if (cached && now < cached.until) found.set(key, cached.row);
      else missing.push(key);
    }
    if (missing.length === 0) return found;
    const seen = generation;
    const loaded = await options.load(missing);
    // Absent rows are not cached: a caller may name anything, and an absent row costs a query.
    const fresh = seen === generation && !closed;
    for (const [key, row] of loaded) {
      found.set(key, row);
      if (!fresh) continue;
      if (entries.size >= maxEntries) entries.clear();
      entries.set(key, { row, until: steadyNow() + maxAgeMs });
    }
    return found;
  }

  return {
    getMany,
    async get(key) {
      return (await getMany([key])).get(key) ?? null;
    },
    forget: evict,
    async close() {
      closed = true;
      entries.clear();
      const unlisten = await listening;
      await unlisten?.();
    },
  };
}
