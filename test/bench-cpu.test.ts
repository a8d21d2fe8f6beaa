// The benchmark's CPU meter (bench/cpu.ts) charges each process the CPU it spent in the window: a
// child that burns CPU, PostgreSQL's backends (one that ends inside the window included), this
// process's own loop. Each burn is measured in CPU time, not wall time, so that a loaded machine
// cannot fail it.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { localPostmasterOf, meterCpu, processCpuMicros } from '../bench/cpu.ts';
import { freshDatabase, type TestDatabase } from './support/database.ts';
import { waitFor } from './support/wait.ts';

/** The CPU of /proc is counted in clock ticks (10 ms on Linux): a reading may be off by one. */
const TICK_MICROS = 10_000;
const HEAVY_QUERY = 'select count(*) from generate_series(1, 3000000)';

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

/** Burns 300 ms of CPU when told; says its CPU so far when ready and when done; exits on `exit`. */
function burner() {
  const child = spawn(
    process.execPath,
    [
      '-e',
      `const cpu = () => { const u = process.cpuUsage(); return u.user + u.system; };
       process.stdout.write(cpu() + '\\n');
       process.stdin.on('data', (d) => {
         if (String(d) === 'exit') process.exit(0);
         const until = cpu() + 300000;
         while (cpu() < until);
         process.stdout.write(cpu() + '\\n');
       });`,
    ],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  );
  child.stdout.setEncoding('utf8');
  return child;
}

test('a child process is charged the CPU it spent in the window, per operation', async () => {
  const child = burner();
  try {
    const [ready] = (await once(child.stdout, 'data')) as [string];
    const meter = meterCpu({ child: child.pid! }, { postmaster: null });
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

test('a named process that is gone by the end reads NaN, not a negative figure', async () => {
  const child = burner();
  await once(child.stdout, 'data');
  const meter = meterCpu({ child: child.pid! }, { postmaster: null });
  child.stdin.write('exit');
  await once(child, 'exit');
  assert.ok(Number.isNaN(meter.stop(1).child));
});

test("PostgreSQL is charged its backends' CPU, also of a backend that ended in the window", async (t) => {
  const steady = new pg.Client({ connectionString: database.url });
  await steady.connect();
  try {
    const { pid } = (await steady.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!;
    const postmaster = localPostmasterOf(pid);
    if (postmaster === null) {
      t.skip('the server does not run on this machine');
      return;
    }
    assert.equal(localPostmasterOf(process.pid), null, 'a node process is no backend');

    // What the query costs a backend, read from the backend that stays.
    const beforeQuery = processCpuMicros(pid)!;
    await steady.query(HEAVY_QUERY);
    const queryCost = processCpuMicros(pid)! - beforeQuery;
    assert.ok(queryCost >= 2 * TICK_MICROS, `the query cost the backend ${queryCost} µs`);

    // The same query on a backend that starts and ends inside the window.
    const meter = meterCpu({}, { postmaster });
    const brief = new pg.Client({ connectionString: database.url });
    await brief.connect();
    const briefPid = (await brief.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;
    await brief.query(HEAVY_QUERY);
    await brief.end();
    // Gone from /proc once the postmaster has reaped it: its CPU is then in the postmaster's.
    await waitFor('the brief backend to be reaped', () => processCpuMicros(briefPid) === null, 10_000);
    const cpu = meter.stop(1);
    assert.ok(
      cpu.PostgreSQL! >= queryCost * 0.5,
      `PostgreSQL ${cpu.PostgreSQL} µs for a query that costs a backend ${queryCost}`,
    );
  } finally {
    await steady.end();
  }
});

test('this process is charged as `self`, under the name given; no operations reads NaN', () => {
  const meter = meterCpu({}, { postmaster: null, self: 'client' });
  burnCpu(200_000);
  const cpu = meter.stop(2);
  assert.deepEqual(Object.keys(cpu), ['client']);
  assert.ok(cpu.client! >= 100_000, `client ${cpu.client} µs per operation`);
  assert.ok(Number.isNaN(meter.stop(0).client));
});
