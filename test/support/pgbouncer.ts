// A real PgBouncer in transaction mode in front of the test server, for the tests of herald
// behind a pooler. PgBouncer comes from Debian's package (.ci/run installs it); it refuses to run
// as root, so as root it is started as the postgres user.

import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chown, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { freePort } from './processes.ts';
import { waitFor } from './wait.ts';

const BINARY = ['/usr/sbin/pgbouncer', '/usr/bin/pgbouncer'].find((path) => existsSync(path));

/** Why the pooler tests cannot run here, or null when they can. */
export const pgbouncerMissing = BINARY ? null : 'pgbouncer is not installed (apt-get install pgbouncer)';

export interface PgBouncer {
  /** `url` (a URL of the test server) as reached through the pooler. */
  through(url: string): string;
  close(): Promise<void>;
}

/** Whether this PgBouncer knows max_prepared_statements (1.21 and later). */
function keepsNamedStatements(binary: string): boolean {
  const version = /PgBouncer (\d+)\.(\d+)/.exec(execFileSync(binary, ['--version']).toString());
  if (!version) throw new Error('pgbouncer --version printed no version');
  const [major, minor] = [Number(version[1]), Number(version[2])];
  return major > 1 || (major === 1 && minor >= 21);
}

/**
 * Starts PgBouncer in transaction mode with `serverConnections` server connections per database,
 * fewer than herald's clients, so that a session is lent from client to client between
 * transactions as in production.
 */
export async function startPgBouncer(serverConnections = 4): Promise<PgBouncer> {
  if (!BINARY) throw new Error(pgbouncerMissing ?? 'pgbouncer is not installed');
  const dir = await mkdtemp(join(tmpdir(), 'herald-pgbouncer-'));
  const port = await freePort();
  const config = join(dir, 'pgbouncer.ini');
  await writeFile(join(dir, 'userlist.txt'), '"postgres" ""\n');
  await writeFile(
    config,
    [
      '[databases]',
      '* = host=127.0.0.1 port=5432',
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = trust',
      `auth_file = ${join(dir, 'userlist.txt')}`,
      'pool_mode = transaction',
      `default_pool_size = ${serverConnections}`,
      'max_client_conn = 500',
      'ignore_startup_parameters = extra_float_digits,options',
      // From 1.21 PgBouncer can keep named statements (on by default from 1.24): off here, as in
      // the versions herald's HERALD_DB_PREPARE=false is for, whichever version runs the tests.
      ...(keepsNamedStatements(BINARY) ? ['max_prepared_statements = 0'] : []),
      '',
    ].join('\n'),
  );
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    const uid = Number(execFileSync('id', ['-u', 'postgres']).toString());
    const gid = Number(execFileSync('id', ['-g', 'postgres']).toString());
    for (const path of [dir, config, join(dir, 'userlist.txt')]) await chown(path, uid, gid);
  }
  const child: ChildProcess = spawn(BINARY, [...(asRoot ? ['-u', 'postgres'] : []), config], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let log = '';
  child.stderr?.on('data', (chunk: Buffer) => {
    log += chunk.toString();
  });
  const through = (url: string) => {
    const parsed = new URL(url);
    parsed.port = String(port);
    return parsed.toString();
  };
  try {
    await waitFor('pgbouncer to accept connections', async () => {
      if (child.exitCode !== null) throw new Error(`pgbouncer exited: ${log}`);
      const client = new pg.Client({ connectionString: `postgres://postgres@127.0.0.1:${port}/postgres` });
      try {
        await client.connect();
        await client.query('select 1');
        return true;
      } catch {
        return false;
      } finally {
        await client.end().catch(() => {});
      }
    });
  } catch (error) {
    child.kill('SIGKILL');
    throw error;
  }
  return {
    through,
    async close() {
      if (child.exitCode === null) {
        const exited = new Promise((resolve) => child.once('exit', resolve));
        child.kill('SIGINT');
        await exited;
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
}
