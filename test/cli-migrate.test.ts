// Only `herald migrate` changes the schema: another command on a database that lacks migrations
// stops and says which, and `herald migrate` says what it applied; the commands take the options
// that do something in them.

import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import pg from 'pg';
import pino from 'pino';
import { loadConfig } from '../src/config.ts';
import { migrate, readMigrations } from '../src/db/migrate.ts';
import { createHerald, migrateDatabase, openDb } from '../src/herald.ts';
import { freshDatabase, SERVER_URL } from './support/database.ts';
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

test('herald migrate, and every other command, refuses a database where a number was applied under another name, and changes nothing', async () => {
  const last = readMigrations().at(-1)!;
  const old = await freshDatabase('cli_migrate_renamed', { upTo: last.version - 1 });
  try {
    // What a build from between two releases left: its own file under the number this build uses.
    await old.db.query(`insert into herald_migration (version, name) values ($1, 'another_change')`, [
      last.version,
    ]);
    const refused = await runHerald(['migrate'], testEnv(old.url));
    assert.notEqual(refused.code, 0, refused.stdout);
    assert.match(
      refused.stderr,
      new RegExp(`migration ${last.version} was applied as another_change, but this build's is ${last.name}`),
    );
    // Nor does another command go on over it.
    const listed = await runHerald(['keys', 'list'], testEnv(old.url));
    assert.notEqual(listed.code, 0, listed.stdout);
    assert.match(listed.stderr, new RegExp(`migration ${last.version} was applied as another_change`));
    const { rows } = await old.db.query<{ name: string }>(
      'select name from herald_migration where version = $1',
      [last.version],
    );
    assert.deepEqual(rows, [{ name: 'another_change' }]);
  } finally {
    await old.drop();
  }
});

test('commands that open no secret run without HERALD_MASTER_KEY; one that does, and a server, refuse, naming it', async () => {
  const fresh = await freshDatabase('cli_no_master_key', { upTo: 0 });
  try {
    const env = testEnv(fresh.url);
    delete env['HERALD_MASTER_KEY'];
    // A migration job and a probe need not carry the most sensitive secret.
    const migrated = await runHerald(['migrate'], env);
    assert.equal(migrated.code, 0, migrated.stderr);
    assert.match(migrated.stdout, /^applied migrations 1, 2, /);
    for (const args of [
      ['doctor'],
      ['keys', 'list'],
      ['sources', 'list'],
      ['reconcile', '--since', '2026-01-01T00:00:00Z'],
    ]) {
      const ran = await runHerald(args, env);
      assert.equal(ran.code, 0, `herald ${args.join(' ')}: ${ran.stderr}`);
    }
    const created = await runHerald(['keys', 'create', '--scope', 'read'], env);
    assert.equal(created.code, 0, created.stderr);
    assert.match(created.stdout, /^hk_/m);

    // Sealing a source's secret needs the key: refused before anything is stored.
    await fresh.db.query(`insert into app (uid, name) values ('shop', 'Shop')`);
    const createSource = [
      ...['sources', 'create', '--scheme', 'github', '--app', 'shop'],
      ...['--event-type', 'push', '--secret', 'gh-secret'],
    ];
    const refusedSource = await runHerald(createSource, env);
    assert.notEqual(refusedSource.code, 0, refusedSource.stdout);
    assert.match(refusedSource.stderr, /HERALD_MASTER_KEY/);
    const { rows } = await fresh.db.query<{ n: number }>('select count(*)::int as n from source');
    assert.equal(rows[0]!.n, 0);
    // A server signs and verifies: it does not start without the key.
    const worker = await runHerald(['worker'], env);
    assert.notEqual(worker.code, 0, worker.stdout);
    assert.match(worker.stderr, /HERALD_MASTER_KEY/);

    // Secrets sealed under the key; then a probe left with another one (the key of before a
    // rotation) still runs, as it would without any: it never opens a secret.
    const sealed = await runHerald(createSource, testEnv(fresh.url));
    assert.equal(sealed.code, 0, sealed.stderr);
    const stale = { ...env, HERALD_MASTER_KEY: crypto.randomBytes(32).toString('base64') };
    for (const args of [
      ['doctor'],
      ['keys', 'list'],
      ['sources', 'list'],
      ['reconcile', '--since', '2026-01-01T00:00:00Z'],
      ['replay', '--status', 'failed', '--cap', '10', '--dry-run'],
    ]) {
      const ran = await runHerald(args, stale);
      assert.equal(ran.code, 0, `herald ${args.join(' ')} with another key: ${ran.stderr}`);
    }
    // What does open secrets refuses that key, naming it.
    const refusedWorker = await runHerald(['worker'], stale);
    assert.notEqual(refusedWorker.code, 0, refusedWorker.stdout);
    assert.match(refusedWorker.stderr, /HERALD_MASTER_KEY: expected the key \(id [0-9a-f]{8}\)/);
  } finally {
    await fresh.drop();
  }
});

