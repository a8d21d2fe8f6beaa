// (7) herald intake: signed Standard Webhooks requests per second through POST /ingest/{source}
// (verify + claim + outbox message + 204) on a `herald api` process, at the run's concurrency. The
// source (created through the API) relays into an app with one endpoint; no worker runs. Every
// request has its own webhook-id; the signatures are computed before the clock starts.

import crypto from 'node:crypto';
import { meterBatches } from '../batches.ts';
import { PAYLOAD_TEXT } from '../config.ts';
import type { Context } from '../context.ts';
import { createAppWithEndpoints, createSource } from '../herald-setup.ts';
import { measureThroughput } from '../load.ts';

export async function intake(ctx: Context): Promise<void> {
  const { counts } = ctx.options;
  const h = await ctx.herald();
  const app = 'bench-intake';
  await createAppWithEndpoints(h, app, 1, `${ctx.receiver.url}/intake`);
  const source = await createSource(h, 'bench-source', app, 'bench.relayed');
  const warm = Math.min(200, counts.intakes);
  const total = warm + counts.intakes;
  const run = crypto.randomBytes(4).toString('hex');
  const timestamp = String(Math.floor(Date.now() / 1000));
  const requests = Array.from({ length: total }, (_, i) => {
    const id = `msg_bench_${run}_${i}`;
    const signature = crypto
      .createHmac('sha256', source.key)
      .update(`${id}.${timestamp}.${PAYLOAD_TEXT}`)
      .digest('base64');
    return {
      'content-type': 'application/json',
      'webhook-id': id,
      'webhook-timestamp': timestamp,
      'webhook-signature': `v1,${signature}`,
    };
  });
  const { client, pid, url } = await ctx.api();
  const send = async (i: number) => {
    const response = await client.request({
      method: 'POST',
      path: `/ingest/${source.uid}`,
      headers: requests[i]!,
      body: PAYLOAD_TEXT,
    });
    const text = await response.body.text();
    if (response.statusCode !== 204) throw new Error(`ingest answered ${response.statusCode}: ${text}`);
  };
  ctx.results.intake = await measureThroughput(ctx, 'intake', warm, counts.intakes, send, {
    processes: { API: pid },
    batches: () => meterBatches(`${url}/metrics`, 'intake'),
  });
}
