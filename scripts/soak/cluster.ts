// A throwaway PostgreSQL cluster of the soak's own, so that it can be restarted as a fault:
// `initdb` into a temporary directory, `pg_ctl start` on a free port of 127.0.0.1, `pg_ctl restart
// -m fast` on demand, and everything removed at the end. PostgreSQL refuses to run as root, so
// when the soak runs as root the server binaries run as the `postgres` OS user (runuser).

import { execFile, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';

const run = promisify(execFile);
const OS_USER = 'postgres';

export interface PgCluster {
  /** postgres://postgres@127.0.0.1:<port>/herald, straight to the server (no proxy). */
  readonly url: string;
  readonly port: number;
  readonly baseDir: string;
  readonly restarts: number;
  /** `pg_ctl restart -m fast`: every connection is dropped, the server is back when it returns. */
  restart(): Promise<void>;
  /** Stops the server and removes its files (unless `keepFiles`). */
  stop(keepFiles?: boolean): Promise<void>;
  /** For process exit handlers: an immediate stop, synchronously. */
  stopSync(): void;
}

/** The newest /usr/lib/postgresql/<version>/bin holding initdb (or $PG_BIN). */
export function findPgBin(): string {
  const fromEnv = process.env['PG_BIN'];
  if (fromEnv) return fromEnv;
  const root = '/usr/lib/postgresql';
  const versions = fs.existsSync(root)
    ? fs
        .readdirSync(root)
        .filter((v) => fs.existsSync(path.join(root, v, 'bin', 'initdb')))
        .sort((a, b) => Number(b) - Number(a))
    : [];
  if (versions.length === 0) throw new Error(`no PostgreSQL server binaries under ${root} (set PG_BIN)`);
  return path.join(root, versions[0]!, 'bin');
}

const asRoot = () => process.getuid?.() === 0;

/** The command line that runs a server binary as the right user. */
function asServerUser(binary: string, args: string[]): [string, string[]] {
  return asRoot() ? ['runuser', ['-u', OS_USER, '--', binary, ...args]] : [binary, args];
}

async function runServerTool(binary: string, args: string[], timeoutMs = 120_000): Promise<string> {
  const [cmd, argv] = asServerUser(binary, args);
  try {
    const { stdout } = await run(cmd, argv, { timeout: timeoutMs, cwd: os.tmpdir() });
    return stdout;
  } catch (error) {
    const e = error as Error & { stderr?: string; stdout?: string };
    throw new Error(`${path.basename(binary)} ${args.join(' ')} failed: ${e.message}\n${e.stderr ?? ''}`);
  }
}

export async function startCluster(options: {
  port: number;
  log: (msg: string) => void;
}): Promise<PgCluster> {
  const bin = findPgBin();
  const baseDir = fs.mkdtempSync(path.join(os.tmpdir(), 'herald-soak-pg-'));
  if (asRoot()) await run('chown', [`${OS_USER}:`, baseDir]);
  const dataDir = path.join(baseDir, 'data');
  const logFile = path.join(baseDir, 'server.log');
  const pgCtl = path.join(bin, 'pg_ctl');
  options.log(`initdb ${dataDir} (${bin})`);
  await runServerTool(path.join(bin, 'initdb'), [
    '-D',
    dataDir,
    '-U',
    'postgres',
    '--auth=trust',
    '-E',
    'UTF8',
    '--no-sync',
    '--no-instructions',
  ]);
  const serverOptions = [
    `-p ${options.port}`,
    '-c listen_addresses=127.0.0.1',
    `-c unix_socket_directories=${baseDir}`,
    '-c fsync=off',
    '-c synchronous_commit=off',
    '-c full_page_writes=off',
    '-c max_connections=100',
    '-c shared_buffers=32MB',
  ].join(' ');
  await runServerTool(pgCtl, ['-D', dataDir, '-l', logFile, '-w', '-t', '60', '-o', serverOptions, 'start']);
  let stopped = false;
  const adminUrl = `postgres://postgres@127.0.0.1:${options.port}/postgres`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  try {
    await admin.query('create database herald');
  } finally {
    await admin.end();
  }
  let restarts = 0;
  return {
    url: `postgres://postgres@127.0.0.1:${options.port}/herald`,
    port: options.port,
    baseDir,
    get restarts() {
      return restarts;
    },
    async restart() {
      // restart reuses the options the server was started with (postmaster.opts).
      await runServerTool(pgCtl, ['-D', dataDir, '-l', logFile, '-m', 'fast', '-w', '-t', '60', 'restart']);
      restarts++;
    },
    async stop(keepFiles = false) {
      if (!stopped) {
        stopped = true;
        await runServerTool(pgCtl, ['-D', dataDir, '-m', 'fast', '-w', '-t', '30', 'stop']).catch(() =>
          runServerTool(pgCtl, ['-D', dataDir, '-m', 'immediate', '-w', 'stop']).catch(() => ''),
        );
      }
      if (!keepFiles) fs.rmSync(baseDir, { recursive: true, force: true });
    },
    stopSync() {
      if (stopped) return;
      stopped = true;
      const [cmd, argv] = asServerUser(pgCtl, ['-D', dataDir, '-m', 'immediate', '-w', 'stop']);
      spawnSync(cmd, argv, { stdio: 'ignore', timeout: 20_000 });
      fs.rmSync(baseDir, { recursive: true, force: true });
    },
  };
}
