// An outcome write must not write the attempt's indexes: recording the outcomes of a whole claim
// is a HOT update for (nearly) every attempt, the new row version staying on its page. A HOT
// update always stays on its page and this one changes no indexed column, so "same page" is
// "HOT" here, read from the rows themselves rather than from lagging statistics.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { claimDeliveries, recordOutcomes } from '../src/db/deliveries.ts';
import { freshDatabase, type TestDatabase } from './support/database.ts';
import { attemptResult } from './support/outcomes.ts';
import { seedApp, seedEndpoint, seedMessage } from './support/seed.ts';

const ENDPOINTS = 120;

let database: TestDatabase;
before(async () => {
  database = await freshDatabase('attempt_hot');
});
after(async () => {
  await database.drop();
});

/** The heap page of each attempt of the message (ctid is `(page,item)`). */
async function pagesOfAttempts(messageId: string): Promise<Map<string, number>> {
  const result = await database.db.query<{ id: string; page: string }>(
    `select id, (ctid::text::point)[0]::bigint::text as page from attempt where message_id = $1`,
    [messageId],
  );
  return new Map(result.rows.map((r) => [r.id, Number(r.page)]));
}

test("a claim's outcomes, written as one batch, leave (nearly) every attempt on its page", async () => {
  const { db } = database;
  const app = await seedApp(db, 'hot');
  for (let e = 0; e < ENDPOINTS; e++) await seedEndpoint(db, app.id, `http://127.0.0.1:1/${e}`);
  const messageId = await seedMessage(db, app.id);

  // One claim starts every delivery's attempt, side by side on a few pages…
  const claimed = await claimDeliveries(db, { batch: ENDPOINTS, leaseSeconds: 30, afterEndpoint: '' });
  assert.equal(claimed.length, ENDPOINTS);
  const before = await pagesOfAttempts(messageId);
  assert.ok(new Set(before.values()).size >= 3, 'the attempts fill several pages');

  // …and one outcome write records them all, as the worker's finalizer does.
  const recorded = await recordOutcomes(
    db,
    claimed.map((c) => attemptResult(c)),
    5,
  );
  assert.ok(recorded.every((r) => r.recorded));

  const after = await pagesOfAttempts(messageId);
  assert.equal(after.size, ENDPOINTS);
  const stayed = [...after].filter(([id, page]) => before.get(id) === page).length;
  // At fill factor 60 about six in ten stayed; at 50 all but the odd one whose page ran out.
  assert.ok(stayed >= ENDPOINTS * 0.85, `${stayed} of ${ENDPOINTS} attempts stayed on their page`);
});
