// Runs the real `herald` CLI as child processes (the same node binary that runs the tests), keeps
// their output and JSON log lines, and makes sure none of them outlives its test: every process
// spawned here is registered, and `killAll()` (call it from `after`) SIGKILLs whatever is left.

import { type ChildProcess, spawn } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import net from 'node:net';
import { fileURLToPath } from 'node:url';
import { waitFor } from './wait.ts';

export const CLI_PATH = fileURLToPath(new URL('../../src/cli.ts', import.meta.url));

export interface LogRecord {
  level?: number;
  msg?: string;
  [key: string]: unknown;
}

export interface ExitInfo {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface HeraldProcess {
  readonly name: string;
  readonly child: ChildProcess;
  readonly pid: number;
  /** Everything written so far. */
  readonly stdout: string;
  readonly stderr: string;
  /** stdout lines that parsed as JSON (pino's log records). */
  readonly logs: LogRecord[];
  /** null while running. */
  readonly exitInfo: ExitInfo | null;
  /** The first log record whose `msg` matches; fails early when the process exits first. */
  waitForLog(msg: string | RegExp, timeoutMs?: number): Promise<LogRecord>;
  /** Waits for the process to exit on its own. */
  waitForExit(timeoutMs?: number): Promise<ExitInfo>;
  /** Sends `signal` and returns at once (SIGSTOP, SIGCONT, …). */
  signal(signal: NodeJS.Signals): void;
  /** Sends `signal` and waits for the exit. */
  kill(signal: NodeJS.Signals, timeoutMs?: number): Promise<ExitInfo>;
  /** The tail of stdout and stderr, for assertion messages. */
  describe(): string;
}

const running = new Set<HeraldProcess>();

// Variables a test run may carry that must not leak into a child: the outer database, herald's own
// settings, and node:test's marker (which would make the child behave like a test file).
const DROPPED = /^(DATABASE_URL|HERALD_.*|PORT|HOST|LOG_LEVEL|NODE_TEST_CONTEXT)$/;

export function childEnv(env: Record<string, string>): NodeJS.ProcessEnv {
  const base: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) if (!DROPPED.test(key)) base[key] = value;
  return { ...base, ...env };
}

function matches(record: LogRecord, msg: string | RegExp): boolean {
  if (typeof record.msg !== 'string') return false;
  return typeof msg === 'string' ? record.msg === msg : msg.test(record.msg);
}

