// Forward-only numbered migrations (`migrations/NNNN_name.sql`). Each file runs in its own
// transaction under a transaction-scoped advisory lock, so concurrent starters apply each file
// exactly once and a failed file leaves nothing half-applied.

import fs from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Db, Queryable } from './port.ts';
import { refusedStatementCode } from './server-error.ts';

export const MIGRATIONS_DIR = fileURLToPath(new URL('../../migrations/', import.meta.url));

/** Arbitrary constant shared by every herald process: the key of the migration lock. */
const MIGRATION_LOCK_KEY = 727_100_1;

export interface Migration {
  version: number;
  name: string;
  sql: string;
}

/**
 * The migrations of `dir`, in order. A `.sql` file named otherwise, two of one number, or a number
 * skipped is refused: one would never run, or two branches' files would each take a database its
 * own way.
 */
export function readMigrations(dir: string = MIGRATIONS_DIR): Migration[] {
  const files = fs
    .readdirSync(dir)
    .filter((file) => file.endsWith('.sql'))
    .sort();
  return files.map((file, at) => {
    if (!/^\d{4}_[a-z0-9_]+\.sql$/.test(file))
      throw new Error(`migration ${file}: expected a name like 0001_what_it_does.sql`);
    const version = Number(file.slice(0, 4));
    if (version !== at + 1)
      throw new Error(
        `migration ${file}: expected number ${String(at + 1).padStart(4, '0')} (no number twice, none skipped)`,
      );
    return { version, name: file.slice(5, -4), sql: fs.readFileSync(`${dir}/${file}`, 'utf8') };
  });
}

export interface MigrationState {
  applied: number[];
  pending: number[];
  /** Applied, and not among this build's: a newer build migrated the database. */
  ahead: number[];
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
  const known = new Set(migrations.map((m) => m.version));
  return {
    applied,
    pending: [...known].filter((v) => !applied.includes(v)),
    ahead: applied.filter((v) => !known.has(v)),
  };
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

/**
 * Applies every pending migration; returns the versions this call applied. A migration the
 * database refuses is named in the error, with the database's hint: it was rolled back whole.
 */
export async function migrate(db: Db, migrations = readMigrations()): Promise<number[]> {
  // Read first, writing nothing: a database with nothing pending is left alone, so a process whose
  // role may read and write herald's tables but not create any (migrations run by another role)
  // starts. What this read calls pending is applied under the lock, each checked again there.
  const { pending } = await migrationState(db, migrations);
  const done: number[] = [];
  for (const migration of migrations.filter((m) => pending.includes(m.version))) {
    const applied = await applyOnce(db, migration).catch((error: unknown) => {
      // The database refused it (a connection lost, or another build's migration, is not this one's).
      if (refusedStatementCode(error) === null) throw error;
      const { message, hint } = error as { message?: string; hint?: string };
      throw new Error(
        `migration ${String(migration.version).padStart(4, '0')}_${migration.name} failed and was rolled back, nothing of it ` +
          `applied: ${message ?? String(error)}${hint ? ` (${hint})` : ''}`,
        { cause: error },
      );
    });
    if (applied) done.push(migration.version);
  }
  return done;
}

/** Applies one migration unless it was (under the lock): whether this call applied it. */
function applyOnce(db: Db, migration: Migration): Promise<boolean> {
  return db.transaction(async (tx) => {
    // The server's own deadlines, where an operator set them for the role or the database, are
    // not a migration's: one building an index over a large table, or waiting for another
    // process's migration, must not be cancelled and rolled back at every try.
    await tx.query('set local statement_timeout = 0');
    await tx.query('set local lock_timeout = 0');
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
}
