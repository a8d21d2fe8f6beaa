// A claim must not write the delivery's indexes: leasing every delivery of a message published to
// many endpoints — side by side on their pages, all updated by one claim — is a HOT update for
// (nearly) every one, the new row version staying on its page (the claim changes no indexed
// column of a delivery: "same page" is HOT, support/pages.ts). That takes room on the page for a
// new version of each row, kept free when the rows were inserted (fill factor, migration 0023).
//
// The outcome write after it is HOT too, but only once the claim's old versions can be pruned:
// a snapshot in the database older than the claim's commit (an autovacuum's ANALYZE, a long
// report) keeps them, and so, for a while, does a long transaction in another database of the
// server (PostgreSQL works out what it may prune again only when the oldest running transaction
// changes), and then nearly every outcome moves. Both happen in a test run (another test file's
// long transaction), neither is herald's doing, so the outcome is not asserted here.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { claimDeliveries } from '../src/db/deliveries.ts';
import { freshDatabase, type TestDatabase } from './support/database.ts';
import { pagesOfMessageRows, stayedOnTheirPage } from './support/pages.ts';
import { seedApp, seedEndpoint, seedMessage } from './support/seed.ts';

const ENDPOINTS = 120;

let database: TestDatabase;
before(async () => {
  database = await freshDatabase('delivery_hot');
});
after(async () => {
  await database.drop();
});

test('a claim of a whole fan-out leaves (nearly) every delivery on its page', async () => {
  const { db } = database;
  const app = await seedApp(db, 'hot');
  for (let e = 0; e < ENDPOINTS; e++) await seedEndpoint(db, app.id, `http://127.0.0.1:1/${e}`);
  const messageId = await seedMessage(db, app.id);
  const published = await pagesOfMessageRows(db, 'delivery', messageId);
  assert.equal(published.size, ENDPOINTS);
  assert.ok(new Set(published.values()).size >= 3, 'the deliveries fill several pages');

  // One claim leases every delivery, each page's rows all at once.
  const claimed = await claimDeliveries(db, { batch: ENDPOINTS, leaseSeconds: 30, afterEndpoint: '' });
  assert.equal(claimed.length, ENDPOINTS);
  const leased = await pagesOfMessageRows(db, 'delivery', messageId);
  const stayedAtClaim = stayedOnTheirPage(published, leased);
  // At fill factor 70 fewer than half stayed (50 of 120); at 50 all but the odd one whose page ran out.
  assert.ok(
    stayedAtClaim >= ENDPOINTS * 0.9,
    `${stayedAtClaim} of ${ENDPOINTS} deliveries stayed at the claim`,
  );
});
