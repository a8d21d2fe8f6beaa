// The receiver every scenario sends to, in a process of its own: a keep-alive HTTP server on
// 127.0.0.1 that reads the whole body and answers 204. It counts what arrives and, while asked to,
// remembers when each tracked request (by `webhook-id` or `x-bench-id`) arrived. The parent talks
// to it over IPC (see receiver.ts). It exits when the parent goes away.

import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { nowMs } from './stats.ts';

interface Command {
  id: number;
  cmd: 'reset' | 'stats' | 'track' | 'drain';
  on?: boolean;
}

let count = 0;
let firstAt = 0;
let lastAt = 0;
let tracking = false;
let tracked: Array<[string, number]> = [];

const server = http.createServer((req, res) => {
  req.on('data', () => {});
  req.on('end', () => {
    const at = nowMs();
    count++;
    if (firstAt === 0) firstAt = at;
    lastAt = at;
    if (tracking) {
      const id = req.headers['x-bench-id'] ?? req.headers['webhook-id'];
      if (typeof id === 'string') tracked.push([id, at]);
    }
    res.writeHead(204).end();
  });
});
server.keepAliveTimeout = 65_000;

process.on('message', (message: Command) => {
  let result: unknown = null;
  switch (message.cmd) {
    case 'reset':
      count = 0;
      firstAt = 0;
      lastAt = 0;
      tracked = [];
      break;
    case 'stats':
      result = { count, firstAt, lastAt };
      break;
    case 'track':
      tracking = message.on === true;
      break;
    case 'drain':
      result = tracked;
      tracked = [];
      break;
  }
  process.send?.({ id: message.id, result });
});
process.on('disconnect', () => process.exit(0));

server.listen(0, '127.0.0.1', () => {
  process.send?.({ ready: true, port: (server.address() as AddressInfo).port });
});
