// Where a figure's cost goes: CPU time per operation of each process that took part (the worker,
// PostgreSQL, the receiver, the client), read from /proc. A throughput ratio says how herald
// compares; this says which process to look at. PostgreSQL's share is the sum over all of the
// server's processes, counted only when the server runs on this machine.

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

/** User + system CPU of a process so far, in µs; null once it is gone (or off Linux). */
export function processCpuMicros(pid: number): number | null {
  let stat: string;
  try {
    stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return null;
  }
  // The command name (field 2) may hold spaces: count fields after its closing parenthesis.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(fields[11]) + Number(fields[12]);
  return (ticks * 1_000_000) / CLOCK_TICKS_PER_SECOND;
}

function commandOf(pid: number): string | null {
  try {
    return fs.readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
  } catch {
    return null;
  }
}

/** The pids of every process named `postgres` on this machine. */
function postgresPids(): number[] {
  let entries: string[];
  try {
    entries = fs.readdirSync('/proc');
  } catch {
    return [];
  }
  return entries.filter((e) => /^\d+$/.test(e) && commandOf(Number(e)) === 'postgres').map(Number);
}

/** True when a backend of the server (by its pg_backend_pid()) is a process of this machine. */
export function isLocalPostgresBackend(pid: number): boolean {
  return commandOf(pid) === 'postgres';
}

export interface CpuMeter {
  /** CPU per operation of each process since the meter started. */
  stop(operations: number): CpuPerOperation;
}

/**
 * Starts metering the named processes, the server's processes as "PostgreSQL" when `postgres`,
 * and this process as `self` when given (without /proc, only `self`). A backend that starts in
 * the window counts whole; one that ends in it is lost (the pools of the bench and of herald keep
 * theirs open).
 */
export function meterCpu(
  named: Record<string, number>,
  options: { postgres: boolean; self?: string },
): CpuMeter {
  const processes = PROC_READABLE ? named : {};
  const postgres = PROC_READABLE && options.postgres;
  const before = new Map<number, number>();
  const read = (pid: number) => processCpuMicros(pid) ?? 0;
  for (const pid of Object.values(processes)) before.set(pid, read(pid));
  const serverBefore = new Map(postgres ? postgresPids().map((pid) => [pid, read(pid)]) : []);
  const selfBefore = process.cpuUsage();
  return {
    stop(operations) {
      const perOperation = (micros: number) => micros / Math.max(1, operations);
      const out: CpuPerOperation = {};
      for (const [name, pid] of Object.entries(processes)) {
        out[name] = perOperation(read(pid) - before.get(pid)!);
      }
      if (postgres) {
        let server = 0;
        for (const pid of postgresPids()) server += read(pid) - (serverBefore.get(pid) ?? 0);
        out.PostgreSQL = perOperation(server);
      }
      if (options.self) {
        const self = process.cpuUsage(selfBefore);
        out[options.self] = perOperation(self.user + self.system);
      }
      return out;
    },
  };
}