/** Starts `node src/cli.ts ...args` with exactly `env` (plus the harmless parts of ours). */
export function spawnHerald(
  args: string[],
  env: Record<string, string>,
  name = args.join(' '),
): HeraldProcess {
  const child = spawn(process.execPath, [CLI_PATH, ...args], {
    env: childEnv(env),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  let partial = '';
  const logs: LogRecord[] = [];
  let exitInfo: ExitInfo | null = null;

  child.stdout!.setEncoding('utf8');
  child.stderr!.setEncoding('utf8');
  child.stdout!.on('data', (chunk: string) => {
    stdout += chunk;
    partial += chunk;
    const lines = partial.split('\n');
    partial = lines.pop() ?? '';
    for (const line of lines) {
      if (!line.startsWith('{')) continue;
      try {
        logs.push(JSON.parse(line) as LogRecord);
      } catch {
        // Not a log record (e.g. a printed key); it stays in `stdout`.
      }
    }
  });
  child.stderr!.on('data', (chunk: string) => {
    stderr += chunk;
  });

  const proc: HeraldProcess = {
    name,
    child,
    pid: child.pid ?? -1,
    get stdout() {
      return stdout;
    },
    get stderr() {
      return stderr;
    },
    logs,
    get exitInfo() {
      return exitInfo;
    },
    async waitForLog(msg, timeoutMs = 30_000) {
      const found = await waitFor(
        `${name} to log "${msg}"`,
        () => logs.find((r) => matches(r, msg)) ?? (exitInfo ? ({ exited: true } as LogRecord) : undefined),
        timeoutMs,
      );
      if (found['exited'] === true) {
        throw new Error(
          `${name} exited (${JSON.stringify(exitInfo)}) before logging "${msg}"\n${proc.describe()}`,
        );
      }
      return found;
    },
    waitForExit(timeoutMs = 30_000) {
      return waitFor(`${name} to exit`, () => exitInfo, timeoutMs);
    },
    signal(signal) {
      if (!exitInfo) child.kill(signal);
    },
    async kill(signal, timeoutMs = 30_000) {
      if (!exitInfo) child.kill(signal);
      return proc.waitForExit(timeoutMs);
    },
    describe() {
      return `--- ${name} stdout (tail) ---\n${stdout.slice(-3000)}\n--- ${name} stderr (tail) ---\n${stderr.slice(-3000)}`;
    },
  };
  running.add(proc);
  // 'close' (not 'exit'): the pipes are drained by then, so stdout and logs are complete.
  child.on('close', (code, signal) => {
    exitInfo = { code, signal };
    running.delete(proc);
  });
  child.on('error', (error) => {
    stderr += `\n[spawn error] ${error.message}`;
  });
  return proc;
}

export interface StartedHerald {
  proc: HeraldProcess;
  /** The API's base URL as the process reported it, or null for a worker. */
  apiUrl: string | null;
}

/** Spawns a long-running role and waits until it logs "herald started". */
export async function startHerald(
  role: 'serve' | 'api' | 'worker',
  env: Record<string, string>,
  options: { name?: string | undefined; timeoutMs?: number | undefined } = {},
): Promise<StartedHerald> {
  const proc = spawnHerald([role], { LOG_LEVEL: 'info', ...env }, options.name ?? role);
  // A process that never said it started is killed, not left running past its test.
  const started = await proc
    .waitForLog('herald started', options.timeoutMs ?? 30_000)
    .catch(async (error) => {
      await proc.kill('SIGKILL', 5000).catch(() => {});
      throw error;
    });
  return { proc, apiUrl: typeof started['api'] === 'string' ? started['api'] : null };
}

/** Runs a short command (`keys create`, `migrate`, …) to its end. */
export async function runHerald(
  args: string[],
  env: Record<string, string>,
  timeoutMs = 60_000,
): Promise<ExitInfo & { stdout: string; stderr: string }> {
  const proc = spawnHerald(args, env);
  try {
    const exit = await proc.waitForExit(timeoutMs);
    return { ...exit, stdout: proc.stdout, stderr: proc.stderr };
  } finally {
    if (!proc.exitInfo) await proc.kill('SIGKILL', 5000).catch(() => {});
  }
}

/** SIGKILLs every process spawned here that is still running, and waits for them to go. */
export async function killAll(): Promise<void> {
  await Promise.all([...running].map((proc) => proc.kill('SIGKILL', 10_000).catch(() => {})));
}

/**
 * A port nobody listens on, for a process a test starts (and restarts) at one address. It is taken
 * below the kernel's range of ephemeral ports: a port from that range (bind to 0) can be taken, as
 * the source port of any outgoing connection on the machine, between one start and the next.
 */
export async function freePort(): Promise<number> {
  const ephemeralFrom = await readFile('/proc/sys/net/ipv4/ip_local_port_range', 'utf8')
    .then((range) => Number(range.trim().split(/\s+/)[0]))
    .catch(() => 32_768);
  for (;;) {
    const port = 10_000 + Math.floor(Math.random() * Math.max(1000, ephemeralFrom - 10_000));
    const server = net.createServer();
    const bound = await new Promise<boolean>((resolve) => {
      server.once('error', () => resolve(false));
      server.listen(port, '127.0.0.1', () => resolve(true));
    });
    if (!bound) continue;
    await new Promise<void>((resolve) => server.close(() => resolve()));
    return port;
  }
}
