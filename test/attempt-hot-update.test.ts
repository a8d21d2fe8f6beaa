// An outcome write must not write the attempt's indexes: recording the outcomes of a whole claim
// is a HOT update for (nearly) every attempt, the new row version staying on its page (which is
// what HOT means for an update of no indexed column: support/pages.ts).

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { claimDeliveries, recordOutcomes } from '../src/db/deliveries.ts';
import { freshDatabase, type TestDatabase } from './support/database.ts';
import { attemptResult } from './support/outcomes.ts';
import { pagesOfMessageRows, stayedOnTheirPage } from './support/pages.ts';
import { seedApp, seedEndpoint, seedMessage } from './support/seed.ts';

const ENDPOINTS = 120;

let database: TestDatabase;
before(async () => {
  database = await freshDatabase('attempt_hot');
});
after(async () => {
  await database.drop();
});

test("a claim's outcomes, written as one batch, leave (nearly) every attempt on its page", async () => {
  const { db } = database;
  const app = await seedApp(db, 'hot');
  for (let e = 0; e < ENDPOINTS; e++) await seedEndpoint(db, app.id, `http://127.0.0.1:1/${e}`);
  const messageId = await seedMessage(db, app.id);

  // One claim starts every delivery's attempt, side by side on a few pages…
  const claimed = await claimDeliveries(db, { batch: ENDPOINTS, leaseSeconds: 30, afterEndpoint: '' });
  assert.equal(claimed.length, ENDPOINTS);
  const before = await pagesOfMessageRows(db, 'attempt', messageId);
  assert.ok(new Set(before.values()).size >= 3, 'the attempts fill several pages');

  // …and one outcome write records them all, as the worker's finalizer does.
  const recorded = await recordOutcomes(
    db,
    claimed.map((c) => attemptResult(c)),
    5,
  );
  assert.ok(recorded.every((r) => r.recorded));

  const stayed = stayedOnTheirPage(before, await pagesOfMessageRows(db, 'attempt', messageId));
  // At fill factor 60 about six in ten stayed; at 50 all but the odd one whose page ran out.
  assert.ok(stayed >= ENDPOINTS * 0.85, `${stayed} of ${ENDPOINTS} attempts stayed on their page`);
});
