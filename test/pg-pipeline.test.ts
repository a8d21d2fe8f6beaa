// The pipelined connection of the group commits (src/db/pg-pipeline.ts): statements sent while
// others are still running come back to their own callers, in order, each its own transaction; a
// failing one fails alone; a connection that breaks fails what was on it and is replaced; a closed
// one refuses. (That it pipelines at all, and what that buys, is the benchmark's: see
// docs/performance.md, "What the engineering so far bought".)

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createPgPipeline } from '../src/db/pg-pipeline.ts';
import type { Pipeline } from '../src/db/port.ts';
import { freshDatabase, type TestDatabase } from './support/database.ts';
import { waitFor } from './support/wait.ts';

let database: TestDatabase;
before(async () => {
  database = await freshDatabase('pg_pipeline');
  await database.db.query('create table piped (n int primary key)');
});
after(async () => {
  await database.drop();
});

const open = (): Pipeline => createPgPipeline({ connectionString: database.url });

/** Runs `fn` on a new pipeline, closed afterwards whatever happens. */
async function withPipeline(fn: (pipeline: Pipeline) => Promise<void>): Promise<void> {
  const pipeline = open();
  try {
    await fn(pipeline);
  } finally {
    await pipeline.close();
  }
}

/** Server processes with this pid (running `like`, when given). */
const backends = async (pid: number, like = '%') =>
  (
    await database.db.query<{ n: number }>(
      'select count(*)::int as n from pg_stat_activity where pid = $1 and query like $2',
      [pid, like],
    )
  ).rows[0]!.n;
const backendGone = (pid: number) =>
  waitFor(`backend ${pid} to end`, async () => (await backends(pid)) === 0, 10_000);
const backendOf = async (pipeline: Pipeline) =>
  (await pipeline.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;

describe('a pipelined connection', () => {
  test('statements in flight together: each caller gets its own answer, each its own transaction, one backend', async () =>
    withPipeline(async (pipeline) => {
      const answers = await Promise.all(
        Array.from({ length: 20 }, (_, i) =>
          pipeline.query<{ i: number; xid: string; pid: number }>(
            'select $1::int as i, txid_current()::text as xid, pg_backend_pid() as pid',
            [i],
            'piped_answer',
          ),
        ),
      );
      assert.deepEqual(
        answers.map((a) => a.rows[0]!.i),
        Array.from({ length: 20 }, (_, i) => i),
      );
      assert.equal(new Set(answers.map((a) => a.rows[0]!.xid)).size, 20, 'twenty transactions');
      assert.equal(new Set(answers.map((a) => a.rows[0]!.pid)).size, 1, 'one connection');
    }));

  test('a statement that fails fails alone: the ones on the wire around it commit', async () =>
    withPipeline(async (pipeline) => {
      await database.db.query('insert into piped (n) values (2)');
      const results = await Promise.allSettled(
        [1, 2, 3].map((n) => pipeline.query('insert into piped (n) values ($1)', [n], 'piped_insert')),
      );
      assert.deepEqual(
        results.map((r) => r.status),
        ['fulfilled', 'rejected', 'fulfilled'],
      );
      assert.equal(((results[1] as PromiseRejectedResult).reason as { code?: string }).code, '23505');
      const stored = await database.db.query<{ n: number }>('select n from piped order by n');
      assert.deepEqual(
        stored.rows.map((r) => r.n),
        [1, 2, 3],
      );
    }));

  test('a broken connection fails the statements on it, and the next statement opens another', async () =>
    withPipeline(async (pipeline) => {
      const first = await backendOf(pipeline);
      // Settled as they come: a rejection nobody awaits yet would fail the test as unhandled.
      const onTheWire = Promise.allSettled([
        pipeline.query('select pg_sleep(30)'),
        pipeline.query('select 1 as after_the_sleep'),
      ]);
      await waitFor(
        'the sleep to run',
        async () => (await backends(first, 'select pg_sleep%')) === 1,
        10_000,
      );
      await database.db.query('select pg_terminate_backend($1)', [first]);
      const results = await onTheWire;
      assert.deepEqual(
        results.map((r) => r.status),
        ['rejected', 'rejected'],
        'both were on the broken connection',
      );
      const second = await backendOf(pipeline);
      assert.notEqual(second, first, 'a new connection');
    }));

  test('a connection ended while idle is noticed: the next statement goes on a new one, at the first try', async () =>
    withPipeline(async (pipeline) => {
      const first = await backendOf(pipeline);
      await database.db.query('select pg_terminate_backend($1)', [first]);
      // Once the server has let it go, the client has had its turns to read the connection's end.
      await backendGone(first);
      // The entry goes as the backend exits, its socket a moment later: one more round trip.
      await database.db.query('select 1');
      assert.notEqual(await backendOf(pipeline), first);
    }));

  test('a named statement the server no longer has: that call fails, and the next prepares it on a new connection', async () =>
    withPipeline(async (pipeline) => {
      const named = () => pipeline.query<{ one: number }>('select 1 as one', [], 'piped_named');
      await named();
      const first = await backendOf(pipeline);
      // Behind the client's back, as a failed Parse or a pooler's DISCARD would leave it.
      await pipeline.query('deallocate piped_named');
      await assert.rejects(named(), (error: { code?: string }) => error.code === '26000');
      assert.equal((await named()).rows[0]!.one, 1, 'prepared again');
      assert.notEqual(await backendOf(pipeline), first, 'on a new connection');
    }));

  test('once closed, its connection ends and a statement is refused', async () => {
    const pipeline = open();
    const pid = await backendOf(pipeline);
    await pipeline.close();
    await assert.rejects(pipeline.query('select 1'), /closed/);
    await backendGone(pid);
  });

  test('a pipeline that never ran a statement closes, and refuses statements after', async () => {
    const pipeline = open();
    await pipeline.close();
    await assert.rejects(pipeline.query('select 1'), /closed/);
  });
});
