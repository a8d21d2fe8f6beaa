// The benchmark's CPU meter (bench/cpu.ts) charges each process the CPU it spent in the window: a
// child that burns CPU, a PostgreSQL backend that runs a heavy query, this process's own loop.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { isLocalPostgresBackend, meterCpu } from '../bench/cpu.ts';
import { freshDatabase, type TestDatabase } from './support/database.ts';

const BURN_MS = 300;
const burn = (ms: number) => {
  const until = performance.now() + ms;
  while (performance.now() < until);
};

let database: TestDatabase;
before(async () => {
  database = await freshDatabase('bench_cpu');
});
after(async () => {
  await database.drop();
});

test('a child process is charged the CPU it burned in the window, per operation', async () => {
  // Burns when told, then idles until killed: its CPU is readable at the end of the window.
  const child = spawn(
    process.execPath,
    [
      '-e',
      `process.stdin.once('data', () => { const t = performance.now(); while (performance.now() - t < ${BURN_MS}); process.stdout.write('done'); });`,
    ],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  );
  try {
    const meter = meterCpu({ child: child.pid! }, { postgres: false });
    child.stdin.write('go');
    await once(child.stdout, 'data');
    const cpu = meter.stop(3);
    assert.deepEqual(Object.keys(cpu), ['child']);
    // 300 ms over 3 operations: about 100 ms each (ticks are 10 ms; the burn is wall time).
    assert.ok(cpu.child! >= 60_000 && cpu.child! <= 150_000, `child ${cpu.child} µs per operation`);
  } finally {
    child.kill();
  }
});

test("PostgreSQL's processes are charged a query's CPU when the server runs here", async () => {
  const client = new pg.Client({ connectionString: database.url });
  await client.connect();
  try {
    const { pid } = (await client.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!;
    assert.equal(isLocalPostgresBackend(pid), true, 'the backend is a local postgres process');
    assert.equal(isLocalPostgresBackend(process.pid), false, 'a node process is not');
    const meter = meterCpu({}, { postgres: true });
    const started = performance.now();
    await client.query('select count(*) from generate_series(1, 3000000)');
    const wallMicros = (performance.now() - started) * 1000;
    const cpu = meter.stop(1);
    assert.ok(cpu.PostgreSQL! >= wallMicros * 0.5, `PostgreSQL ${cpu.PostgreSQL} µs in ${wallMicros} µs`);
  } finally {
    await client.end();
  }
});

test('this process is charged as `self`, under the name given', () => {
  const meter = meterCpu({}, { postgres: false, self: 'client' });
  burn(BURN_MS);
  const cpu = meter.stop(1);
  assert.deepEqual(Object.keys(cpu), ['client']);
  assert.ok(cpu.client! >= BURN_MS * 1000 * 0.8, `client ${cpu.client} µs`);
});
