// The herald fleet under test: two API processes and two worker processes, real `herald` CLI
// children (test/support/processes.ts) whose database connections go through the fault proxy.
// The fleet knows which exits it caused; any other exit is a crash, recorded and restarted.

import fs from 'node:fs';
import path from 'node:path';
import { freePort, type HeraldProcess, spawnHerald } from '../../test/support/processes.ts';
import { createJournal, type Journal, now, sleep } from './journal.ts';

export type Role = 'api' | 'worker';

export interface Member {
  readonly name: string;
  readonly role: Role;
  /** API listen port, kept across restarts so clients find it again. */
  readonly port: number | null;
  proc: HeraldProcess | null;
  generation: number;
  /** SIGSTOPped by the fault injector and not yet continued. */
  paused: boolean;
}

export interface ProcessEvent {
  t: number;
  name: string;
  generation: number;
  pid: number;
  event: 'started' | 'start-failed' | 'signal' | 'exited' | 'crashed';
  signal?: string | undefined;
  code?: number | null;
  detail?: string | undefined;
}

export interface Fleet {
  readonly members: readonly Member[];
  readonly apis: readonly Member[];
  readonly workers: readonly Member[];
  readonly apiUrls: readonly string[];
  readonly events: Journal<ProcessEvent>;
  start(): Promise<void>;
  /** SIGKILL, wait for the exit, then start again (waiting until it reports "herald started"). */
  killAndRestart(member: Member, downMs: number): Promise<void>;
  pause(member: Member): void;
  resume(member: Member): void;
  /** Continues paused members and restarts any that are down. */
  ensureAllRunning(): Promise<void>;
  /** SIGTERM everyone (SIGKILL after a grace period); no restarts from now on. */
  stopAll(): Promise<void>;
  /** Synchronous last resort for exit handlers. */
  killAllSync(): void;
}

const START_TIMEOUT_MS = 60_000;

