// A claim must not write the delivery's indexes: leasing every delivery of a message published to
// many endpoints — side by side on their pages, all updated by one claim — is a HOT update for
// (nearly) every one, the new row version staying on its page (the claim changes no indexed
// column of a delivery: "same page" is HOT, support/pages.ts). That takes room on the page for a
// new version of each row, kept free when the rows were inserted (fill factor, migration 0023).
//
// The outcome write after it is HOT too, but only once the claim's old versions can be pruned:
// any snapshot in the database older than the claim's commit (an autovacuum's ANALYZE, a long
// report) keeps them, and then nearly every outcome moves. This test's database has autovacuum
// off, so that no such snapshot comes between the two.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { claimDeliveries, recordOutcomes } from '../src/db/deliveries.ts';
import { freshDatabase, type TestDatabase } from './support/database.ts';
import { attemptResult } from './support/outcomes.ts';
import { pagesOfMessageRows, stayedOnTheirPage } from './support/pages.ts';
import { seedApp, seedEndpoint, seedMessage } from './support/seed.ts';

const ENDPOINTS = 120;
/** Failures in a row that disable an endpoint: none fails here. */
const DISABLE_AFTER = 5;

let database: TestDatabase;
before(async () => {
  database = await freshDatabase('delivery_hot');
  await database.db.query(`do $$
    declare t text;
    begin
      for t in select tablename from pg_tables where schemaname = 'public' loop
        execute format('alter table %I set (autovacuum_enabled = false)', t);
      end loop;
    end $$`);
});
after(async () => {
  await database.drop();
});

test('a claim of a whole fan-out, and its outcomes, leave (nearly) every delivery on its page', async () => {
  const { db } = database;
  const app = await seedApp(db, 'hot');
  for (let e = 0; e < ENDPOINTS; e++) await seedEndpoint(db, app.id, `http://127.0.0.1:1/${e}`);
  const messageId = await seedMessage(db, app.id);
  const published = await pagesOfMessageRows(db, 'delivery', messageId);
  assert.equal(published.size, ENDPOINTS);
  assert.ok(new Set(published.values()).size >= 3, 'the deliveries fill several pages');

  // One claim leases every delivery, each page's rows all at once…
  const claimed = await claimDeliveries(db, { batch: ENDPOINTS, leaseSeconds: 30, afterEndpoint: '' });
  assert.equal(claimed.length, ENDPOINTS);
  const leased = await pagesOfMessageRows(db, 'delivery', messageId);
  const stayedAtClaim = stayedOnTheirPage(published, leased);
  // At fill factor 70 fewer than half stayed (50 of 120); at 50 all but the odd one whose page ran out.
  assert.ok(
    stayedAtClaim >= ENDPOINTS * 0.9,
    `${stayedAtClaim} of ${ENDPOINTS} deliveries stayed at the claim`,
  );

  // …and one outcome write records them all, as the worker's finalizer does.
  const recorded = await recordOutcomes(
    db,
    claimed.map((c) => attemptResult(c)),
    DISABLE_AFTER,
  );
  assert.ok(recorded.every((r) => r.recorded));
  const stayedAtOutcome = stayedOnTheirPage(leased, await pagesOfMessageRows(db, 'delivery', messageId));
  assert.ok(
    stayedAtOutcome >= ENDPOINTS * 0.9,
    `${stayedAtOutcome} of ${ENDPOINTS} deliveries stayed at the outcome`,
  );
});
