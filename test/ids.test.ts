// herald_id (migrations 0001, 0013): `<prefix>_` + 12 hex digits of the creation millisecond + 16
// random hex digits. Lists paginate by id, so ids must sort by creation time and never collide.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { freshDatabase, type TestDatabase } from './support/database.ts';

let database: TestDatabase;
before(async () => {
  database = await freshDatabase('ids');
});
after(async () => {
  await database.drop();
});

test('ids: prefix, the creation millisecond in 12 hex digits, 16 random hex digits; distinct', async () => {
  const before = Date.now();
  const { rows } = await database.db.query<{ id: string }>(
    `select herald_id('msg') as id from generate_series(1, 20000)`,
  );
  const after = Date.now();
  const ids = rows.map((r) => r.id);
  for (const id of ids) assert.match(id, /^msg_[0-9a-f]{28}$/);
  for (const id of [ids[0]!, ids.at(-1)!]) {
    const ms = Number.parseInt(id.slice(4, 16), 16);
    assert.ok(
      ms >= before - 1000 && ms <= after + 1000,
      `${id} names ${ms}, made between ${before} and ${after}`,
    );
  }
  assert.equal(new Set(ids).size, ids.length, 'no two ids alike');
  // The random half is spread over all 16 digits: each position takes many values.
  for (let position = 16; position < 32; position++) {
    const seen = new Set(ids.map((id) => id[position]));
    assert.ok(seen.size >= 14, `position ${position} took ${seen.size} values`);
  }
});
