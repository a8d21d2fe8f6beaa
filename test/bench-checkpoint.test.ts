// The benchmark settles the database (bench/db.ts `checkpoint`) before each latency run, so that a
// checkpoint brought on by the scenario before does not land in it. A role that may not
// CHECKPOINT still gets its run, with a note that says so.

import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { test } from 'node:test';
import { checkpoint, withClient } from '../bench/db.ts';
import { SERVER_URL } from './support/database.ts';
import { waitFor } from './support/wait.ts';

/** Checkpoints requested since the statistics were reset (a view of their own from PostgreSQL 17). */
const requestedCheckpoints = (): Promise<number> =>
  withClient(SERVER_URL, async (client) => {
    const version = Number((await client.query('show server_version_num')).rows[0].server_version_num);
    const sql =
      version >= 170000
        ? 'select num_requested as n from pg_stat_checkpointer'
        : 'select checkpoints_req as n from pg_stat_bgwriter';
    return Number((await client.query(sql)).rows[0].n);
  });

test('a role that may checkpoint flushes the server, and notes nothing', async () => {
  const before = await requestedCheckpoints();
  const notes: string[] = [];
  await checkpoint(SERVER_URL, notes);
  assert.deepEqual(notes, []);
  await waitFor('the checkpoint counted', async () => (await requestedCheckpoints()) > before);
});

test('a role that may not checkpoint gets a note naming the refusal, and no error', async () => {
  const role = `herald_no_checkpoint_${crypto.randomBytes(4).toString('hex')}`;
  await withClient(SERVER_URL, (client) => client.query(`create role ${role} login`));
  try {
    const url = new URL(SERVER_URL);
    url.username = role;
    const notes: string[] = [];
    await checkpoint(url.toString(), notes);
    assert.equal(notes.length, 1);
    assert.match(notes[0]!, /could not CHECKPOINT before a latency run \(.*CHECKPOINT.*\)/);
  } finally {
    await withClient(SERVER_URL, (client) => client.query(`drop role ${role}`));
  }
});
