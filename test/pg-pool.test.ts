// herald's pool of PostgreSQL connections (src/db/pg-pool.ts): a transaction whose connection can
// no longer be trusted gives it up, so that the next one does not meet the same failure; one that
// failed for its caller's reasons keeps it (a reconnect per 404 would cost every API error). And a
// database gone silent does not hold its close.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { createPgDb } from '../src/db/pg-pool.ts';
import type { Db } from '../src/db/port.ts';
import { HeraldError } from '../src/errors.ts';
import { freshDatabase, type TestDatabase } from './support/database.ts';
import { startTcpProxy } from './support/tcp-proxy.ts';
import { waitFor } from './support/wait.ts';

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

/** The backend a transaction of the pool's runs on: which connection it had. */
const backend = () =>
  db.transaction(
    async (tx) => (await tx.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid,
  );

test('a transaction that meets a named statement the server no longer has: the next one prepares it on a new connection', async () => {
  const named = () =>
    db.transaction((tx) => tx.query<{ one: number }>('select 1 as one', [], 'pooled_named'));
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

test('a database gone silent: letting go of a channel and closing take a goodbye’s second, and leave nothing open', async () => {
  // A peer gone without a reset answers nothing, not even the close that answers a client's own:
  // a client's end() would wait for it for as long as the kernel retransmits (minutes), and a
  // process waiting to end on its own would wait as long. The Db runs in a process of its own,
  // which must exit by itself once closed; the proxy stays here.
  const target = new URL(database.url);
  const proxy = await startTcpProxy({ host: target.hostname, port: Number(target.port || 5432) });
  const child = spawn(
    process.execPath,
    [fileURLToPath(new URL('./support/silent-db-child.ts', import.meta.url)), proxy.urlFor(database.url)],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  );
  const said: string[] = [];
  child.stdout.on('data', (chunk: Buffer) => said.push(...chunk.toString().split('\n').filter(Boolean)));
  let exitCode: number | null = null;
  child.on('exit', (code) => {
    exitCode = code ?? -1;
  });
  try {
    await waitFor('the child’s connections', () => said.includes('ready'));
    assert.equal(proxy.live, 4, 'the LISTEN connection, two of the pool’s, the pipeline’s');
    proxy.silenceAll();
    child.stdin.write('go\n');
    // Its notifications already reach no handler: nothing waits for the UNLISTEN's answer.
    await waitFor('one channel let go', () => said.includes('unlistened'), 10_000);
    // The LISTEN connection, the pipeline's and the pool's, each dropped once its second is up
    // (well within these deadlines, which leave a loaded machine room; without the goodbye's
    // deadline each waits minutes)...
    await waitFor('the Db closed', () => said.includes('closed'), 10_000);
    // ...the idle ones of the pool too: nothing keeps the process.
    await waitFor('the child to exit on its own', () => exitCode !== null, 10_000);
    assert.equal(exitCode, 0);
  } finally {
    child.kill('SIGKILL');
    await proxy.close();
  }
});
