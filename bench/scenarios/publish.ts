// (5) herald publish throughput at the run's concurrency (32 by default), no worker running, to an
// app with one endpoint: through the library (herald.publish inside the caller's own
// transaction: BEGIN, publish, COMMIT on a pg client of the caller's pool, with herald's statements
// prepared on that client, `prepare: true`, as a node-postgres caller can) and through the HTTP
// API (a `herald api` process, as a user runs it; keep-alive client in the bench process), with
// an API key of the `publish` scope restricted to the app, as a product would hold.

import pg from 'pg';
import { meterBatches } from '../batches.ts';
import { EVENT_TYPE, PAYLOAD } from '../config.ts';
import type { Context } from '../context.ts';
import { createAppWithEndpoints, createPublishKey } from '../herald-setup.ts';
import { measureThroughput } from '../load.ts';

/** The library runs in the caller's process: its CPU is herald's and the caller's pg driver's. */
const CALLER = 'caller (herald library + pg)';

export async function publish(ctx: Context): Promise<void> {
  const { counts, concurrency } = ctx.options;
  const h = await ctx.herald();
  const app = 'bench-publish';
  await createAppWithEndpoints(h, app, 1, `${ctx.receiver.url}/publish`);
  const body = JSON.stringify({ eventType: EVENT_TYPE, payload: PAYLOAD });

  // The library first: its pool is the caller's, so herald's own pool is still small then. Once
  // as the README's example does it (the NOTIFY commits with the caller's transaction), once with
  // the wake-up after the COMMIT (`wake: false` + herald.wake()), which lets commits be flushed
  // together.
  const warm = Math.min(200, counts.publishes);
  const callerPool = new pg.Pool({ connectionString: ctx.db.url, max: concurrency });
  try {
    const inCallerTransaction = (wake: boolean) => async () => {
      const client = await callerPool.connect();
      try {
        await client.query('begin');
        await h.herald.publish(
          app,
          { eventType: EVENT_TYPE, payload: PAYLOAD },
          { db: client, wake, prepare: true },
        );
        await client.query('commit');
      } catch (error) {
        await client.query('rollback').catch(() => {});
        throw error;
      } finally {
        client.release();
      }
      if (!wake) await h.herald.wake();
    };
    ctx.results.publishLibrary = await measureThroughput(
      ctx,
      'publish (library)',
      warm,
      counts.publishes,
      inCallerTransaction(true),
      { self: CALLER },
    );
    ctx.results.publishLibraryWakeAfter = await measureThroughput(
      ctx,
      'publish (library, wake after COMMIT)',
      warm,
      counts.publishes,
      inCallerTransaction(false),
      { self: CALLER },
    );
  } finally {
    await callerPool.end();
  }

  const key = await createPublishKey(h, app);
  const { client, pid, url } = await ctx.api();
  const overHttp = async () => {
    const response = await client.request({
      method: 'POST',
      path: `/api/v1/app/${app}/msg`,
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body,
    });
    const text = await response.body.text();
    if (response.statusCode !== 202) throw new Error(`publish answered ${response.statusCode}: ${text}`);
  };
  ctx.results.publishHttp = await measureThroughput(ctx, 'publish (HTTP)', warm, counts.publishes, overHttp, {
    processes: { API: pid },
    batches: () => meterBatches(`${url}/metrics`, 'publish'),
  });
}
