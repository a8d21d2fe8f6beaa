// The embedded database's data directory is one process's at a time (src/db/pglite.ts): a lock
// file holds its owner's pid and host name. A live owner's lock refuses another opener; a dead
// owner's is taken over — also when the dead owner had this process's pid, as a restarted
// container's pid 1 does. A lock taken on another host (a container on a shared volume, pid 1
// too) is held: its owner cannot be checked from here. Within this process, a directory opened
// and not closed refuses a second opener. A stale lock is removed by one opener at a time, under
// a takeover file: two removing it at once could remove the lock one of them had just taken.

import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { DataDirBusyError, lockDataDir, openEmbeddedDb, startMarkOf } from '../src/db/pglite.ts';

/** What this process writes in its lock. */
const OWN_LOCK = `${process.pid} ${os.hostname()} ${startMarkOf(process.pid)}`;

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
    assert.equal(fs.readFileSync(lockFile, 'utf8'), OWN_LOCK);
    unlock();
  });
});

test("a live process's lock whose start mark is not that process's is a dead holder's: its pid was given again", () => {
  withDir((dir, lockFile) => {
    const live = process.ppid;
    const mark = startMarkOf(live);
    assert.ok(mark, 'this host tells processes apart by their start (/proc)');
    // The holder that wrote this mark is the live process: refused, naming the file to remove.
    fs.writeFileSync(lockFile, `${live} ${os.hostname()} ${mark}`);
    assert.throws(
      () => lockDataDir(dir),
      (error: Error) => {
        assert.ok(error instanceof DataDirBusyError);
        assert.match(error.message, new RegExp(`pid ${live}\\); if that process is not herald, remove`));
        assert.ok(error.message.includes(lockFile));
        return true;
      },
    );
    // The same pid with another start (before a reboot, or before the pids wrapped): taken over.
    const [boot, startedAt] = mark.split('/');
    for (const stale of [`${boot}/${Number(startedAt) - 1}`, `another-boot/${startedAt}`]) {
      fs.writeFileSync(lockFile, `${live} ${os.hostname()} ${stale}`);
      const unlock = lockDataDir(dir);
      assert.equal(fs.readFileSync(lockFile, 'utf8'), OWN_LOCK);
      unlock();
    }
  });
});

test('a lock taken on another host refuses, whatever its pid, and says how to clear it', () => {
  withDir((dir, lockFile) => {
    // This process's own pid, as another container's herald (pid 1 in its own namespace) would have.
    fs.writeFileSync(lockFile, `${process.pid} other-container-7f3a`);
    assert.throws(
      () => lockDataDir(dir),
      (error: Error) => {
        assert.ok(error instanceof DataDirBusyError);
        assert.match(error.message, /host other-container-7f3a/);
        assert.ok(error.message.includes(lockFile), 'names the file to remove');
        return true;
      },
    );
    assert.equal(fs.readFileSync(lockFile, 'utf8'), `${process.pid} other-container-7f3a`, 'left as it was');
  });
});

test('the lock names its host; one written without a host is taken as this host’s', () => {
  withDir((dir, lockFile) => {
    const unlock = lockDataDir(dir);
    assert.equal(fs.readFileSync(lockFile, 'utf8'), OWN_LOCK);
    unlock();
    fs.writeFileSync(lockFile, String(process.ppid));
    assert.throws(() => lockDataDir(dir), DataDirBusyError);
  });
});

test('a second opener in this process is refused while the first holds the directory; a second unlock frees nothing', () => {
  withDir((dir, lockFile) => {
    const unlock = lockDataDir(dir);
    assert.throws(
      () => lockDataDir(path.join(dir, '.')),
      (error: Error) => error instanceof DataDirBusyError && /this process already/.test(error.message),
    );
    unlock();
    const again = lockDataDir(dir);
    unlock();
    assert.ok(fs.existsSync(lockFile), "the first opener's second unlock leaves the new holder's lock");
    again();
    assert.equal(fs.existsSync(lockFile), false);
  });
});

test('a stale lock is removed by one opener at a time: while another takes it over, it stays', () => {
  withDir((dir, lockFile) => {
    const stale = String(spawnSync(process.execPath, ['-e', '0']).pid!);
    const takeover = `${lockFile}.takeover`;
    fs.writeFileSync(lockFile, stale);
    // Another opener (alive: the test runner) is removing the stale lock right now.
    fs.writeFileSync(takeover, `${process.ppid} ${os.hostname()}`);
    assert.throws(() => lockDataDir(dir), DataDirBusyError);
    assert.equal(
      fs.readFileSync(lockFile, 'utf8'),
      stale,
      'the stale lock is left to the opener taking it over',
    );

    fs.rmSync(takeover);
    const unlock = lockDataDir(dir);
    assert.equal(fs.readFileSync(lockFile, 'utf8'), OWN_LOCK);
    assert.equal(fs.existsSync(takeover), false, 'the takeover is let go once the stale lock is removed');
    unlock();
  });
});

test('a takeover left by an opener that died refuses, and says which file to remove', () => {
  withDir((dir, lockFile) => {
    const dead = spawnSync(process.execPath, ['-e', '0']).pid!;
    const takeover = `${lockFile}.takeover`;
    fs.writeFileSync(lockFile, String(dead));
    fs.writeFileSync(takeover, `${dead} ${os.hostname()}`);
    assert.throws(
      () => lockDataDir(dir),
      (error: Error) => error instanceof DataDirBusyError && error.message.includes(takeover),
    );
    assert.equal(fs.readFileSync(lockFile, 'utf8'), String(dead), 'left as it was');
    assert.ok(fs.existsSync(takeover), 'left for whoever knows no other herald is starting');
  });
});

test('an embedded database that cannot start says where it is and what to look at, and leaves the directory unlocked', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'herald-damaged-'));
  try {
    await (await openEmbeddedDb(dir)).close();
    // Its control file lost (a disk that filled, a copy cut short): PGlite only says "Aborted()".
    fs.writeFileSync(path.join(dir, 'pgdata', 'global', 'pg_control'), '');
    await assert.rejects(openEmbeddedDb(dir), (error: Error) => {
      assert.ok(
        error.message.startsWith(`the embedded database in ${dir} could not start (Aborted(`),
        error.message,
      );
      assert.match(error.message, /free space .* intact, readable and writable$/);
      return true;
    });
    lockDataDir(dir)();
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
