// The embedded database's data directory is one process's at a time (src/db/pglite.ts): a lock
// file holds its owner's pid. A live owner's lock refuses another opener; a dead owner's is
// taken over — also when the dead owner had this process's pid, as a restarted container's
// pid 1 does.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { DataDirBusyError, lockDataDir } from '../src/db/pglite.ts';

const withDir = (run: (dir: string, lockFile: string) => void) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'herald-lock-'));
  try {
    run(dir, path.join(dir, 'herald.lock'));
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
};

test("a live process's lock refuses; a dead one's, and one with this process's own pid, are taken over", () => {
  withDir((dir, lockFile) => {
    // Alive, and not this process: the test runner that started it.
    fs.writeFileSync(lockFile, String(process.ppid));
    assert.throws(() => lockDataDir(dir), DataDirBusyError);

    // A process that has exited.
    const dead = spawnSync(process.execPath, ['-e', '0']).pid!;
    fs.writeFileSync(lockFile, String(dead));
    lockDataDir(dir)();
    assert.equal(fs.existsSync(lockFile), false, 'unlocked again');

    // This process's own pid, left by a process that had it before (a container's pid 1).
    fs.writeFileSync(lockFile, String(process.pid));
    const unlock = lockDataDir(dir);
    assert.equal(fs.readFileSync(lockFile, 'utf8'), String(process.pid));
    unlock();
  });
});
