// The peer, in a process of its own: a graphile-worker runner (own schema in the scratch
// database) whose one task POSTs the benchmark payload to the receiver, at graphile-worker's
// fastest documented settings: local queue, batched completion and failure, concurrency as
// given, a pool of concurrency + 1. Started and stopped by peer.ts over IPC.
//
// argv: <connectionString> <receiverUrl> <concurrency>

import { Logger, run } from 'graphile-worker';
import { Agent, request } from 'undici';
import { PAYLOAD_TEXT, PEER_LOCAL_QUEUE } from './config.ts';

const [connectionString, receiverUrl, concurrencyText] = process.argv.slice(2);
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
      completeJobBatchDelay: 0,
      failJobBatchDelay: 0,
    },
  },
  taskList: {
    post: async (payload) => {
      const { id } = payload as { id: string };
      const response = await request(url, {
        method: 'POST',
        dispatcher: agent,
        headers: { 'content-type': 'application/json', 'x-bench-id': id },
        body: PAYLOAD_TEXT,
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
