// The receivers: one HTTP server per endpoint on 127.0.0.1, each with a behaviour drawn from a
// seeded stream. Every request is logged with its start and end time, webhook-id,
// Idempotency-Key, what the receiver did, and whether it applied the effect — once per
// Idempotency-Key (or webhook-id), as an idempotent receiver would.

import crypto from 'node:crypto';
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { Webhook } from 'standardwebhooks';
import { createJournal, type Journal, now } from './journal.ts';
import { forkRng, type Rng } from './rng.ts';

export type Behaviour = 'fast' | 'slow' | 'flaky' | 'throttled' | 'gone' | 'timeout' | 'reset' | 'liar';

export interface ReceiverSpec {
  name: string;
  behaviour: Behaviour;
  /** The endpoint's filterTypes (null: every event type). */
  filterTypes: string[] | null;
  /** Its endpoint is created mid-soak, not before the load starts. */
  late?: boolean;
}

/** What the model expects of each behaviour (also printed in the README). */
export const RECEIVER_SPECS: readonly ReceiverSpec[] = [
  { name: 'fast', behaviour: 'fast', filterTypes: null },
  { name: 'slow', behaviour: 'slow', filterTypes: ['soak.b', 'soak.inbound'] },
  { name: 'flaky', behaviour: 'flaky', filterTypes: null },
  { name: 'throttled', behaviour: 'throttled', filterTypes: ['soak.a', 'soak.c', 'soak.inbound'] },
  { name: 'gone', behaviour: 'gone', filterTypes: ['soak.b'] },
  { name: 'timeout', behaviour: 'timeout', filterTypes: ['soak.c'] },
  { name: 'reset', behaviour: 'reset', filterTypes: null },
  { name: 'liar', behaviour: 'liar', filterTypes: null },
  { name: 'late', behaviour: 'fast', filterTypes: null, late: true },
];

export interface ReceivedRequest {
  receiver: string;
  seq: number;
  webhookId: string | null;
  idempotencyKey: string | null;
  startedAt: number;
  endedAt: number | null;
  /** answered: a status was sent; reset/dropped: the connection was cut; hung: no answer. */
  action: 'answered' | 'reset' | 'dropped' | 'hung';
  status: number | null;
  /** 'new': the effect was applied now; 'duplicate': it had been already; 'no': not applied. */
  applied: 'new' | 'duplicate' | 'no';
  signatureOk: boolean;
  endedBy: 'response' | 'connection-closed' | 'receiver-gave-up' | 'receiver-closed' | null;
}

export interface SoakReceiver {
  readonly spec: ReceiverSpec;
  readonly url: string;
  /** The endpoint's signing secret (the soak creates the endpoint with it). */
  readonly secret: string;
}

export interface ReceiverFarm {
  readonly receivers: readonly SoakReceiver[];
  /** Every request every receiver saw, in the order they ended. */
  readonly requests: Journal<ReceivedRequest>;
  byName(name: string): SoakReceiver;
  close(): Promise<void>;
}

/** Longer than the attempt timeout (herald gives up first) and shorter than the lease. */
export const HANG_MS = 2500;

interface Decision {
  kind: 'answer' | 'reset' | 'drop' | 'hang';
  status?: number;
  headers?: Record<string, string>;
  delayMs?: number;
  apply: boolean;
}

function decide(behaviour: Behaviour, rng: Rng, seen: number, goneAfter: number): Decision {
  switch (behaviour) {
    case 'fast':
      return { kind: 'answer', status: 204, apply: true };
    case 'slow':
      return { kind: 'answer', status: 200, delayMs: rng.int(100, 400), apply: true };
    case 'flaky':
      return rng.chance(0.35)
        ? { kind: 'answer', status: rng.pick([500, 502, 503]), apply: false }
        : { kind: 'answer', status: 200, apply: true };
    case 'throttled':
      return rng.chance(0.35)
        ? { kind: 'answer', status: 429, headers: { 'retry-after': rng.pick(['1', '2']) }, apply: false }
        : { kind: 'answer', status: 200, apply: true };
    case 'gone':
      return seen <= goneAfter
        ? { kind: 'answer', status: 204, apply: true }
        : { kind: 'answer', status: 410, apply: false };
    case 'timeout':
      // The effect is applied, but the answer would come too late: herald must call it unknown.
      return rng.chance(0.2) ? { kind: 'hang', apply: true } : { kind: 'answer', status: 204, apply: true };
    case 'reset':
      return rng.chance(0.25)
        ? { kind: 'reset', apply: false }
        : { kind: 'answer', status: 204, apply: true };
    case 'liar':
      // Records the request as applied, then drops the connection without an answer.
      return rng.chance(0.25) ? { kind: 'drop', apply: true } : { kind: 'answer', status: 200, apply: true };
  }
}