export async function createFleet(options: {
  env: Record<string, string>;
  outDir: string;
  log: (msg: string) => void;
}): Promise<Fleet> {
  const events = createJournal<ProcessEvent>(options.outDir, 'processes');
  const members: Member[] = [];
  for (const [role, count] of [
    ['api', 2],
    ['worker', 2],
  ] as const) {
    for (let i = 1; i <= count; i++) {
      members.push({
        name: `${role}-${i}`,
        role,
        port: role === 'api' ? await freePort() : null,
        proc: null,
        generation: 0,
        paused: false,
      });
    }
  }
  /** Processes whose exit the soak caused (or allowed, during shutdown). */
  const expected = new WeakSet<HeraldProcess>();
  /** Processes that reported "herald started": only their unplanned exits are crashes. */
  const started = new WeakSet<HeraldProcess>();
  /** One operation at a time per member: a crash restart never races a fault. */
  const queues = new Map<Member, Promise<void>>();
  let stopping = false;

  const serial = (member: Member, op: () => Promise<void>): Promise<void> => {
    const next = (queues.get(member) ?? Promise.resolve()).then(op, op);
    queues.set(
      member,
      next.catch(() => {}),
    );
    return next;
  };

  const record = (
    member: Member,
    proc: HeraldProcess,
    event: Omit<ProcessEvent, 't' | 'name' | 'generation' | 'pid'>,
  ) => events.push({ t: now(), name: member.name, generation: member.generation, pid: proc.pid, ...event });

  function watch(member: Member, proc: HeraldProcess, generation: number): void {
    proc.child.once('close', (code, signal) => {
      const file = path.join(options.outDir, `proc-${member.name}-${generation}.log`);
      fs.writeFile(file, `${proc.stdout}\n--- stderr ---\n${proc.stderr}`, () => {});
      const crashed = started.has(proc) && !expected.has(proc);
      events.push({
        t: now(),
        name: member.name,
        generation,
        pid: proc.pid,
        event: crashed ? 'crashed' : 'exited',
        code,
        signal: signal ?? undefined,
        detail: crashed ? `${proc.stderr.slice(-1500)}\n${proc.stdout.slice(-1500)}` : undefined,
      });
      if (crashed && member.proc === proc && !stopping) {
        options.log(`${member.name} exited unexpectedly (code ${code}, signal ${signal}); restarting it`);
        member.proc = null;
        void serial(member, () => launch(member)).catch((error) =>
          options.log(`could not restart ${member.name}: ${(error as Error).message}`),
        );
      }
    });
  }

  async function launch(member: Member): Promise<void> {
    const deadline = now() + START_TIMEOUT_MS;
    for (;;) {
      if (stopping) return;
      member.generation++;
      const generation = member.generation;
      const env = { ...options.env, ...(member.port ? { PORT: String(member.port) } : {}) };
      const proc = spawnHerald([member.role], env, `${member.name}#${generation}`);
      member.proc = proc;
      member.paused = false;
      watch(member, proc, generation);
      try {
        await proc.waitForLog('herald started', Math.max(1000, deadline - now()));
        started.add(proc);
        record(member, proc, { event: 'started' });
        return;
      } catch (error) {
        // Typically the database is unreachable at that moment (a fault): try again shortly.
        expected.add(proc);
        record(member, proc, { event: 'start-failed', detail: (error as Error).message.slice(0, 500) });
        if (!proc.exitInfo) await proc.kill('SIGKILL', 10_000).catch(() => {});
        member.proc = null;
        if (now() > deadline) throw new Error(`${member.name} did not start: ${(error as Error).message}`);
        await sleep(500);
      }
    }
  }

  const running = (m: Member) => m.proc !== null && m.proc.exitInfo === null;

  return {
    members,
    apis: members.filter((m) => m.role === 'api'),
    workers: members.filter((m) => m.role === 'worker'),
    apiUrls: members.filter((m) => m.role === 'api').map((m) => `http://127.0.0.1:${m.port}`),
    events,
    async start() {
      await Promise.all(members.map((m) => serial(m, () => launch(m))));
    },
    killAndRestart(member, downMs) {
      return serial(member, async () => {
        const proc = member.proc;
        if (proc && !proc.exitInfo) {
          expected.add(proc);
          record(member, proc, { event: 'signal', signal: 'SIGKILL' });
          await proc.kill('SIGKILL', 15_000);
        }
        member.proc = null;
        member.paused = false;
        await sleep(downMs);
        await launch(member);
      });
    },
    pause(member) {
      const proc = member.proc;
      if (!proc || proc.exitInfo || member.paused) return;
      member.paused = true;
      record(member, proc, { event: 'signal', signal: 'SIGSTOP' });
      proc.signal('SIGSTOP');
    },
    resume(member) {
      const proc = member.proc;
      if (!proc || !member.paused) return;
      member.paused = false;
      record(member, proc, { event: 'signal', signal: 'SIGCONT' });
      proc.signal('SIGCONT');
    },
    async ensureAllRunning() {
      await Promise.all(
        members.map((m) =>
          serial(m, async () => {
            if (m.paused && m.proc) {
              m.paused = false;
              record(m, m.proc, { event: 'signal', signal: 'SIGCONT' });
              m.proc.signal('SIGCONT');
            }
            if (!running(m)) await launch(m);
          }),
        ),
      );
    },
    async stopAll() {
      stopping = true;
      await Promise.all(
        members.map(async (m) => {
          await queues.get(m);
          const proc = m.proc;
          if (!proc || proc.exitInfo) return;
          expected.add(proc);
          if (m.paused) proc.signal('SIGCONT');
          record(m, proc, { event: 'signal', signal: 'SIGTERM' });
          try {
            await proc.kill('SIGTERM', 20_000);
          } catch {
            record(m, proc, { event: 'signal', signal: 'SIGKILL', detail: 'no exit 20 s after SIGTERM' });
            await proc.kill('SIGKILL', 10_000).catch(() => {});
          }
        }),
      );
      await events.close();
    },
    killAllSync() {
      stopping = true;
      for (const m of members) {
        if (m.proc && !m.proc.exitInfo) {
          expected.add(m.proc);
          m.proc.child.kill('SIGKILL');
        }
      }
    },
  };
}
