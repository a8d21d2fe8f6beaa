// The benchmark's CPU meter (bench/cpu.ts) charges each process the CPU it spent in the window: a
// child that burns CPU, a PostgreSQL backend that runs a heavy query, this process's own loop.
// Each burn is measured in CPU time, not wall time, so that a loaded machine cannot fail it.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { isLocalPostgresBackend, meterCpu, processCpuMicros } from '../bench/cpu.ts';
import { freshDatabase, type TestDatabase } from './support/database.ts';

/** The CPU of /proc is counted in clock ticks (10 ms on Linux): a reading may be off by one. */
const TICK_MICROS = 10_000;

const cpuMicros = () => {
  const usage = process.cpuUsage();
  return usage.user + usage.system;
};
/** Spins until this process has spent `micros` of CPU. */
const burnCpu = (micros: number) => {
  const until = cpuMicros() + micros;
  while (cpuMicros() < until);
};

let database: TestDatabase;
before(async () => {
  database = await freshDatabase('bench_cpu');
});
after(async () => {
  await database.drop();
});

test('a child process is charged the CPU it spent in the window, per operation', async () => {
  // Says its CPU so far when ready, burns 300 ms of CPU when told, and says its CPU again.
  const child = spawn(
    process.execPath,
    [
      '-e',
      `const cpu = () => { const u = process.cpuUsage(); return u.user + u.system; };
       process.stdout.write(cpu() + '\\n');
       process.stdin.once('data', () => {
         const until = cpu() + 300000;
         while (cpu() < until);
         process.stdout.write(cpu() + '\\n');
       });`,
    ],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  );
  try {
    child.stdout.setEncoding('utf8');
    const [ready] = (await once(child.stdout, 'data')) as [string];
    const meter = meterCpu({ child: child.pid! }, { postgres: false });
    child.stdin.write('go');
    const [done] = (await once(child.stdout, 'data')) as [string];
    const cpu = meter.stop(3);
    assert.deepEqual(Object.keys(cpu), ['child']);
    const spent = Number(done) - Number(ready);
    assert.ok(spent >= 300_000, `the child spent ${spent} µs`);
    const charged = cpu.child! * 3;
    assert.ok(
      Math.abs(charged - spent) <= 3 * TICK_MICROS,
      `charged ${charged} µs for the ${spent} µs the child spent`,
    );
  } finally {
    child.kill();
  }
});

test("PostgreSQL's processes are charged at least a backend's CPU when the server runs here", async () => {
  const client = new pg.Client({ connectionString: database.url });
  await client.connect();
  try {
    const { pid } = (await client.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!;
    assert.equal(isLocalPostgresBackend(pid), true, 'the backend is a local postgres process');
    assert.equal(isLocalPostgresBackend(process.pid), false, 'a node process is not');
    const meter = meterCpu({}, { postgres: true });
    const backendBefore = processCpuMicros(pid)!;
    await client.query('select count(*) from generate_series(1, 3000000)');
    const backendSpent = processCpuMicros(pid)! - backendBefore;
    const cpu = meter.stop(1);
    assert.ok(backendSpent >= 2 * TICK_MICROS, `the backend spent ${backendSpent} µs`);
    // The sum over the server's processes holds the backend's share, and the idle backend's
    // reading does not move between the two reads.
    assert.ok(
      cpu.PostgreSQL! >= backendSpent,
      `PostgreSQL ${cpu.PostgreSQL} µs, the backend ${backendSpent}`,
    );
  } finally {
    await client.end();
  }
});

test('this process is charged as `self`, under the name given', () => {
  const meter = meterCpu({}, { postgres: false, self: 'client' });
  burnCpu(200_000);
  const cpu = meter.stop(2);
  assert.deepEqual(Object.keys(cpu), ['client']);
  assert.ok(cpu.client! >= 100_000, `client ${cpu.client} µs per operation`);
});
