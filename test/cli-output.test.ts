// What the CLI's listing commands print: a reader that stops reading (`| head`) ends a command
// quietly, its database closed; an empty listing says so in one line (stdout keeps only the
// answer, valid JSON with --json); a key restricted to some apps is listed with them; a command
// that sends nothing logs no warning meant for those that send.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, test } from 'node:test';
import { openEmbeddedDb } from '../src/db/pglite.ts';
import { freshDatabase } from './support/database.ts';
import { testEnv } from './support/herald.ts';
import { killAll, runHerald, spawnHerald } from './support/processes.ts';

after(killAll);

test('a reader that closes the pipe early ends the command quietly, its embedded database closed and unlocked', async () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'herald-epipe-'));
  try {
    const env = { HERALD_DATA_DIR: dataDir, LOG_LEVEL: 'silent' };
    const migrated = await runHerald(['migrate'], env);
    assert.equal(migrated.code, 0, migrated.stderr);
    // Far more report than a pipe holds (64 KiB): the command is still writing when the reader goes.
    const db = await openEmbeddedDb(dataDir);
    try {
      await db.query(`insert into app (uid, name) values ('shop', 'Shop')`);
      await db.query(
        `insert into message (app_id, event_type, payload, payload_expires_at)
         select (select id from app where uid = 'shop'), 'order.paid', '{}', now() + interval '30 days'
           from generate_series(1, 3000)`,
      );
    } finally {
      await db.close();
    }

    const reconcile = spawnHerald(['reconcile', '--since', '2000-01-01T00:00:00Z', '--json'], env);
    // As `| head -c 600` does: read the start, then close the pipe.
    reconcile.child.stdout!.once('data', () => reconcile.child.stdout!.destroy());
    const exit = await reconcile.waitForExit();
    assert.deepEqual(exit, { code: 0, signal: null }, reconcile.describe());
    assert.match(reconcile.stdout, /^\[\n {2}\{/, 'it had begun its report');
    assert.equal(reconcile.stderr, '', 'no error, no stack');
    assert.equal(fs.existsSync(path.join(dataDir, 'herald.lock')), false, 'the data dir is unlocked');
  } finally {
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
});

test('empty listings say so on stderr; stdout stays empty, or `[]` with --json', async () => {
  const database = await freshDatabase('cli_output_empty');
  try {
    const env = testEnv(database.url);
    const sources = await runHerald(['sources', 'list'], env);
    assert.equal(sources.code, 0, sources.stderr);
    assert.deepEqual([sources.stdout, sources.stderr], ['', 'no inbound sources\n']);
    const keys = await runHerald(['keys', 'list'], env);
    assert.equal(keys.code, 0, keys.stderr);
    assert.deepEqual([keys.stdout, keys.stderr], ['', 'no API keys\n']);

    const window = ['reconcile', '--since', '2026-11-01T00:00:00Z'];
    const all = await runHerald(window, env);
    assert.equal(all.code, 0, all.stderr);
    assert.deepEqual([all.stdout, all.stderr], ['', 'no messages in this window\n']);
    const unknown = await runHerald([...window, '--unknown-only'], env);
    assert.equal(unknown.code, 0, unknown.stderr);
    assert.deepEqual(
      [unknown.stdout, unknown.stderr],
      ['', 'no messages in this window with an outcome unknown or not recorded yet\n'],
    );
    const json = await runHerald([...window, '--unknown-only', '--json'], env);
    assert.equal(json.code, 0, json.stderr);
    assert.deepEqual([JSON.parse(json.stdout), json.stderr], [[], '']);
  } finally {
    await database.drop();
  }
});

test('herald keys list shows the apps a key is restricted to, by uid where it has one', async () => {
  const database = await freshDatabase('cli_output_keys');
  try {
    const env = testEnv(database.url);
    await database.db.query(`insert into app (uid, name) values ('acme', 'Acme'), (null, 'Billing')`);
    const billing = (await database.db.query<{ id: string }>(`select id from app where name = 'Billing'`))
      .rows[0]!.id;
    for (const args of [
      ['--scope', 'admin', '--name', 'ops'],
      ['--scope', 'publish', '--app', 'acme', '--app', billing, '--name', 'shop'],
    ]) {
      const created = await runHerald(['keys', 'create', ...args], env);
      assert.equal(created.code, 0, created.stderr);
    }
    const listed = await runHerald(['keys', 'list'], env);
    assert.equal(listed.code, 0, listed.stderr);
    const rows = listed.stdout
      .trim()
      .split('\n')
      .map((line) => line.split('\t').slice(2));
    assert.deepEqual(rows, [
      ['admin', 'all apps', 'ops', 'live'],
      ['publish', `apps acme,${billing}`, 'shop', 'live'],
    ]);
  } finally {
    await database.drop();
  }
});

test('a command that sends nothing does not warn of the private networks destinations may reach', async () => {
  const database = await freshDatabase('cli_output_quiet');
  try {
    // doctor from cron: a warning at every run would be noise an alert may count.
    const env = { ...testEnv(database.url), LOG_LEVEL: 'info' };
    const doctor = await runHerald(['doctor'], env);
    assert.equal(doctor.code, 0, doctor.stderr);
    assert.doesNotMatch(doctor.stderr, /private networks/);
    const keys = await runHerald(['keys', 'list'], env);
    assert.doesNotMatch(keys.stderr, /private networks/);
  } finally {
    await database.drop();
  }
});

test('a port in use, or a host that is no address here, stops start-up naming the setting, the embedded database closed and unlocked', async () => {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'herald-listen-'));
  const taken = net.createServer();
  await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
  try {
    const port = String((taken.address() as net.AddressInfo).port);
    const env = { HERALD_DATA_DIR: dataDir, LOG_LEVEL: 'silent', HOST: '127.0.0.1' };
    const inUse = await runHerald(['serve', '--port', port], env);
    assert.equal(inUse.code, 1, inUse.stderr);
    assert.equal(
      inUse.stderr,
      `herald: PORT (or --port): expected a port free to listen on at 127.0.0.1, got "${port}: in use, by another herald or program"\n`,
    );
    assert.equal(fs.existsSync(path.join(dataDir, 'herald.lock')), false, 'the data dir is unlocked');

    const noSuchHost = await runHerald(['serve', '--port', '0'], { ...env, HOST: '999.1.1.1' });
    assert.equal(noSuchHost.code, 1, noSuchHost.stderr);
    assert.match(
      noSuchHost.stderr,
      /^herald: HOST \(or --host\): expected an address of this machine to listen on, got "999\.1\.1\.1: [A-Z_]+"\n$/,
    );
    assert.equal(fs.existsSync(path.join(dataDir, 'herald.lock')), false, 'the data dir is unlocked');
  } finally {
    taken.close();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
});
