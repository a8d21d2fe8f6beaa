// Only `herald migrate` changes the schema: another command on a database that lacks migrations
// stops and says which, and `herald migrate` says what it applied.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { readMigrations } from '../src/db/migrate.ts';
import { freshDatabase } from './support/database.ts';
import { testEnv } from './support/herald.ts';
import { runHerald } from './support/processes.ts';

test('a command on a database behind its migrations refuses, naming them; herald migrate applies and names them', async () => {
  const versions = readMigrations().map((m) => m.version);
  const behind = versions.slice(-2);
  const old = await freshDatabase('cli_migrate', { upTo: behind[0]! - 1 });
  try {
    const env = testEnv(old.url);
    const refused = await runHerald(['keys', 'list'], env);
    assert.notEqual(refused.code, 0, refused.stdout);
    assert.match(refused.stderr, new RegExp(`lacks migrations ${behind.join(', ')}: run \`herald migrate\``));
    const { rows } = await old.db.query<{ n: number }>('select count(*)::int as n from herald_migration');
    assert.equal(rows[0]!.n, behind[0]! - 1, 'nothing was migrated by the refused command');

    const migrated = await runHerald(['migrate'], env);
    assert.equal(migrated.code, 0, migrated.stderr);
    assert.equal(migrated.stdout.trim(), `applied migrations ${behind.join(', ')}`);
    const again = await runHerald(['migrate'], env);
    assert.equal(again.stdout.trim(), 'migrations are up to date');
    const listed = await runHerald(['keys', 'list'], env);
    assert.equal(listed.code, 0, listed.stderr);
  } finally {
    await old.drop();
  }
});
