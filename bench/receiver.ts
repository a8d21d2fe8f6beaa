// The parent's handle on the receiver process (receiver-process.ts): start it, read its counters,
// wait for a count, collect tracked arrival times.

import { type ChildProcess, fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const ENTRY = fileURLToPath(new URL('./receiver-process.ts', import.meta.url));

export interface ReceiverStats {
  count: number;
  /** Arrival of the first and last request since the last reset (ms, see stats.nowMs). */
  firstAt: number;
  lastAt: number;
}

export interface Receiver {
  readonly url: string;
  readonly pid: number;
  reset(): Promise<void>;
  stats(): Promise<ReceiverStats>;
  /** Remember arrival times of requests carrying `webhook-id` / `x-bench-id`. */
  track(on: boolean): Promise<void>;
  /** The tracked [id, arrivedAt] pairs since the last drain. */
  drain(): Promise<Array<[string, number]>>;
  /** Polls until `count` requests arrived since the reset, or `timeoutMs` passed. */
  waitForCount(count: number, timeoutMs: number): Promise<ReceiverStats & { complete: boolean }>;
  close(): Promise<void>;
}

export async function startReceiver(): Promise<Receiver> {
  const child: ChildProcess = fork(ENTRY, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  const pending = new Map<number, (result: unknown) => void>();
  let nextId = 1;
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the receiver did not start within 15 s')), 15_000);
    child.once('exit', (code) => reject(new Error(`the receiver exited (${code}) before it started`)));
    child.on('message', (message: { ready?: boolean; port?: number; id?: number; result?: unknown }) => {
      if (message.ready) {
        clearTimeout(timer);
        resolve(message.port!);
      } else if (message.id !== undefined) {
        pending.get(message.id)?.(message.result);
        pending.delete(message.id);
      }
    });
  });

  function call<T>(cmd: string, extra: object = {}): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      const id = nextId++;
      const timer = setTimeout(() => {
        pending.delete(id);
        reject(new Error(`the receiver did not answer ${cmd}`));
      }, 30_000);
      pending.set(id, (result) => {
        clearTimeout(timer);
        resolve(result as T);
      });
      child.send({ id, cmd, ...extra });
    });
  }

  const receiver: Receiver = {
    url: `http://127.0.0.1:${port}`,
    pid: child.pid ?? -1,
    reset: () => call('reset'),
    stats: () => call('stats'),
    track: (on) => call('track', { on }),
    drain: () => call('drain'),
    async waitForCount(count, timeoutMs) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const stats = await receiver.stats();
        if (stats.count >= count) return { ...stats, complete: true };
        if (Date.now() > deadline) return { ...stats, complete: false };
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    },
    async close() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.disconnect();
      const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await exited;
      clearTimeout(timer);
    },
  };
  return receiver;
}
