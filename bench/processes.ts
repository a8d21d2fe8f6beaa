// Child processes of a run: `herald worker` and `herald api` (the real CLI, with the node binary running this
// bench) and the graphile-worker peer. Every child is registered and killed when the run ends.

import { type ChildProcess, fork, spawn } from 'node:child_process';
import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import { Pool } from 'undici';

const CLI = fileURLToPath(new URL('../bin/herald.mjs', import.meta.url));
/** The node flags of the command's shebang: what node runs `herald` with when a user types it. */
const CLI_NODE_FLAGS = fs
  .readFileSync(CLI, 'utf8')
  .split('\n', 1)[0]!
  .split(' ')
  .filter((word) => word.startsWith('--'));
const PEER = fileURLToPath(new URL('./peer-process.ts', import.meta.url));

const children = new Set<ChildProcess>();

/** VmHWM (peak resident set) and VmRSS of a live process, in bytes; null once it is gone. */
export function memoryOf(pid: number): { peakRss: number; rss: number } | null {
  let text: string;
  try {
    text = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  } catch {
    return null;
  }
  const kib = (field: string) =>
    Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(text)?.[1] ?? 0) * 1024;
  return { peakRss: kib('VmHWM'), rss: kib('VmRSS') };
}

/** Samples a process's memory every `everyMs` and keeps the highest VmHWM seen. */
export function sampleMemory(pid: number, everyMs = 200): { stop(): number } {
  let peak = 0;
  const take = () => {
    const m = memoryOf(pid);
    if (m) peak = Math.max(peak, m.peakRss);
  };
  take();
  const timer = setInterval(take, everyMs);
  return {
    stop() {
      take();
      clearInterval(timer);
      return peak;
    },
  };
}

async function stopChild(child: ChildProcess, signal: NodeJS.Signals, graceMs: number): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', resolve));
  child.kill(signal);
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(timer);
  children.delete(child);
}

export interface WorkerProcess {
  readonly pid: number;
  /** The tail of what it printed (for error messages). */
  tail(): string;
  stop(): Promise<void>;
}

// Variables of ours that must not reach a child unless we set them.
const DROPPED = /^(DATABASE_URL|HERALD_.*|PORT|HOST|LOG_LEVEL|NODE_OPTIONS)$/;

function childEnv(env: Record<string, string>): NodeJS.ProcessEnv {
  const base: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) if (!DROPPED.test(key)) base[key] = value;
  return { ...base, ...env };
}

export interface HeraldProcess extends WorkerProcess {
  /** Where an `api` process listens (PORT 0: an ephemeral port); null for a worker. */
  readonly url: string | null;
  /** Its /metrics: an `api` process's, or a worker's given HERALD_METRICS_PORT; else null. */
  readonly metricsUrl: string | null;
}

/**
 * Spawns `herald worker` or `herald api` (bin/herald.mjs, as a user runs it) and resolves once it
 * logs "herald started"; an api process listens on an ephemeral loopback port.
 */
export async function startHeraldProcess(
  role: 'worker' | 'api',
  env: Record<string, string>,
  timeoutMs = 30_000,
): Promise<HeraldProcess> {
  const child = spawn(process.execPath, [...CLI_NODE_FLAGS, CLI, role], {
    env: childEnv({ ...env, LOG_LEVEL: 'info', PORT: '0', HOST: '127.0.0.1' }),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let url: string | null = null;
  let metricsUrl: string | null = null;
  const output = await watchStart(child, `herald ${role}`, timeoutMs, (ready) => {
    let recent = '';
    child.stdout!.on('data', (chunk: string) => {
      // Whole lines only: a log line may arrive in pieces.
      recent += chunk;
      const lines = recent.split('\n');
      recent = lines.pop()!;
      for (const line of lines) {
        if (!line.startsWith('{') || !line.includes('"msg":"herald started"')) continue;
        const started = JSON.parse(line) as { api?: string | null; metrics?: string | null };
        url = started.api ?? null;
        metricsUrl = started.metrics ?? null;
        ready();
      }
    });
  });
  return {
    pid: child.pid!,
    url,
    metricsUrl,
    tail: output,
    stop: () => stopChild(child, 'SIGTERM', 15_000),
  };
}

export interface HeraldApi {
  readonly pid: number;
  readonly url: string;
  /** keep-alive connections to the API */
  readonly client: Pool;
  stop(): Promise<void>;
}

/** `herald api` as its own process, with a keep-alive client pool of `connections`. */
export async function startHeraldApi(env: Record<string, string>, connections: number): Promise<HeraldApi> {
  const api = await startHeraldProcess('api', env);
  if (api.url === null) throw new Error(`herald api did not say where it listens:\n${api.tail()}`);
  const client = new Pool(api.url, { connections, keepAliveTimeout: 60_000 });
  return {
    pid: api.pid,
    url: api.url,
    client,
    async stop() {
      await client.close();
      await api.stop();
    },
  };
}

/** Forks the graphile-worker peer (peer-process.ts) and resolves once its runner is up. */
export async function startPeerWorker(
  connectionString: string,
  receiverUrl: string,
  concurrency: number,
  timeoutMs = 30_000,
): Promise<WorkerProcess> {
  const child = fork(PEER, [connectionString, receiverUrl, String(concurrency)], {
    env: childEnv({}),
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
  });
  const output = await watchStart(child, 'the peer', timeoutMs, (ready) =>
    child.on('message', (message: { ready?: boolean }) => {
      if (message.ready) ready();
    }),
  );
  return {
    pid: child.pid!,
    tail: output,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.send({ cmd: 'stop' });
      const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
      await exited;
      clearTimeout(timer);
      children.delete(child);
    },
  };
}

/**
 * Registers a child, keeps the tail of its output, and resolves (with a reader of that tail) once
 * `onReady` reports it started; rejects, with the tail, when it exits first or the time is up.
 */
async function watchStart(
  child: ChildProcess,
  what: string,
  timeoutMs: number,
  onReady: (ready: () => void) => void,
): Promise<() => string> {
  children.add(child);
  let output = '';
  const keep = (chunk: string) => {
    output = (output + chunk).slice(-8000);
  };
  child.stdout!.setEncoding('utf8').on('data', keep);
  child.stderr!.setEncoding('utf8').on('data', keep);
  let onEarlyExit: (code: number | null) => void = () => {};
  try {
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${what} did not start:\n${output}`)), timeoutMs);
      onEarlyExit = (code) => {
        clearTimeout(timer);
        reject(new Error(`${what} exited (${code}) before it started:\n${output}`));
      };
      child.once('exit', onEarlyExit);
      onReady(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  } finally {
    child.removeListener('exit', onEarlyExit);
  }
  return () => output;
}

/** SIGKILLs every child still running (the run failed or was interrupted). */
export function killChildren(): void {
  for (const child of children) {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  }
  children.clear();
}
