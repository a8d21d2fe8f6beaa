// The embedded adapter: PGlite (PostgreSQL in WebAssembly) in a data directory. It has a single
// connection, so one process owns the directory: `openEmbedded` takes an exclusive lock file.

import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { PGlite } from '@electric-sql/pglite';
import type { Db, Transaction } from './port.ts';
import { asQueryable } from './port.ts';

export class DataDirBusyError extends Error {}

const LOCK_FILE = 'herald.lock';
const PGDATA = 'pgdata';

/**
 * Refuses a data directory that holds no embedded database yet, for a command that only reads or
 * changes one (doctor, keys, replay, reconcile, sources): run in the wrong directory, it would
 * otherwise make a new empty database there, and a master key, and report on that.
 */
export function assertEmbeddedDatabase(dataDir: string): void {
  if (!fs.existsSync(path.join(dataDir, PGDATA))) {
    throw new Error(
      `no embedded database in ${path.resolve(dataDir)}: start herald there first (npm start), ` +
        'or point HERALD_DATA_DIR (or DATABASE_URL) at the database to use',
    );
  }
}

/**
 * The data directories this process holds, by real path. A second opener in this process (a second
 * createHerald on the directory, not closed; a development server's reload) finds a lock with its
 * own pid, which reads as a dead process's — two PGlite instances writing one directory would
 * corrupt it.
 */
const heldHere = new Set<string>();

/**
 * Takes the data directory's lock, or explains who holds it. The lock file appears with the
 * owner's pid and host name already in it (written aside, then hard-linked into place in one
 * step), so another opener never reads an empty lock; an unreadable or empty lock counts as held.
 */
export function lockDataDir(dataDir: string): () => void {
  fs.mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const held = fs.realpathSync(dataDir);
  if (heldHere.has(held)) throw busy(dataDir, 'this process already (a herald opened on it and not closed)');
  const lockPath = path.join(dataDir, LOCK_FILE);
  const staging = `${lockPath}.${process.pid}`;
  const mark = startMarkOf(process.pid);
  fs.writeFileSync(staging, `${process.pid} ${os.hostname()}${mark === null ? '' : ` ${mark}`}`, {
    mode: 0o600,
  });
  try {
    for (let tries = 0; tries < 3; tries++) {
      try {
        fs.linkSync(staging, lockPath);
        heldHere.add(held);
        let released = false;
        // Once only: a second call must not remove the lock of whoever took the directory since.
        return () => {
          if (released) return;
          released = true;
          heldHere.delete(held);
          fs.rmSync(lockPath, { force: true });
        };
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      }
      const holder = readHolder(lockPath);
      if (holder === null) throw busy(dataDir, 'another herald process');
      // A lock taken on another host (another container on a shared volume, where herald is pid 1
      // as well) cannot be checked from here: it is held until someone who knows removes it.
      if (holder.host !== os.hostname()) {
        throw busy(
          dataDir,
          `herald on host ${holder.host} (pid ${holder.pid}); if that process is gone, remove ${lockPath}`,
        );
      }
      if (!diedHere(holder)) {
        throw busy(
          dataDir,
          `another herald process (pid ${holder.pid}); if that process is not herald, remove ${lockPath}`,
        );
      }
      // The holder died without cleaning up: remove its lock, then try again.
      removeStaleLock(dataDir, lockPath, holder.text, staging);
    }
    throw new DataDirBusyError(`could not lock ${lockPath}`);
  } finally {
    fs.rmSync(staging, { force: true });
  }
}

/**
 * Removes a dead holder's lock, if it is still that same lock. One opener at a time, under a
 * second lock file: two openers that both judged the lock stale would otherwise each remove "it",
 * and the second could remove the lock the first had just put in its place, so that both opened
 * the database. Under the takeover, the stale lock cannot change between its reading and its
 * removal: nobody else removes it, and nobody can link a lock over it.
 */
