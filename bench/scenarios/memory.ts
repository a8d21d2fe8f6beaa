// (9) memory: peak RSS (VmHWM from /proc) of one `herald worker` process working through a backlog
// of pending deliveries (1,000,000; 100,000 with --quick), inserted by one INSERT … SELECT over
// generate_series into a scratch database of its own (one app, 1,000 endpoints at the receiver).
// The worker runs until the receiver has them all or the scenario's time cap; then the sizes of
// the hot tables and of the queue tables the claim walks (due deliveries, deliveries in flight),
// with their indexes: after the finished work, after payload retention (payloads expired, VACUUM
// — the default: history is kept), and after the opt-in history retention (finished messages
// deleted with their deliveries and attempts, VACUUM).

import { createPgDb } from '../../src/db/pg-pool.ts';
import { expireOldPayloads, pruneFinishedHistory } from '../../src/db/retention.ts';
import { EVENT_TYPE, PAYLOAD_TEXT } from '../config.ts';
import type { Context } from '../context.ts';
import { createScratchDatabase, tableSizes, withClient } from '../db.ts';
import { createAppWithEndpoints, heraldEnv, startInProcess } from '../herald-setup.ts';
import { sleep } from '../load.ts';
import { memoryOf, sampleMemory, startHeraldProcess } from '../processes.ts';
import { nowMs } from '../stats.ts';

/** What is measured, by the name the figures give it. */
const MEASURED: Record<string, string> = {
  'table delivery': 'delivery',
  'table attempt': 'attempt',
  'table message': 'message',
  'table of due deliveries (the claim walks it)': 'delivery_due',
  'table of deliveries in flight': 'delivery_lease',
};

async function measuredSizes(url: string): Promise<Record<string, number>> {
  const bytes = await tableSizes(url, Object.values(MEASURED));
  return Object.fromEntries(Object.entries(MEASURED).map(([label, relation]) => [label, bytes[relation]!]));
}

export async function memory(ctx: Context): Promise<void> {
  const { counts, concurrency, serverUrl } = ctx.options;
  const endpoints = counts.fanEndpoints;
  const messages = Math.ceil(counts.memoryDeliveries / endpoints);
  const pending = messages * endpoints;
  const scratch = await createScratchDatabase(serverUrl, 'mem');
  try {
    const env = heraldEnv(scratch.url, concurrency);
    const setup = await startInProcess(env, 8);
    let appId: string;
    try {
      await createAppWithEndpoints(setup, 'bench-memory', endpoints, `${ctx.receiver.url}/memory`);
      appId = ((await setup.call('GET', '/api/v1/app/bench-memory')).body as { id: string }).id;
    } finally {
      await setup.close();
    }
    const t0 = nowMs();
    await withClient(scratch.url, (client) =>
      client.query(
        `with m as (
           insert into message (app_id, event_type, payload, payload_expires_at)
           select $1, $2, $3, now() + interval '90 days' from generate_series(1, $4)
           returning id
         )
         insert into delivery (app_id, message_id, endpoint_id, next_attempt_at)
         select $1, m.id, e.id, now() from m cross join endpoint e where e.app_id = $1`,
        [appId, EVENT_TYPE, PAYLOAD_TEXT, messages],
      ),
    );
    await withClient(scratch.url, (client) => client.query('analyze'));
    ctx.log(`memory: ${pending} pending deliveries inserted in ${((nowMs() - t0) / 1000).toFixed(1)} s`);

    await ctx.receiver.reset();
    const worker = await startHeraldProcess('worker', env);
    const startRssBytes = memoryOf(worker.pid)?.rss ?? 0;
    const sampler = sampleMemory(worker.pid);
    const started = nowMs();
    let delivered = 0;
    let peakRssBytes = 0;
    try {
      const deadline = started + counts.memoryMaxSeconds * 1000;
      let lastLog = started;
      while (nowMs() < deadline) {
        delivered = (await ctx.receiver.stats()).count;
        if (delivered >= pending) break;
        if (nowMs() - lastLog > 30_000) {
          lastLog = nowMs();
          ctx.log(`memory: ${delivered} of ${pending} delivered`);
        }
        await sleep(250);
      }
      peakRssBytes = sampler.stop();
    } finally {
      sampler.stop();
      await worker.stop();
    }
    const workedSeconds = (nowMs() - started) / 1000;
    const finished = await withClient(scratch.url, async (client) => {
      const result = await client.query<{ n: number }>(
        `select count(*)::int as n from delivery where state = 'succeeded'`,
      );
      return result.rows[0]!.n;
    });
    if (finished < pending) {
      ctx.notes.push(
        `memory: the worker finished ${finished} of ${pending} deliveries within its ${counts.memoryMaxSeconds} s cap`,
      );
    }
    const finishedSizes = await measuredSizes(scratch.url);

    // The retention jobs, each run until it is done, then a plain VACUUM (what autovacuum would
    // do): payloads (every one expired now), then the opt-in history (everything finished).
    const db = createPgDb({ connectionString: scratch.url, max: 1 });
    const vacuumed = async () => {
      await db.query(`vacuum (analyze) ${Object.values(MEASURED).join(', ')}`, []);
      return measuredSizes(scratch.url);
    };
    try {
      await db.query(`update message set payload_expires_at = now() - interval '1 second'`, []);
      while ((await expireOldPayloads(db)) > 0) {}
      const payloadRetention = await vacuumed();
      while ((await db.transaction((tx) => pruneFinishedHistory(tx, 0))) > 0) {}
      const historyRetention = await vacuumed();
      ctx.results.memory = {
        pending,
        endpoints,
        delivered: finished,
        workedSeconds,
        startRssBytes,
        peakRssBytes,
        sizes: { finished: finishedSizes, payloadRetention, historyRetention },
      };
    } finally {
      await db.close();
    }
  } finally {
    await scratch.drop();
  }
}
