// Identifiers and keys compare byte by byte (migration 0008): the claim, the outcome write, publish
// and every foreign-key check walk B-tree indexes on text keys, and under a locale's collation each
// comparison went through strcoll or ICU. A column added later without `collate "C"` would bring
// that back silently, on the databases that users run with en_US or ICU collations.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { freshDatabase, type TestDatabase } from './support/database.ts';

let database: TestDatabase;

before(async () => {
  database = await freshDatabase('schema_collation');
});
after(() => database.drop());

test('every collatable column that an index or a foreign key covers compares bytewise', async () => {
  const covered = await database.db.query<{ col: string; collation: string }>(
    `select c.relname || '.' || a.attname as col, a.attcollation::regcollation::text as collation
       from pg_class c
       join pg_attribute a on a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped
      where c.relnamespace = 'public'::regnamespace and c.relkind = 'r'
        and a.attcollation <> 0 and c.relname <> 'herald_migration'
        and (exists (select 1 from pg_index i where i.indrelid = c.oid and a.attnum = any (i.indkey))
             or exists (select 1 from pg_constraint f
                         where f.conrelid = c.oid and f.contype = 'f' and a.attnum = any (f.conkey)))
      order by 1`,
  );
  // The check must see the columns it is about, or it proves nothing.
  const names = covered.rows.map((r) => r.col);
  for (const hot of [
    'delivery.id',
    'delivery.endpoint_id',
    'attempt.delivery_id',
    'message.idempotency_key',
  ]) {
    assert.ok(names.includes(hot), `${hot} is among the columns checked`);
  }
  const localeBound = covered.rows.filter((r) => r.collation !== '"C"');
  assert.deepEqual(localeBound, [], 'indexed or referencing text columns with a locale collation');
});

test('no index overrides the bytewise collation of its columns', async () => {
  const overriding = await database.db.query<{ index: string; collation: string }>(
    `select i.indexrelid::regclass::text as index, k.coll::regcollation::text as collation
       from pg_index i
       join pg_class c on c.oid = i.indrelid
       cross join lateral unnest(i.indcollation::oid[]) as k(coll)
      where c.relnamespace = 'public'::regnamespace and k.coll <> 0
        and k.coll <> 'pg_catalog."C"'::regcollation
      order by 1`,
  );
  assert.deepEqual(overriding.rows, [], 'index keys that compare under a locale');
});
