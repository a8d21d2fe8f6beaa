// A replay and a history-retention pass over the same finished message, at the same time, on two
// real connections: retention locks a message, then its deletion cascades to the deliveries; a
// replay locks its deliveries and restarts them only while their message still holds its
// payload. Taken the other way round the two deadlocked; the replay now locks the messages first,
// so retention leaves a message a replay holds, and the replay's restart goes through.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { restartDeliveries } from '../src/db/deliveries.ts';
import { asQueryable } from '../src/db/port.ts';
import { listReplay } from '../src/db/replay.ts';
import { pruneFinishedHistory } from '../src/db/retention.ts';
import { freshDatabase, type TestDatabase } from './support/database.ts';
import { seedApp, seedEndpoint, seedMessage } from './support/seed.ts';
import { waitFor } from './support/wait.ts';

let database: TestDatabase;
before(async () => {
  database = await freshDatabase('replay_retention');
});
after(() => database.drop());

test('a replay and a retention pass over one finished message do not deadlock: the replay restarts it, retention leaves it', async () => {
  const db = database.db;
  const app = await seedApp(db, 'both');
  await seedEndpoint(db, app.id, 'http://127.0.0.1:1/both');
  const messageId = await seedMessage(db, app.id);
  const { rows } = await db.query<{ id: string }>(
    `update delivery set state = 'succeeded', next_attempt_at = null where message_id = $1 returning id`,
    [messageId],
  );
  const deliveryId = rows[0]!.id;

  const replaying = new pg.Client({ connectionString: database.url });
  const pruning = new pg.Client({ connectionString: database.url });
  await Promise.all([replaying.connect(), pruning.connect()]);
  try {
    await replaying.query('begin');
    const selected = await listReplay(
      asQueryable(replaying),
      {
        states: ['succeeded'],
        appIds: [app.id],
        endpointId: null,
        messageIds: [messageId],
        since: null,
        until: null,
        includeUnreviewed: false,
      },
      10,
      true,
    );
    assert.deepEqual(
      selected.map((p) => p.deliveryId),
      [deliveryId],
    );
    // Everything finished before now is old enough for a retention of 0 days. The pass runs until
    // it is done or waits on a lock — as it did on the replay's delivery, holding the message.
    const pid = (await pruning.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;
    await pruning.query('begin');
    let done = false;
    const pruned = pruneFinishedHistory(asQueryable(pruning), 0).finally(() => {
      done = true;
    });
    pruned.catch(() => {}); // awaited below; a failure must not surface unhandled meanwhile
    await waitFor('the retention pass to finish or to wait on a lock', async () => {
      if (done) return true;
      const waiting = await db.query(
        `select 1 from pg_stat_activity where pid = $1 and wait_event_type = 'Lock'`,
        [pid],
      );
      return waiting.rowCount === 1;
    });
    const restarted = await restartDeliveries(asQueryable(replaying), [deliveryId]);
    assert.equal(restarted.length, 1);
    await replaying.query('commit');
    assert.equal(await pruned, 0, 'the message the replay held was left');
    await pruning.query('commit');
  } finally {
    await Promise.all([replaying.end(), pruning.end()]);
  }
  const state = await db.query<{ state: string }>('select state from delivery where id = $1', [deliveryId]);
  assert.equal(state.rows[0]?.state, 'pending');
});
