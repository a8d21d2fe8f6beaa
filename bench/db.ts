// Scratch databases: `herald_bench_<random>` created on the server, migrated with herald's own
// runner, and dropped (with force) when the run ends, whatever happened.

import crypto from 'node:crypto';
import pg from 'pg';
import { migrate } from '../src/db/migrate.ts';
import { createPgDb } from '../src/db/pg-pool.ts';
import { localPostmasterOf } from './cpu.ts';

export interface ScratchDatabase {
  name: string;
  url: string;
  drop(): Promise<void>;
}

export function urlFor(serverUrl: string, database: string): string {
  const url = new URL(serverUrl);
  url.pathname = `/${database}`;
  return url.toString();
}

export async function withClient<T>(url: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

const created = new Set<ScratchDatabase>();

export async function createScratchDatabase(serverUrl: string, label: string): Promise<ScratchDatabase> {
  const name = `herald_bench_${crypto.randomBytes(4).toString('hex')}_${label}`;
  await withClient(serverUrl, (admin) => admin.query(`create database ${name}`));
  const url = urlFor(serverUrl, name);
  const scratch: ScratchDatabase = {
    name,
    url,
    async drop() {
      created.delete(scratch);
      await withClient(serverUrl, (admin) => admin.query(`drop database if exists ${name} with (force)`));
    },
  };
  created.add(scratch);
  const db = createPgDb({ connectionString: url, max: 1 });
  try {
    await migrate(db);
  } finally {
    await db.close();
  }
  return scratch;
}

/** Drops every scratch database this process created and has not dropped yet. */
export async function dropAllScratch(): Promise<void> {
  for (const scratch of [...created]) {
    await scratch
      .drop()
      .catch((error: Error) => console.error(`could not drop ${scratch.name}: ${error.message}`));
  }
}

export interface ServerInfo {
  version: string;
  maxConnections: number;
  connectionsInUse: number;
  synchronousCommit: string;
  /** The server's postmaster when it runs on this machine (its CPU can be read), else null. */
  postmasterPid: number | null;
}

export async function serverInfo(serverUrl: string): Promise<ServerInfo> {
  return withClient(serverUrl, async (client) => {
    const row = (
      await client.query<{ version: string; max: string; used: string; sync: string; pid: number }>(
        `select current_setting('server_version') as version, current_setting('max_connections') as max,
                (select count(*) from pg_stat_activity)::text as used, current_setting('synchronous_commit') as sync,
                pg_backend_pid() as pid`,
      )
    ).rows[0]!;
    return {
      version: row.version,
      maxConnections: Number(row.max),
      connectionsInUse: Number(row.used),
      synchronousCommit: row.sync,
      // While this connection is open its backend is alive to be looked for.
      postmasterPid: localPostmasterOf(row.pid),
    };
  });
}

/** pg_total_relation_size of each table, in bytes. */
export async function tableSizes(url: string, tables: readonly string[]): Promise<Record<string, number>> {
  return withClient(url, async (client) => {
    const sizes: Record<string, number> = {};
    for (const table of tables) {
      const result = await client.query<{ size: string }>(
        'select pg_total_relation_size($1::regclass) as size',
        [table],
      );
      sizes[table] = Number(result.rows[0]!.size);
    }
    return sizes;
  });
}

/**
 * Flushes the server's dirty pages now (CHECKPOINT), so that a checkpoint brought on by an earlier
 * scenario's writes does not land in the next window: its final fsyncs stall every commit for a
 * moment, which a latency run at a moderate rate counts against whichever system it measures.
 * CHECKPOINT needs a superuser or pg_checkpoint; without either the run goes on, and says so.
 */
export async function checkpoint(url: string, notes: string[], before = 'a latency run'): Promise<void> {
  await withClient(url, (client) => client.query('checkpoint')).catch((error: Error) => {
    notes.push(`could not CHECKPOINT before ${before} (${error.message}): a checkpoint may land in it`);
  });
}

/**
 * VACUUM the database, then CHECKPOINT: each measured run (a half of an interleaved pair, an end
 * to end or latency run) starts on the same footing, whatever the one before it left. Every peer
 * run adds and deletes 100,000 jobs. Where autovacuum is off (this project's VM) nothing else
 * clears their dead rows: without this, the peer's throughput fell pair after pair (4,938, 4,600
 * and 4,166 jobs/s in one run) while herald's, whose workers vacuum its queue table themselves,
 * did not. Where it is on, it would clear them in the middle of the next run, whichever side's.
 */
export async function settle(url: string, notes: string[]): Promise<void> {
  await withClient(url, (client) => client.query('vacuum')).catch((error: Error) => {
    notes.push(`could not VACUUM before a measured run (${error.message})`);
  });
  await checkpoint(url, notes, 'a measured run');
}
