// The read-through cache of announced rows (src/db/notified-cache.ts), on a real LISTEN: an entry
// is served until its age runs out, and a step back of the host's wall clock (NTP correcting a
// drift, an operator's `date -s`) must not keep it longer — where announcements cannot be heard,
// its age is the only bound on how stale a deleted app or a moved uid may be served. The wall
// clock is replaced for the test, the way a host's clock would be stepped.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import pino from 'pino';
import { createNotifiedCache } from '../src/db/notified-cache.ts';
import { freshDatabase } from './support/database.ts';
import { waitFor } from './support/wait.ts';

const realNow = Date.now;

test('an entry goes at the end of its age even when the wall clock steps back an hour meanwhile', async () => {
  const database = await freshDatabase('notified_cache_clock');
  let loads = 0;
  const cache = createNotifiedCache<string>({
    db: database.db,
    channel: 'test_rows_changed',
    load: async (keys) => {
      loads++;
      return new Map(keys.map((key) => [key, key]));
    },
    idOf: (row) => row,
    maxAgeMs: 200,
    log: pino({ level: 'silent' }),
  });
  try {
    await cache.get('a');
    await cache.get('a');
    assert.equal(loads, 1, 'the second read is served from the cache');
    Date.now = () => realNow() - 3_600_000;
    await waitFor(
      'the entry read again once its age ran out',
      async () => {
        await cache.get('a');
        return loads === 2;
      },
      5000,
    );
  } finally {
    Date.now = realNow;
    await cache.close();
    await database.drop();
  }
});
