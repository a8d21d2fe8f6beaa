// A real HTTP receiver on 127.0.0.1 for tests: records every request (start and end time, headers,
// raw body) and answers with whatever the test's `respond` decides.

import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface ReceivedRequest {
  path: string;
  headers: http.IncomingHttpHeaders;
  body: string;
  startedAt: number;
  endedAt: number | null;
}

export type Respond = (
  request: ReceivedRequest,
  n: number,
) => { status: number; body?: string; headers?: Record<string, string> } | 'hang' | 'hold' | 'destroy';

export interface Receiver {
  url: string;
  port: number;
  requests: ReceivedRequest[];
  respond: Respond;
  /** Answers 204 to every request held so far (a `respond` that said 'hold'). */
  release(): void;
  /** Most requests in flight at once, per path. */
  maxConcurrentByPath: Map<string, number>;
  close(): Promise<void>;
}

export async function startReceiver(respond: Respond = () => ({ status: 204 })): Promise<Receiver> {
  const requests: ReceivedRequest[] = [];
  const inFlight = new Map<string, number>();
  const maxConcurrentByPath = new Map<string, number>();
  const sockets = new Set<import('node:net').Socket>();
  const held: (() => void)[] = [];
  const receiver: Receiver = {
    url: '',
    port: 0,
    requests,
    respond,
    release() {
      for (const answer of held.splice(0)) answer();
    },
    maxConcurrentByPath,
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
  const server = http.createServer((req, res) => {
    const path = req.url ?? '/';
    const chunks: Buffer[] = [];
    const record: ReceivedRequest = {
      path,
      headers: req.headers,
      body: '',
      startedAt: Date.now(),
      endedAt: null,
    };
    const current = (inFlight.get(path) ?? 0) + 1;
    inFlight.set(path, current);
    maxConcurrentByPath.set(path, Math.max(maxConcurrentByPath.get(path) ?? 0, current));
    const finish = () => {
      if (record.endedAt !== null) return;
      record.endedAt = Date.now();
      inFlight.set(path, (inFlight.get(path) ?? 1) - 1);
    };
    res.on('close', finish);
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      record.body = Buffer.concat(chunks).toString('utf8');
      requests.push(record);
      const answer = receiver.respond(record, requests.length);
      if (answer === 'hang') return;
      if (answer === 'hold') {
        held.push(() => res.writeHead(204).end());
        return;
      }
      if (answer === 'destroy') {
        req.socket.destroy();
        return;
      }
      res.writeHead(answer.status, answer.headers ?? {}).end(answer.body ?? '');
    });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  receiver.port = (server.address() as AddressInfo).port;
  receiver.url = `http://127.0.0.1:${receiver.port}`;
  return receiver;
}
