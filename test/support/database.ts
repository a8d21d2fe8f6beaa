// Every test file gets its own fresh database, cloned from a template that was migrated once.
// The template's name carries a digest of the migrations, so a changed migration makes a new one.

import crypto from 'node:crypto';
import pg from 'pg';
import { migrate, readMigrations } from '../../src/db/migrate.ts';
import { createPgDb } from '../../src/db/pg-pool.ts';
import type { Db } from '../../src/db/port.ts';

export const SERVER_URL = process.env['DATABASE_URL'] ?? 'postgres://postgres@127.0.0.1:5432/test';

function urlFor(database: string): string {
  const url = new URL(SERVER_URL);
  url.pathname = `/${database}`;
  return url.toString();
}

function templateName(): string {
  const digest = crypto.createHash('sha256');
  // The versions too: a migration renumbered with its text unchanged makes another database.
  for (const m of readMigrations()) digest.update(`${m.version}\n${m.sql}`);
  return `herald_tpl_${digest.digest('hex').slice(0, 12)}`;
}

async function withAdmin<T>(fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: SERVER_URL });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

async function ensureTemplate(): Promise<string> {
  const name = templateName();
  await withAdmin(async (admin) => {
    // Serialise template creation across test files running in parallel.
    await admin.query('select pg_advisory_lock(4242)');
    try {
      const exists = await admin.query('select 1 from pg_database where datname = $1', [name]);
      if (exists.rowCount) return;
      await admin.query(`create database ${name}`);
      const db = createPgDb({ connectionString: urlFor(name), max: 1 });
      try {
        await migrate(db);
      } finally {
        await db.close();
      }
      await admin.query(`alter database ${name} is_template true`);
    } finally {
      await admin.query('select pg_advisory_unlock(4242)');
    }
  });
  return name;
}

export interface TestDatabase {
  name: string;
  url: string;
  db: Db;
  drop(): Promise<void>;
}

/**
 * A fresh, migrated database for one test file; `drop` closes and removes it. `upTo`: migrated
 * only up to that version, as a database that a release before the latest left (an upgrade test
 * runs the rest with `migrate`). `settings`: parameters every session of the database starts
 * with (ALTER DATABASE … SET), such as herald.defer_horizon.
 */
export async function freshDatabase(
  label: string,
  options: { upTo?: number | undefined; settings?: Record<string, string> | undefined } = {},
): Promise<TestDatabase> {
  const name = `herald_t_${label.replace(/[^a-z0-9]/gi, '_').toLowerCase()}_${crypto.randomBytes(4).toString('hex')}`;
  const url = urlFor(name);
  const { upTo } = options;
  // A copy of the migrated template, or an empty database to migrate part of the way.
  const template = upTo === undefined ? ` template ${await ensureTemplate()}` : '';
  await withAdmin(async (admin) => {
    await admin.query(`create database ${name}${template}`);
    for (const [setting, value] of Object.entries(options.settings ?? {}))
      await admin.query(`alter database ${name} set ${setting} = ${admin.escapeLiteral(value)}`);
  });
  const db = createPgDb({ connectionString: url, max: 4 });
  if (upTo !== undefined)
    await migrate(
      db,
      readMigrations().filter((m) => m.version <= upTo),
    );
  return {
    name,
    url,
    db,
    async drop() {
      await db.close();
      await withAdmin((admin) => admin.query(`drop database if exists ${name} with (force)`));
    },
  };
}
