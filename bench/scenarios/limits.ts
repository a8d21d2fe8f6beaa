// The machine's limits, measured with the same receiver, payload and concurrency as everything
// else: (1) a bare keep-alive undici loop, (2) single-row insert transactions of a message-sized
// row.

import pg from 'pg';
import { Pool } from 'undici';
import { PAYLOAD_TEXT } from '../config.ts';
import type { Context } from '../context.ts';
import { closedLoop } from '../load.ts';
import { rate } from '../stats.ts';

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
    await closedLoop(Math.min(1000, counts.httpRequests), concurrency, 30_000, post);
    const run = await closedLoop(counts.httpRequests, concurrency, 120_000, post);
    if (run.truncated) ctx.notes.push(`http-limit stopped at its deadline after ${run.done} requests`);
    ctx.results.httpLimit = {
      perSecond: rate(run.done, run.elapsedMs),
      count: run.done,
      elapsedMs: run.elapsedMs,
      latencies: run.durations,
    };
  } finally {
    await pool.close();
  }
}

export async function commitLimit(ctx: Context): Promise<void> {
  const { concurrency, counts } = ctx.options;
  const pool = new pg.Pool({ connectionString: ctx.db.url, max: concurrency });
  try {
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
    await closedLoop(Math.min(500, counts.commits), concurrency, 30_000, insert);
    const run = await closedLoop(counts.commits, concurrency, 120_000, insert);
    if (run.truncated) ctx.notes.push(`commit-limit stopped at its deadline after ${run.done} commits`);
    ctx.results.commitLimit = {
      perSecond: rate(run.done, run.elapsedMs),
      count: run.done,
      elapsedMs: run.elapsedMs,
    };
    await pool.query('drop table bench_commit');
  } finally {
    await pool.end();
  }
}
