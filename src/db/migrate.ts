// Forward-only numbered migrations (`migrations/NNNN_name.sql`). Each file runs in its own
// transaction under a transaction-scoped advisory lock, so concurrent starters apply each file
// exactly once and a failed file leaves nothing half-applied.

import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Db, Queryable } from './port.ts';

export const MIGRATIONS_DIR = fileURLToPath(new URL('../../migrations/', import.meta.url));

/** Arbitrary constant shared by every herald process: the key of the migration lock. */
const MIGRATION_LOCK_KEY = 727_100_1;

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

export function readMigrations(dir: string = MIGRATIONS_DIR): Migration[] {
  return fs
    .readdirSync(dir)
    .filter((file) => /^\d{4}_[a-z0-9_]+\.sql$/.test(file))
    .sort()
    .map((file) => ({
      version: Number(file.slice(0, 4)),
      name: file.slice(5, -4),
      sql: fs.readFileSync(`${dir}/${file}`, 'utf8'),
    }));
}

export interface MigrationState {
  applied: number[];
  pending: number[];
}

export async function migrationState(db: Queryable, migrations = readMigrations()): Promise<MigrationState> {
  const exists = await db.query<{ present: boolean }>(
    `select to_regclass('herald_migration') is not null as present`,
  );
  const recorded = exists.rows[0]?.present
    ? (await db.query<{ version: number; name: string }>('select version, name from herald_migration')).rows
    : [];
  for (const migration of migrations)
    assertSameMigration(migration, recorded.find((r) => r.version === migration.version)?.name);
  const applied = recorded.map((r) => r.version).sort((a, b) => a - b);
  return { applied, pending: migrations.map((m) => m.version).filter((v) => !applied.includes(v)) };
}

/**
 * Another file recorded under this number (a build from between two releases): its changes are
 * not this file's, and what comes after it would build on what is not there.
 */
function assertSameMigration(migration: Migration, recorded: string | undefined): void {
  if (recorded !== undefined && recorded !== migration.name) {
    throw new Error(
      `migration ${migration.version} was applied as ${recorded}, but this build's is ${migration.name}: ` +
        'the database was migrated by another build; restore it from before that migration',
    );
  }
}

/** Applies every pending migration; returns the versions this call applied. */
export async function migrate(db: Db, migrations = readMigrations()): Promise<number[]> {
  const done: number[] = [];
  for (const migration of migrations) {
    const applied = await db.transaction(async (tx) => {
      await tx.query('select pg_advisory_xact_lock($1)', [MIGRATION_LOCK_KEY]);
      await tx.query(`create table if not exists herald_migration (
        version int primary key, name text not null, applied_at timestamptz not null default now())`);
      const seen = await tx.query<{ name: string }>('select name from herald_migration where version = $1', [
        migration.version,
      ]);
      const recorded = seen.rows[0]?.name;
      assertSameMigration(migration, recorded);
      if (recorded !== undefined) return false;
      await tx.script(migration.sql);
      await tx.query('insert into herald_migration (version, name) values ($1, $2)', [
        migration.version,
        migration.name,
      ]);
      return true;
    });
    if (applied) done.push(migration.version);
  }
  return done;
}
