// herald's pool of PostgreSQL connections (src/db/pg-pool.ts): a transaction whose connection can
// no longer be trusted gives it up, so that the next one does not meet the same failure; one that
// failed for its caller's reasons keeps it (a reconnect per 404 would cost every API error).

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { createPgDb } from '../src/db/pg-pool.ts';
import type { Db } from '../src/db/port.ts';
import { HeraldError } from '../src/errors.ts';
import { freshDatabase, type TestDatabase } from './support/database.ts';

let database: TestDatabase;
let db: Db;
before(async () => {
  database = await freshDatabase('pg_pool');
  // One connection: the next transaction would get the same one again if it were kept.
  db = createPgDb({ connectionString: database.url, max: 1 });
});
after(async () => {
  await db.close();
  await database.drop();
});

test('a transaction that meets a named statement the server no longer has: the next one prepares it on a new connection', async () => {
  const named = () =>
    db.transaction((tx) => tx.query<{ one: number }>('select 1 as one', [], 'pooled_named'));
  const backend = () =>
    db.transaction(
      async (tx) => (await tx.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid,
    );
  await named();
  const first = await backend();
  // Behind the client's back, as a migration that changed a function's result or a pooler's
  // DISCARD would leave it.
  await db.transaction((tx) => tx.query('deallocate pooled_named'));
  await assert.rejects(named(), (error: { code?: string }) => error.code === '26000');
  assert.equal((await named()).rows[0]!.one, 1, 'prepared again');
  assert.notEqual(await backend(), first, 'on a new connection');
});

test('a transaction that fails on its caller’s own error, or on a constraint, keeps its connection', async () => {
  const backend = () =>
    db.transaction(
      async (tx) => (await tx.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid,
    );
  const first = await backend();
  await assert.rejects(
    db.transaction(async () => {
      throw new HeraldError('not_found', 'application not found');
    }),
    HeraldError,
  );
  await assert.rejects(
    db.transaction((tx) => tx.query('select 1 / 0')),
    (error: { code?: string }) => error.code === '22012',
  );
  assert.equal(await backend(), first, 'the same connection');
});
