// Where a figure's cost goes: CPU time per operation of each process that took part (the worker,
// PostgreSQL, the receiver, the client), read from /proc. A throughput ratio says how herald
// compares; this says which process to look at. PostgreSQL's share is its postmaster's and all of
// the postmaster's children's, counted only when the server runs on this machine.

import { execFileSync } from 'node:child_process';
import fs from 'node:fs';

/** CPU µs per operation, by process, in the order they were named. */
export type CpuPerOperation = Record<string, number>;

/** Other processes' CPU is read from /proc (Linux); elsewhere only this process's is known. */
const PROC_READABLE = fs.existsSync('/proc/self/stat');

const CLOCK_TICKS_PER_SECOND = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();

interface ProcStat {
  parent: number;
  /** User + system CPU so far, in µs. */
  cpuMicros: number;
  /** User + system CPU of the children it has reaped, in µs. */
  reapedChildrenMicros: number;
  /** When it started (in clock ticks since boot): a pid used again is another process. */
  startedAt: string;
}

function procStat(pid: number): ProcStat | null {
  let stat: string;
  try {
    stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  // The command name (field 2) may hold spaces: count the fields after its closing parenthesis,
  // from field 3 (state) on: parent 4, utime 14, stime 15, cutime 16, cstime 17, starttime 22.
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const micros = (ticks: number) => (ticks * 1_000_000) / CLOCK_TICKS_PER_SECOND;
  return {
    parent: Number(f[1]),
    cpuMicros: micros(Number(f[11]) + Number(f[12])),
    reapedChildrenMicros: micros(Number(f[13]) + Number(f[14])),
    startedAt: f[19]!,
  };
}

/** User + system CPU of a process so far, in µs; null once it is gone (or off Linux). */
export function processCpuMicros(pid: number): number | null {
  return procStat(pid)?.cpuMicros ?? null;
}

function commandOf(pid: number): string | null {
  try {
    return fs.readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
  } catch {
    return null;
  }
}

/**
 * The postmaster of a server backend (by its pg_backend_pid()) when both are `postgres` processes
 * of this machine; null when the server runs elsewhere (or its pids are not this machine's).
 */
export function localPostmasterOf(backendPid: number): number | null {
  const backend = commandOf(backendPid) === 'postgres' ? procStat(backendPid) : null;
  return backend && commandOf(backend.parent) === 'postgres' ? backend.parent : null;
}

/** The processes whose parent is `parent`, each with its reading. */
function childrenOf(parent: number): Map<number, ProcStat> {
  const children = new Map<number, ProcStat>();
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = procStat(Number(entry));
    if (stat?.parent === parent) children.set(Number(entry), stat);
  }
  return children;
}

/** A server's CPU so far: its postmaster's and every child's, alive or reaped. */
function serverReading(postmaster: number): { own: ProcStat; children: Map<number, ProcStat> } | null {
  const own = procStat(postmaster);
  return own && { own, children: childrenOf(postmaster) };
}

/**
 * The server's CPU between two readings. A child that ends in between is counted whole when the
 * postmaster reaps it (its CPU moves to the postmaster's reaped-children figure), so its share
 * before the window is taken off again; a child that starts in between counts whole.
 */
function serverCpuBetween(
  before: NonNullable<ReturnType<typeof serverReading>>,
  after: NonNullable<ReturnType<typeof serverReading>>,
): number {
  let micros =
    after.own.cpuMicros -
    before.own.cpuMicros +
    (after.own.reapedChildrenMicros - before.own.reapedChildrenMicros);
  for (const [pid, now] of after.children) {
    const then = before.children.get(pid);
    micros += now.cpuMicros - (then?.startedAt === now.startedAt ? then.cpuMicros : 0);
  }
  for (const [pid, then] of before.children) {
    if (after.children.get(pid)?.startedAt !== then.startedAt) micros -= then.cpuMicros;
  }
  return micros;
}

export interface CpuMeter {
  /**
   * CPU per operation of each process since the meter started; NaN for a named process that is
   * gone (or replaced) by then, or for no operations at all.
   */
  stop(operations: number): CpuPerOperation;
}

export interface MeterOptions {
  /** The local server's postmaster (localPostmasterOf): its CPU is reported as "PostgreSQL". */
  postmaster: number | null;
  /** This process's CPU, under this name. */
  self?: string;
}

/** Starts metering the named processes, the server and this process (without /proc, only this). */
export function meterCpu(named: Record<string, number>, options: MeterOptions): CpuMeter {
  const processes = PROC_READABLE ? named : {};
  const before = new Map(Object.values(processes).map((pid) => [pid, procStat(pid)]));
  const serverBefore =
    PROC_READABLE && options.postmaster !== null ? serverReading(options.postmaster) : null;
  const selfBefore = process.cpuUsage();
  return {
    stop(operations) {
      const perOperation = (micros: number) => (operations > 0 ? micros / operations : Number.NaN);
      const out: CpuPerOperation = {};
      for (const [name, pid] of Object.entries(processes)) {
        const then = before.get(pid);
        const now = procStat(pid);
        out[name] =
          then && now?.startedAt === then.startedAt
            ? perOperation(now.cpuMicros - then.cpuMicros)
            : Number.NaN;
      }
      const serverAfter = serverBefore && serverReading(options.postmaster!);
      if (serverBefore && serverAfter)
        out.PostgreSQL = perOperation(serverCpuBetween(serverBefore, serverAfter));
      if (options.self) {
        const self = process.cpuUsage(selfBefore);
        out[options.self] = perOperation(self.user + self.system);
      }
      return out;
    },
  };
}