function removeStaleLock(dataDir: string, lockPath: string, staleText: string, staging: string): void {
  const takeoverPath = `${lockPath}${TAKEOVER_SUFFIX}`;
  try {
    fs.linkSync(staging, takeoverPath);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    const taker = readHolder(takeoverPath);
    // Its taker died in the moment between taking it and letting it go: removing it would bring the
    // race back, so whoever knows that no other herald is starting removes it.
    if (taker !== null && diedHere(taker)) {
      throw busy(
        dataDir,
        `a herald that died taking over a stale lock; if none is starting, remove ${takeoverPath}`,
      );
    }
    // Another opener is taking over right now (a few microseconds): look again in a moment.
    Atomics.wait(PAUSE, 0, 0, TAKEOVER_PAUSE_MS);
    return;
  }
  try {
    if (readHolder(lockPath)?.text === staleText) fs.rmSync(lockPath, { force: true });
  } finally {
    fs.rmSync(takeoverPath, { force: true });
  }
}

const TAKEOVER_SUFFIX = '.takeover';
const TAKEOVER_PAUSE_MS = 20;
const PAUSE = new Int32Array(new SharedArrayBuffer(4));

const busy = (dataDir: string, holder: string) =>
  new DataDirBusyError(
    `the embedded database in ${dataDir} is in use by ${holder}. PGlite allows one process per ` +
      'data directory: use the running server’s API, stop it first, or set DATABASE_URL to share a ' +
      'PostgreSQL server.',
  );

interface Holder {
  pid: number;
  host: string;
  /** startMarkOf the holder as it took the lock; absent where there is none (or an older lock). */
  mark: string | undefined;
  text: string;
}

/**
 * The lock's owner: `pid host [mark]` (a lock written before host names were, `pid`, is this
 * host's; one written before marks were, or where there are none, has none).
 */
function readHolder(lockPath: string): Holder | null {
  try {
    const text = fs.readFileSync(lockPath, 'utf8');
    const [pidText, host = os.hostname(), mark] = text.split(' ');
    const pid = Number(pidText);
    return Number.isInteger(pid) && pid > 0 ? { pid, host, mark, text } : null;
  } catch {
    return null;
  }
}

/**
 * Whether a holder on this host is gone. One with this process's pid is a dead process's: in a
 * container herald is often pid 1 again after a crash, and that pid is alive — it is this one.
 * So is one whose pid another process has now (after a reboot, or the pids wrapped around): its
 * mark says when the holder started, and the live process started at another time.
 */
const diedHere = (holder: Holder): boolean =>
  holder.host === os.hostname() &&
  (holder.pid === process.pid ||
    !isAlive(holder.pid) ||
    (holder.mark !== undefined && startMarkOf(holder.pid) !== holder.mark));

/**
 * What tells a process from another that has its pid later: on Linux, the boot it runs in and the
 * clock tick it started at (/proc); null elsewhere, where a live pid counts as its holder's.
 */
export function startMarkOf(pid: number): string | null {
  try {
    const boot = fs.readFileSync('/proc/sys/kernel/random/boot_id', 'utf8').trim();
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Field 22 (starttime), counted after the command name, which is in parentheses and may hold
    // spaces: the fields after it begin with field 3.
    const startedAt = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[22 - 3];
    return startedAt ? `${boot}/${startedAt}` : null;
  } catch {
    return null;
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export async function openEmbeddedDb(dataDir: string): Promise<Db> {
  const unlock = lockDataDir(dataDir);
  let pglite: PGlite;
  try {
    pglite = await PGlite.create(path.join(dataDir, PGDATA));
  } catch (error) {
    unlock();
    // PGlite's WebAssembly stops with no more than this when its PostgreSQL cannot start.
    if (/^Aborted\(/.test((error as Error).message ?? '')) {
      throw new Error(
        `the embedded database in ${dataDir} could not start (${(error as Error).message}): ` +
          'check that its disk has free space and that its files are intact, readable and writable',
      );
    }
    throw error;
  }
  const queryable = asQueryable(pglite);
  return {
    kind: 'pglite',
    query: queryable.query,
    transaction<T>(fn: (tx: Transaction) => Promise<T>): Promise<T> {
      return pglite.transaction((tx) =>
        fn({ query: asQueryable(tx).query, script: async (sql) => void (await tx.exec(sql)) }),
      );
    },
    async listen(channel, onNotify) {
      const unlisten = await pglite.listen(channel, onNotify);
      return () => unlisten();
    },
    pipeline: () => ({ query: queryable.query, close: async () => {} }),
    async close() {
      try {
        await pglite.close();
      } finally {
        // Closed or not, this opener is done with it: held on, the lock would keep this process
        // out of the directory for good.
        unlock();
      }
    },
  };
}
