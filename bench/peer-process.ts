// The peer, in a process of its own: a graphile-worker runner (own schema in the scratch
// database) whose one task POSTs the event its job carries to the receiver, at graphile-worker's
// fastest documented settings: local queue, completions and failures batched over 250 ms,
// concurrency as given, a pool of concurrency + 1. Started and stopped by peer.ts over IPC.
//
// argv: <connectionString> <receiverUrl> <concurrency>

import { Logger, run } from 'graphile-worker';
import { Agent, request } from 'undici';
import { PEER_LOCAL_QUEUE } from './config.ts';

const [connectionString, receiverUrl, concurrencyText] = process.argv.slice(2);
if (!connectionString || !receiverUrl)
  throw new Error('usage: peer-process.ts <connectionString> <receiverUrl> <concurrency>');
const concurrency = Number(concurrencyText);

// Keep-alive connections to the receiver, as many as jobs in flight.
const agent = new Agent({ connections: concurrency, keepAliveTimeout: 60_000 });
const url = `${receiverUrl}/peer`;

const quiet = new Logger(() => (level, message) => {
  if (level === 'error') console.error(`[peer] ${message}`);
});

const runner = await run({
  connectionString,
  concurrency,
  maxPoolSize: concurrency + 1,
  schema: 'graphile_worker',
  pollInterval: 2000,
  noHandleSignals: true,
  logger: quiet,
  preset: {
    worker: {
      localQueue: { size: PEER_LOCAL_QUEUE },
      // graphile-worker's recommended start ("a noticeable fraction of a second, 250"): against 0,
      // which batches only the completions of one tick, 5,776 and 6,422 jobs/s against 2,892 and
      // 4,531 in alternating runs here (2026-12-03).
      completeJobBatchDelay: 250,
      failJobBatchDelay: 250,
    },
  },
  taskList: {
    post: async (payload) => {
      const { id, event } = payload as { id: string; event: unknown };
      const response = await request(url, {
        method: 'POST',
        dispatcher: agent,
        headers: { 'content-type': 'application/json', 'x-bench-id': id },
        body: JSON.stringify(event),
      });
      await response.body.dump();
      if (response.statusCode >= 300) throw new Error(`receiver answered ${response.statusCode}`);
    },
  },
});

process.on('message', async (message: { cmd?: string }) => {
  if (message.cmd !== 'stop') return;
  await runner.stop();
  await agent.close();
  process.send?.({ stopped: true });
  process.exit(0);
});
process.on('disconnect', () => process.exit(0));
process.send?.({ ready: true });