function header(req: http.IncomingMessage, name: string): string | null {
  const value = req.headers[name];
  return typeof value === 'string' ? value : null;
}

async function startOne(
  spec: ReceiverSpec,
  seed: number,
  journal: Journal<ReceivedRequest>,
): Promise<SoakReceiver & { close(): Promise<void> }> {
  const rng = forkRng(seed, `receiver:${spec.name}`);
  const secret = `whsec_${crypto.randomBytes(24).toString('base64')}`;
  const verifier = new Webhook(secret);
  const appliedKeys = new Set<string>();
  const open = new Set<{ record: ReceivedRequest; finish: (by: ReceivedRequest['endedBy']) => void }>();
  const sockets = new Set<Socket>();
  const goneAfter = rng.int(3, 8);
  let seq = 0;

  const server = http.createServer((req, res) => {
    const record: ReceivedRequest = {
      receiver: spec.name,
      seq: ++seq,
      webhookId: header(req, 'webhook-id'),
      idempotencyKey: header(req, 'idempotency-key'),
      startedAt: now(),
      endedAt: null,
      action: 'hung',
      status: null,
      applied: 'no',
      signatureOk: false,
      endedBy: null,
    };
    let timer: NodeJS.Timeout | null = null;
    const entry = {
      record,
      finish(by: ReceivedRequest['endedBy']) {
        if (record.endedAt !== null) return;
        record.endedAt = now();
        record.endedBy = by;
        if (timer) clearTimeout(timer);
        open.delete(entry);
        journal.push(record);
      },
    };
    open.add(entry);
    res.on('finish', () => entry.finish('response'));
    res.on('close', () => entry.finish('connection-closed'));
    const apply = () => {
      const key = record.idempotencyKey ?? record.webhookId ?? `anonymous-${record.seq}`;
      record.applied = appliedKeys.has(key) ? 'duplicate' : 'new';
      appliedKeys.add(key);
    };
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      try {
        verifier.verify(body, {
          'webhook-id': record.webhookId ?? '',
          'webhook-timestamp': header(req, 'webhook-timestamp') ?? '',
          'webhook-signature': header(req, 'webhook-signature') ?? '',
        });
        record.signatureOk = true;
      } catch {
        record.signatureOk = false;
      }
      const decision = decide(spec.behaviour, rng, record.seq, goneAfter);
      switch (decision.kind) {
        case 'answer': {
          const answer = () => {
            if (record.endedAt !== null) return; // herald hung up first (a killed worker)
            if (decision.apply) apply();
            record.action = 'answered';
            record.status = decision.status!;
            res.writeHead(decision.status!, decision.headers ?? {}).end();
          };
          if (decision.delayMs) timer = setTimeout(answer, decision.delayMs);
          else answer();
          return;
        }
        case 'reset':
          record.action = 'reset';
          req.socket.resetAndDestroy();
          entry.finish('connection-closed');
          return;
        case 'drop':
          apply();
          record.action = 'dropped';
          req.socket.destroy();
          entry.finish('connection-closed');
          return;
        case 'hang':
          apply();
          record.action = 'hung';
          timer = setTimeout(() => {
            req.socket.destroy();
            entry.finish('receiver-gave-up');
          }, HANG_MS);
          return;
      }
    });
  });
  // Longer than herald's idle keep-alive, so the receiver never closes a connection just as a
  // request is being written on it.
  server.keepAliveTimeout = 60_000;
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const { port } = server.address() as AddressInfo;
  return {
    spec,
    url: `http://127.0.0.1:${port}/hook/${spec.name}`,
    secret,
    async close() {
      for (const entry of [...open]) entry.finish('receiver-closed');
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

export async function startReceivers(seed: number, outDir: string): Promise<ReceiverFarm> {
  const requests = createJournal<ReceivedRequest>(outDir, 'receivers');
  const receivers = await Promise.all(RECEIVER_SPECS.map((spec) => startOne(spec, seed, requests)));
  return {
    receivers,
    requests,
    byName(name) {
      const found = receivers.find((r) => r.spec.name === name);
      if (!found) throw new Error(`no receiver ${name}`);
      return found;
    },
    async close() {
      await Promise.all(receivers.map((r) => r.close()));
      await requests.close();
    },
  };
}
