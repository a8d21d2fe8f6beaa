// The machine's limits, measured with the same receiver, payload and concurrency as everything
// else: (1) a bare keep-alive undici loop, (2) single-row insert transactions of a message-sized
// row, taken at the start and again right before publish and intake. Each with its CPU per
// operation.

import pg from 'pg';
import { Pool } from 'undici';
import { PAYLOAD_TEXT } from '../config.ts';
import type { Context, Throughput } from '../context.ts';
import { measureThroughput } from '../load.ts';

export async function httpLimit(ctx: Context): Promise<void> {
  const { concurrency, counts } = ctx.options;
  const pool = new Pool(ctx.receiver.url, { connections: concurrency, keepAliveTimeout: 60_000 });
  const post = async () => {
    const response = await pool.request({
      method: 'POST',
      path: '/limit',
      headers: { 'content-type': 'application/json' },
      body: PAYLOAD_TEXT,
    });
    await response.body.dump();
    if (response.statusCode !== 204) throw new Error(`receiver answered ${response.statusCode}`);
  };
  try {
    // Where an HTTP exchange's CPU goes with nothing behind it: the floor under the API's and the
    // worker's CPU per request. PostgreSQL is idle meanwhile and not metered.
    ctx.results.httpLimit = await measureThroughput(
      { ...ctx, postmasterPid: null },
      'http-limit',
      Math.min(1000, counts.httpRequests),
      counts.httpRequests,
      post,
      { processes: { receiver: ctx.receiver.pid } },
    );
  } finally {
    await pool.close();
  }
}

export async function commitLimit(ctx: Context): Promise<void> {
  ctx.results.commitLimit = await measureCommitLimit(ctx, 'commit-limit');
}

/**
 * The commit limit again, right before publish and intake: the VM's speed drifts over the minutes
 * between the start of a run and those scenarios, and their ratio should compare like with like.
 */
export async function commitLimitBeforePublish(ctx: Context): Promise<void> {
  ctx.results.commitLimitBeforePublish = await measureCommitLimit(ctx, 'commit-limit (before publish)');
}

async function measureCommitLimit(ctx: Context, label: string): Promise<Throughput> {
  const { concurrency, counts } = ctx.options;
  const pool = new pg.Pool({ connectionString: ctx.db.url, max: concurrency });
  try {
    await pool.query('drop table if exists bench_commit');
    await pool.query(`create table bench_commit (
      id bigint generated always as identity primary key, app_id text not null, event_type text not null,
      payload text not null, created_at timestamptz not null default now())`);
    const insert = async () => {
      await pool.query('insert into bench_commit (app_id, event_type, payload) values ($1, $2, $3)', [
        'app_bench',
        'invoice.paid',
        PAYLOAD_TEXT,
      ]);
    };
    const limit = await measureThroughput(ctx, label, Math.min(500, counts.commits), counts.commits, insert);
    await pool.query('drop table bench_commit');
    return limit;
  } finally {
    await pool.end();
  }
}