test('a database that cannot be reached is said with the setting that names it, and no password', async () => {
  // A port nothing listens on: bound, then closed.
  const closed = await new Promise<number>((resolve) => {
    const server = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
  const elsewhere = new URL(SERVER_URL);
  elsewhere.password = 'a-secret-password';
  elsewhere.port = String(closed);
  const missing = new URL(SERVER_URL);
  missing.pathname = '/herald_no_such_database';
  for (const [url, why] of [
    [elsewhere, /ECONNREFUSED/],
    [missing, /database "herald_no_such_database" does not exist/],
  ] as const) {
    for (const args of [['doctor'], ['keys', 'list'], ['migrate'], ['worker']]) {
      const ran = await runHerald(args, testEnv(url.href));
      assert.equal(ran.code, 1, `herald ${args.join(' ')}: ${ran.stdout}`);
      assert.match(ran.stderr, /^herald: DATABASE_URL: could not connect \(/, `herald ${args.join(' ')}`);
      assert.match(ran.stderr, why);
      assert.doesNotMatch(ran.stderr, /a-secret-password|\n\s+at /);
    }
  }
});

test('a migration that outlasts the pool’s query deadline is applied, not given up and rolled back', async () => {
  const empty = await freshDatabase('cli_migrate_slow', { upTo: 0 });
  try {
    const config = loadConfig(testEnv(empty.url, { HERALD_DB_QUERY_TIMEOUT_MS: '1000' }));
    const slow = (version: number) => [
      { version, name: `slow_${version}`, sql: 'select pg_sleep(1.5); create table slow_done (n int)' },
    ];
    // What the pool would do with it: give the connection up after its deadline, the work undone.
    const pool = await openDb(config, pino({ level: 'silent' }));
    try {
      await assert.rejects(migrate(pool, slow(1)), /timeout/i);
    } finally {
      await pool.close();
    }
    assert.deepEqual(await migrateDatabase(config, slow(1)), [1]);
    const done = await empty.db.query(`select 1 from pg_tables where tablename = 'slow_done'`);
    assert.equal(done.rowCount, 1);
  } finally {
    await empty.drop();
  }
});

test('a server statement_timeout set for the database does not cancel a migration; one the database refuses is named, with its hint', async () => {
  const empty = await freshDatabase('cli_migrate_server_timeout', { upTo: 0 });
  try {
    const name = new URL(empty.url).pathname.slice(1);
    // As an operator may set it for herald's role or database (README: HERALD_DB_QUERY_TIMEOUT_MS).
    await empty.db.query(`alter database ${name} set statement_timeout = '500ms'`);
    const config = loadConfig(testEnv(empty.url));
    const slow = [{ version: 1, name: 'slow_1', sql: 'select pg_sleep(1); create table slow_done (n int)' }];
    assert.deepEqual(await migrateDatabase(config, slow), [1]);
    const refusing = [
      ...slow,
      {
        version: 2,
        name: 'refused',
        sql: "do $$ begin raise exception 'rows stand in the way' using hint = 'remove them, then migrate again'; end $$",
      },
    ];
    await assert.rejects(
      migrateDatabase(config, refusing),
      /^Error: migration 0002_refused failed and was rolled back, nothing of it applied: rows stand in the way \(remove them, then migrate again\)$/,
    );
  } finally {
    await empty.drop();
  }
});

test('herald migrate makes the embedded database in a directory that has none', async () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'herald-migrate-'));
  try {
    const env = { HERALD_DATA_DIR: path.join(dataDir, 'new'), LOG_LEVEL: 'silent' };
    const migrated = await runHerald(['migrate'], env);
    assert.equal(migrated.code, 0, migrated.stderr);
    assert.match(migrated.stdout, /^applied migrations 1, 2, /);
    // The read-only commands find it there now.
    const listed = await runHerald(['keys', 'list'], env);
    assert.equal(listed.code, 0, listed.stderr);
  } finally {
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
});

test('herald worker refuses --port, which would listen nowhere, naming it; serve and api take it', async () => {
  const refused = await runHerald(['worker', '--port', '9100'], testEnv('postgres://127.0.0.1:1/none'));
  assert.equal(refused.code, 1);
  assert.match(refused.stderr, /unknown option '--port'/);
  for (const role of ['serve', 'api']) {
    const help = await runHerald([role, '--help'], {});
    assert.match(help.stdout, /-p, --port <port>/, role);
  }
});

test('a server whose role may use herald’s tables but create none starts on a migrated database: migrations are another role’s', async () => {
  const database = await freshDatabase('cli_migrate_role');
  const role = `herald_rw_${process.pid}`;
  const admin = new pg.Client({ connectionString: SERVER_URL });
  await admin.connect();
  try {
    await admin.query(`create role ${role} login`);
    // What a deployment gives the servers' role when `herald migrate` runs as the owner.
    await database.db.query(`grant usage on schema public to ${role}`);
    await database.db.query(`grant select, insert, update, delete on all tables in schema public to ${role}`);
    await database.db.query(`grant usage, select on all sequences in schema public to ${role}`);
    await database.db.query(`grant execute on all functions in schema public to ${role}`);
    const url = new URL(database.url);
    url.username = role;
    const config = loadConfig(testEnv(url.toString()));
    const herald = await createHerald({ config, logger: pino({ level: 'silent' }) });
    try {
      const { rows } = await herald.core.db.query<{ n: number }>(
        'select count(*)::int as n from herald_migration',
      );
      assert.equal(
        rows[0]!.n,
        readMigrations().length,
        'the database was migrated already, and is as it was',
      );
      // And it may run herald's functions, with the settings they carry (a claim finds nothing here).
      const claimed = await herald.core.db.query(`select * from herald_claim(1, interval '1 minute', '')`);
      assert.equal(claimed.rows.length, 0);
    } finally {
      await herald.close();
    }
  } finally {
    await database.drop();
    await admin.query(`drop role if exists ${role}`);
    await admin.end();
  }
});

test('processes that start together apply each pending migration once: one applies it, the others find it applied', async () => {
  const versions = readMigrations().map((m) => m.version);
  const behind = versions.slice(-3);
  const old = await freshDatabase('cli_migrate_together', { upTo: behind[0]! - 1 });
  try {
    const config = loadConfig(testEnv(old.url));
    // Each reads the same three pending before any lock; the lock and the check under it decide.
    const applied = await Promise.all(Array.from({ length: 4 }, () => migrateDatabase(config)));
    assert.deepEqual(
      applied.flat().sort((a, b) => a - b),
      behind,
      JSON.stringify(applied),
    );
    const { rows } = await old.db.query<{ n: number }>('select count(*)::int as n from herald_migration');
    assert.equal(rows[0]!.n, versions.length);
  } finally {
    await old.drop();
  }
});
