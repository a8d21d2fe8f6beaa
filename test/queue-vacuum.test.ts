// Workers vacuum the due table once enough of its rows have died (src/db/queue-vacuum.ts): the
// claim's walk over endpoints with due work steps over every dead index entry until then.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { claimDeliveries, recordOutcomes } from '../src/db/deliveries.ts';
import { asQueryable } from '../src/db/port.ts';
import { vacuumDueDeliveries } from '../src/db/queue-vacuum.ts';
import { freshDatabase, type TestDatabase } from './support/database.ts';
import { attemptResult } from './support/outcomes.ts';
import { seedApp, seedEndpoint, seedMessage } from './support/seed.ts';
import { waitFor } from './support/wait.ts';

let database: TestDatabase;
let client: pg.Client;

before(async () => {
  database = await freshDatabase('queue_vacuum');
  client = new pg.Client({ connectionString: database.url });
  await client.connect();
});
after(async () => {
  await client.end();
  await database.drop();
});

/** Index pages the walk's first step reads to find the first endpoint with a due row. */
async function pagesToFirstDue(): Promise<number> {
  const plan = await client.query<{ 'QUERY PLAN': string }>(
    `explain (analyze, buffers, costs off, timing off)
     select endpoint_id from delivery_due where endpoint_id > '' order by endpoint_id limit 1`,
  );
  const text = plan.rows.map((r) => r['QUERY PLAN']).join('\n');
  return Number(/Buffers: shared hit=(\d+)/.exec(text)?.[1] ?? Number.NaN);
}

test('a burst of claimed deliveries is vacuumed out of the claim’s walk once enough have died', async () => {
  const db = asQueryable(client);
  const app = await seedApp(db, 'vacuum');
  const endpoints = [];
  for (let i = 0; i < 40; i++) endpoints.push(await seedEndpoint(db, app.id, 'http://127.0.0.1:1/v'));
  for (let i = 0; i < 60; i++) await seedMessage(db, app.id);
  // An endpoint created last sorts last: the walk reaches it only past everyone else's entries.
  const last = await seedEndpoint(db, app.id, 'http://127.0.0.1:1/v');
  let cursor = '';
  for (;;) {
    const claimed = await claimDeliveries(db, { batch: 40, leaseSeconds: 600, afterEndpoint: cursor });
    const others = claimed.filter((d) => d.endpointId !== last.id);
    if (others.length === 0) break;
    cursor = claimed.at(-1)!.endpointId;
    await recordOutcomes(
      db,
      others.map((d) => attemptResult(d)),
      5,
    );
  }
  await db.query(
    `insert into delivery (app_id, message_id, endpoint_id, next_attempt_at)
     select $1, id, $2, now() from message where app_id = $1 limit 1`,
    [app.id, last.id],
  );

  // This connection's counts reach the statistics at the end of its next transaction.
  await client.query('select pg_stat_force_next_flush()');
  await waitFor('the dead due rows to be counted', async () => {
    const stats = await client.query<{ dead: number }>(
      `select n_dead_tup::int as dead from pg_stat_user_tables where relname = 'delivery_due'`,
    );
    return stats.rows[0]!.dead >= 2400;
  });
  const before = await pagesToFirstDue();
  assert.ok(before >= 20, `the walk stepped over the dead entries (${before} pages)`);

  assert.equal(await vacuumDueDeliveries(db, 100_000), null, 'not worth a VACUUM below the threshold');
  const left = await vacuumDueDeliveries(db, 2000);
  assert.ok(left !== null && left < 100, `a VACUUM ran and removed the dead rows (${left} left)`);
  const afterVacuum = await pagesToFirstDue();
  assert.ok(afterVacuum <= 3, `the walk reads ${afterVacuum} pages after the VACUUM (${before} before)`);
});

test('rows a VACUUM cannot remove yet are counted after it, for the next threshold', async () => {
  const db = asQueryable(client);
  const app = await seedApp(db, 'vacuum-held');
  for (let i = 0; i < 20; i++) await seedEndpoint(db, app.id, 'http://127.0.0.1:1/h');
  // A transaction that still sees every row deleted after it began: VACUUM must keep them.
  const holder = new pg.Client({ connectionString: database.url });
  await holder.connect();
  try {
    await holder.query('begin isolation level repeatable read');
    await holder.query('select 1');
    for (let i = 0; i < 30; i++) await seedMessage(db, app.id);
    for (;;) {
      const claimed = await claimDeliveries(db, { batch: 20, leaseSeconds: 600, afterEndpoint: '' });
      if (claimed.length === 0) break;
      await recordOutcomes(
        db,
        claimed.map((d) => attemptResult(d)),
        5,
      );
    }
    await client.query('select pg_stat_force_next_flush()');
    await waitFor('the dead due rows to be counted', async () => {
      const stats = await client.query<{ dead: number }>(
        `select n_dead_tup::int as dead from pg_stat_user_tables where relname = 'delivery_due'`,
      );
      return stats.rows[0]!.dead >= 600;
    });
    const left = await vacuumDueDeliveries(db, 500);
    assert.ok(left !== null && left >= 600, `the held rows are still counted (${left})`);
  } finally {
    await holder.query('rollback');
    await holder.end();
  }
});
