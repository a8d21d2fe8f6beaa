// One LISTEN connection per process carries every channel (the workers' wake-up, an API's app
// and source changes): it delivers each channel's notifications to that channel's handlers only,
// comes back by itself when the connection is killed (every handler then hears '' once, as
// notifications sent meanwhile are lost), and lets go of its connection once nothing listens.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { createPgDb } from '../src/db/pg-pool.ts';
import type { Db } from '../src/db/port.ts';
import { freshDatabase, type TestDatabase } from './support/database.ts';
import { waitFor } from './support/wait.ts';

let database: TestDatabase;
let db: Db;
const states: string[] = [];

before(async () => {
  database = await freshDatabase('pg_listener');
  db = createPgDb({
    connectionString: database.url,
    max: 2,
    applicationName: 'listener-under-test',
    onListenState: (state) => states.push(state),
  });
});
after(async () => {
  await db.close();
  await database.drop();
});

/** Backends of the db under test that hold a LISTEN (idle, their last statement a LISTEN). */
async function listeningBackends(): Promise<number[]> {
  const { rows } = await database.db.query<{ pid: number }>(
    `select pid from pg_stat_activity
      where datname = current_database() and application_name = 'listener-under-test'
        and query ilike 'listen %'`,
  );
  return rows.map((r) => r.pid);
}

const notify = (channel: string, payload: string) =>
  database.db.query('select pg_notify($1, $2)', [channel, payload]);

test('one connection for every channel; each handler hears its own channel', async () => {
  const heard: Record<string, string[]> = { a: [], b: [] };
  const stopA = await db.listen('chan_a', (p) => heard['a']!.push(p));
  const stopB = await db.listen('chan_b', (p) => heard['b']!.push(p));
  try {
    const listening = await listeningBackends();
    assert.equal(listening.length, 1, 'both channels share one connection');
    await notify('chan_a', 'one');
    await notify('chan_b', 'two');
    await waitFor('both notifications', () => heard['a']!.length === 1 && heard['b']!.length === 1, 5000);
    assert.deepEqual(heard, { a: ['one'], b: ['two'] });

    // Letting go of one channel leaves the other on the same connection.
    await stopA();
    await notify('chan_a', 'unheard');
    await notify('chan_b', 'three');
    await waitFor('the second notification on b', () => heard['b']!.length === 2, 5000);
    assert.deepEqual(heard, { a: ['one'], b: ['two', 'three'] });
    // The connection goes only when its last channel is let go: the backend, whatever its last
    // statement (an UNLISTEN now), is gone.
    await stopB();
    await waitFor(
      'the connection to be let go once nothing listens',
      async () =>
        (await database.db.query('select 1 from pg_stat_activity where pid = $1', [listening[0]])).rows
          .length === 0,
      5000,
    );
  } finally {
    await stopA();
    await stopB();
  }
});

test('a killed connection comes back by itself; every handler hears an empty payload once', async () => {
  const heard: Record<string, string[]> = { a: [], b: [] };
  const stopA = await db.listen('chan_a', (p) => heard['a']!.push(p));
  const stopB = await db.listen('chan_b', (p) => heard['b']!.push(p));
  try {
    const [pid] = await listeningBackends();
    assert.ok(pid, 'a listening backend');
    states.length = 0;
    await database.db.query('select pg_terminate_backend($1)', [pid]);
    await waitFor('the listener to be restored', () => states.includes('restored'), 10_000);
    assert.deepEqual(states, ['lost', 'restored']);
    assert.deepEqual(heard, { a: [''], b: [''] }, 'each handler was told to catch up, once');

    const [again] = await listeningBackends();
    assert.ok(again && again !== pid, 'a new connection listens');
    await notify('chan_a', 'after');
    await notify('chan_b', 'after');
    await waitFor(
      'notifications on the new connection',
      () => heard['a']!.length === 2 && heard['b']!.length === 2,
      5000,
    );
  } finally {
    await stopA();
    await stopB();
  }
});

test('closed while its first connection is being made: the listen fails and the connection is let go', async () => {
  const closing = createPgDb({
    connectionString: database.url,
    max: 1,
    applicationName: 'listener-closed-early',
  });
  const listening = closing.listen('chan_c', () => {});
  await closing.close();
  await assert.rejects(listening, /closed/);
  await waitFor(
    'no connection left open by the closed listener',
    async () =>
      (
        await database.db.query(
          `select 1 from pg_stat_activity where application_name = 'listener-closed-early'`,
        )
      ).rows.length === 0,
    5000,
  );
});

test('listens and unlistens made at once go one at a time on the connection, as pg asks', async () => {
  // pg queues a query sent while another runs, but deprecates it (pg 9 refuses it): a process
  // starts and stops its caches' and workers' channels together.
  const warnings: string[] = [];
  const onWarning = (warning: Error) => warnings.push(warning.message);
  process.on('warning', onWarning);
  const heard: string[] = [];
  try {
    const stops = await Promise.all(
      ['chan_x', 'chan_y', 'chan_z', 'chan_kept'].map((c) => db.listen(c, (p) => heard.push(`${c}:${p}`))),
    );
    await Promise.all(stops.slice(0, 3).map((stop) => stop()));
    // The kept channel still hears, on the same connection, once the unlistens have gone through.
    await notify('chan_x', 'unheard');
    await notify('chan_kept', 'heard');
    await waitFor('the kept channel to hear', () => heard.includes('chan_kept:heard'), 5000);
    assert.deepEqual(heard, ['chan_kept:heard']);
    await stops[3]!();
    // A warning is emitted on the next tick of the call that earned it.
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(
      warnings.filter((w) => /already executing a query/.test(w)),
      [],
    );
  } finally {
    process.off('warning', onWarning);
  }
});
