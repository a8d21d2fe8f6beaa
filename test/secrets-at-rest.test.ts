// Secrets at rest: sealed with AES-256-GCM under the master key, bound to their row, and
// re-encryptable under a new master key without downtime.

import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { Webhook } from 'svix';
import { loadConfig } from '../src/config.ts';
import { assertSecretsUnderKeys, loadMasterKey, loadMasterKeys } from '../src/crypto/master-key.ts';
import { openHeaders, type StoredHeaders } from '../src/crypto/sealed-headers.ts';
import { createSecretBox, keyIdOf, type SecretBox } from '../src/crypto/secret-box.ts';
import { insertCurrentSecret } from '../src/db/endpoint-secrets.ts';
import { findEndpoint } from '../src/db/endpoints.ts';
import { migrate } from '../src/db/migrate.ts';
import type { Db } from '../src/db/port.ts';
import { keepSubscriptionToken, subscriptionTokens } from '../src/db/sources.ts';
import { revealSecret } from '../src/engine/endpoints.ts';
import { reencryptSecrets } from '../src/ops/reencrypt.ts';
import { freshDatabase } from './support/database.ts';
import { createApp, createEndpoint, publishVia } from './support/fixtures.ts';
import { ADMIN_KEY, MASTER_KEY, startHeraldOn, startTestHerald, type TestHerald } from './support/herald.ts';
import { type Receiver, startReceiver } from './support/receiver.ts';
import { seedApp, seedEndpoint } from './support/seed.ts';
import { waitFor } from './support/wait.ts';

const SECRET = 'whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD';
let t: TestHerald;
let receiver: Receiver;

before(async () => {
  t = await startTestHerald('secrets');
  receiver = await startReceiver();
});
after(async () => {
  await t.close();
  await receiver.close();
});

test('the database holds no plaintext secret, and a ciphertext moved to another row does not open', async () => {
  const app = await createApp(t, 'vault');
  const ep = await createEndpoint(t, app, { url: `${receiver.url}/v`, secret: SECRET });
  const other = await createEndpoint(t, app, { url: `${receiver.url}/w` });
  const raw = Buffer.from(SECRET.slice('whsec_'.length), 'base64');

  // Every column of every row, as text and as bytes: neither spelling of the secret appears.
  const dump = await t.database.db.query<{ row: string }>(
    `select row_to_json(s)::text as row from endpoint_secret s union all
     select row_to_json(e)::text from endpoint e union all
     select row_to_json(a)::text from audit_entry a`,
  );
  const text = dump.rows.map((r) => r.row).join('\n');
  assert.ok(!text.includes(SECRET.slice('whsec_'.length)), 'no base64 secret in the database');
  const sealed = await t.database.db.query<{ sealed: Buffer }>('select sealed from endpoint_secret');
  for (const row of sealed.rows) assert.equal(Buffer.from(row.sealed).indexOf(raw), -1, 'no raw key bytes');

  const revealed = await t.call('GET', `/api/v1/app/${app}/endpoint/${ep}/secret`);
  assert.equal(revealed.body.key, SECRET);

  // Copy the sealed secret onto the other endpoint's row: GCM's additional data is the row's
  // endpoint id, so it no longer opens.
  await t.database.db.query(
    `update endpoint_secret set sealed = (select sealed from endpoint_secret where endpoint_id = $1)
      where endpoint_id = $2`,
    [ep, other],
  );
  const moved = (await findEndpoint(t.database.db, app, other))!;
  await assert.rejects(revealSecret(t.herald.core, t.database.db, moved), /another row|tampered/);
});

test("an endpoint's headers are sealed: no value in the database, sent with every request, read and patched through the API", async () => {
  const app = await createApp(t, 'sealed-headers');
  const credential = 'Bearer receiver-credential-4f1c';
  const created = await t.call('POST', `/api/v1/app/${app}/endpoint`, {
    url: `${receiver.url}/sealed-headers`,
    headers: { Authorization: credential, 'X-Region': 'eu' },
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const ep = created.body.id;
  const patched = await t.call('PATCH', `/api/v1/app/${app}/endpoint/${ep}/headers`, {
    headers: { 'X-Tenant': 'acme' },
    deleteHeaders: ['x-region'],
  });
  assert.equal(patched.status, 204, JSON.stringify(patched.body));

  const dump = await t.database.db.query<{ row: string }>(
    `select row_to_json(e)::text as row from endpoint e union all
     select row_to_json(a)::text from audit_entry a`,
  );
  const text = dump.rows.map((r) => r.row).join('\n');
  for (const value of ['receiver-credential-4f1c', 'acme']) {
    assert.ok(!text.includes(value), `no header value (${value}) in the database`);
  }
  const read = await t.call('GET', `/api/v1/app/${app}/endpoint/${ep}/headers`);
  assert.deepEqual(read.body, { headers: { 'X-Tenant': 'acme' }, sensitive: ['Authorization'] });
  // The same headers again are not sealed anew: a new value would tell workers the endpoint changed.
  const stored = async () =>
    (await t.database.db.query('select sealed_headers from endpoint where id = $1', [ep])).rows[0]!
      .sealed_headers;
  const before = await stored();
  const same = { Authorization: credential, 'X-Tenant': 'acme' };
  assert.equal(
    (await t.call('PUT', `/api/v1/app/${app}/endpoint/${ep}/headers`, { headers: same })).status,
    204,
  );
  assert.equal(await stored(), before);
  // Nor when a PATCH sets a header to the value it has, which moves it to the end of the set.
  const again = await t.call('PATCH', `/api/v1/app/${app}/endpoint/${ep}/headers`, {
    headers: { Authorization: credential },
  });
  assert.equal(again.status, 204, JSON.stringify(again.body));
  assert.equal(await stored(), before);

  await publishVia(t, app, { eventType: 'e', payload: { sealed: true } });
  const request = await waitFor('the delivery', () =>
    receiver.requests.find((r) => r.path === '/sealed-headers'),
  );
  assert.equal(request.headers['authorization'], credential);
  assert.equal(request.headers['x-tenant'], 'acme');
  assert.equal(request.headers['x-region'], undefined);

  // Moved onto another endpoint's row, the sealed headers do not open there.
  const other = await createEndpoint(t, app, { url: `${receiver.url}/other-headers` });
  await t.database.db.query(
    'update endpoint set sealed_headers = (select sealed_headers from endpoint where id = $1) where id = $2',
    [ep, other],
  );
  const moved = await t.call('GET', `/api/v1/app/${app}/endpoint/${other}/headers`);
  assert.equal(moved.status, 500);
  assert.ok(!JSON.stringify(moved.body).includes('credential'));
});

test('headers an earlier version kept in clear are sealed when a process with the master key starts; that version can no longer read them', async () => {
  // A database as the version before sealing left it, its headers in clear.
  const database = await freshDatabase('clear_headers', { upTo: 45 });
  try {
    const app = await seedApp(database.db, 'clear-headers');
    const clear = { Authorization: 'Basic b2xkOmNsZWFy', 'X-Region': 'eu' };
    const inserted = await database.db.query<{ id: string }>(
      `insert into endpoint (app_id, url, headers) values ($1, $2, $3), ($1, $4, '{}') returning id`,
      [app.id, `${receiver.url}/clear-headers`, JSON.stringify(clear), `${receiver.url}/no-headers`],
    );
    const [kept, none] = inserted.rows.map((r) => r.id) as [string, string];
    await migrate(database.db);
    // A command (doctor, say, which a probe or a read-only standby runs) writes nothing as it opens.
    const command = await startHeraldOn(database, { worker: false });
    await command.close();
    const untouched = await database.db.query<{ headers: StoredHeaders }>(
      'select sealed_headers as headers from endpoint where id = $1',
      [kept],
    );
    assert.deepEqual(untouched.rows[0]!.headers, clear);
    // A server starting seals them.
    const started = await startHeraldOn(database, { worker: false, migrate: true });
    try {
      const rows = await database.db.query<{ id: string; headers: StoredHeaders }>(
        'select id, sealed_headers as headers from endpoint',
      );
      const byId = new Map(rows.rows.map((r) => [r.id, r.headers]));
      const sealed = byId.get(kept)!;
      assert.equal(typeof sealed, 'string', 'sealed');
      assert.ok(!String(sealed).includes('b2xkOmNsZWFy'));
      assert.deepEqual(openHeaders(started.herald.core.box, kept, sealed), clear);
      assert.deepEqual(byId.get(none), {}, 'no headers: nothing to seal');
      const read = await started.call('GET', `/api/v1/app/${app.id}/endpoint/${kept}/headers`);
      assert.deepEqual(read.body, { headers: { 'X-Region': 'eu' }, sensitive: ['Authorization'] });
      // A process of that version reads the column it knew, and its claims the result column: both
      // are gone, so it fails, where it would have sent the sealed text's characters as headers.
      await assert.rejects(
        database.db.query('select headers from endpoint'),
        /column "headers" does not exist/,
      );
      await assert.rejects(
        database.db.query(`select headers from herald_claim(1, interval '1 minute', '')`),
        /column "headers" does not exist/,
      );
    } finally {
      await started.close();
    }
  } finally {
    await database.drop();
  }
});

test('keys reencrypt moves every secret — endpoints’ and sources’ — to a new master key; the old key can then go', async () => {
  const app = await createApp(t, 'rekey');
  const ep = await createEndpoint(t, app, { url: `${receiver.url}/rekey`, secret: SECRET });
  const headers = { 'X-Api-Key': 'rekey-header-value' };
  assert.equal((await t.call('PUT', `/api/v1/app/${app}/endpoint/${ep}/headers`, { headers })).status, 204);
  const sourceSecret = 'whsec_c291cmNlLXNlY3JldC1mb3ItcmVrZXlpbmc=';
  const source = await t.call('POST', '/api/v1/source', {
    uid: 'rekey-source',
    scheme: 'standard-webhooks',
    secret: sourceSecret,
    app: 'rekey',
    eventType: 'e',
  });
  assert.equal(source.status, 201, JSON.stringify(source.body));
  // An SNS subscription token kept for the operator is sealed to its source as the secrets are.
  const token = 'a-subscription-token';
  await keepSubscriptionToken(
    t.database.db,
    source.body.id,
    'arn:aws:sns:us-east-1:123456789012:rekey',
    t.herald.core.box.seal(token, source.body.id),
  );
  // A row too damaged to name its key (two bytes), which must not stop the run either.
  const damaged = await createEndpoint(t, app, { url: `${receiver.url}/damaged` });
  await t.database.db.query(`update endpoint_secret set sealed = '\\x0102'::bytea where endpoint_id = $1`, [
    damaged,
  ]);
  const newKey = Buffer.alloc(32, 9);
  const oldKey = Buffer.from(MASTER_KEY, 'base64');
  const both = createSecretBox([newKey, oldKey]);
  const report = await reencryptSecrets(t.database.db, both, 'cli');
  const byTable = Object.fromEntries(report.tables.map((r) => [r.table, r]));
  assert.ok(byTable['endpoint_secret']!.reencrypted >= 1);
  assert.ok(byTable['endpoint_headers']!.reencrypted >= 1, 'endpoint headers too');
  assert.equal(byTable['source_secret']!.reencrypted, 1, 'the source’s secret too');
  assert.equal(byTable['source_subscription_token']!.reencrypted, 1, 'and its kept subscription token');
  // The row the previous test tampered with, and the damaged one, are reported, not silently
  // skipped or fatal.
  assert.equal(byTable['endpoint_secret']!.unreadable.length, 2);
  // Named by their endpoints, which an operator can look up.
  assert.ok(
    byTable['endpoint_secret']!.unreadable.some((u) => u.owner === damaged),
    JSON.stringify(byTable['endpoint_secret']!.unreadable),
  );
  const again = await reencryptSecrets(t.database.db, both, 'cli');
  assert.deepEqual(
    again.tables.map((r) => r.reencrypted),
    [0, 0, 0, 0],
    'a second run finds nothing left',
  );
  // Each run is on record, with what it did (counts, never secrets).
  const runs = await t.database.db.query<{ actor: string; target: string; details: { tables: unknown[] } }>(
    `select actor, target_id as target, details from audit_entry where action = 'keys.reencrypted' order by id`,
  );
  assert.deepEqual(
    runs.rows.map((r) => [r.actor, r.target]),
    [
      ['cli', both.currentKeyId],
      ['cli', both.currentKeyId],
    ],
  );
  assert.deepEqual(runs.rows[1]!.details.tables, [
    {
      table: 'endpoint_secret',
      examined: byTable['endpoint_secret']!.examined,
      reencrypted: 0,
      unreadable: 2,
    },
    {
      table: 'endpoint_headers',
      examined: byTable['endpoint_headers']!.examined,
      reencrypted: 0,
      unreadable: byTable['endpoint_headers']!.unreadable.length,
    },
    { table: 'source_secret', examined: 1, reencrypted: 0, unreadable: 0 },
    { table: 'source_subscription_token', examined: 1, reencrypted: 0, unreadable: 0 },
  ]);

  // Under the new key alone, both open; under the old alone, neither.
  const onlyNew = createSecretBox([newKey]);
  const onlyOld = createSecretBox([oldKey]);
  const endpointRow = await t.database.db.query<{ sealed: Buffer }>(
    'select sealed from endpoint_secret where endpoint_id = $1',
    [ep],
  );
  const sourceRow = await t.database.db.query<{ sealed: Buffer }>(
    'select sealed from source_secret where source_id = $1',
    [source.body.id],
  );
  const sealedEndpoint = Buffer.from(endpointRow.rows[0]!.sealed);
  const sealedSource = Buffer.from(sourceRow.rows[0]!.sealed);
  assert.equal(onlyNew.open(sealedEndpoint, ep), SECRET);
  assert.equal(onlyNew.open(sealedSource, source.body.id), sourceSecret);
  assert.throws(() => onlyOld.open(sealedEndpoint, ep), /unknown key/);
  assert.throws(() => onlyOld.open(sealedSource, source.body.id), /unknown key/);
  const endpointHeaders = (await findEndpoint(t.database.db, app, ep))!.headers;
  assert.deepEqual(openHeaders(onlyNew, ep, endpointHeaders), headers);
  assert.throws(() => openHeaders(onlyOld, ep, endpointHeaders), /unknown key/);
  const [kept] = await subscriptionTokens(t.database.db, source.body.id);
  assert.equal(onlyNew.open(kept!.sealed, source.body.id), token);
});

test('a re-encryption stopped midway has recorded every secret it re-encrypted', async () => {
  const app = await createApp(t, 'rekey-stopped');
  for (const n of [1, 2, 3]) await createEndpoint(t, app, { url: `${receiver.url}/stopped-${n}` });
  const ring = createSecretBox([
    Buffer.alloc(32, 11),
    Buffer.alloc(32, 9),
    Buffer.from(MASTER_KEY, 'base64'),
  ]);
  let seals = 0;
  // The run stops at its third new ciphertext, as a Ctrl-C or a crash would stop it.
  const stopping: SecretBox = {
    ...ring,
    seal: (plaintext, aad) => {
      if (++seals > 2) throw new Error('stopped');
      return ring.seal(plaintext, aad);
    },
  };
  await assert.rejects(reencryptSecrets(t.database.db, stopping, 'cli', 1), /stopped/);
  const rows = await t.database.db.query<{ id: number; sealed: Buffer }>(
    'select id::int as id, sealed from endpoint_secret order by id',
  );
  const moved = rows.rows.filter((r) => {
    try {
      return ring.keyIdOf(Buffer.from(r.sealed)) === ring.currentKeyId;
    } catch {
      return false;
    }
  });
  assert.equal(moved.length, 2, 'two secrets re-encrypted before the stop');
  const entries = await t.database.db.query<{ details: { table: string; fromId: number; toId: number } }>(
    `select details from audit_entry where action = 'keys.reencrypted_batch' and target_id = $1`,
    [ring.currentKeyId],
  );
  for (const row of moved) {
    assert.ok(
      entries.rows.some(
        ({ details: d }) => d.table === 'endpoint_secret' && d.fromId <= row.id && row.id <= d.toId,
      ),
      `secret ${row.id} re-encrypted with no audit entry`,
    );
  }
});

test('delivery keeps signing with a secret re-encrypted under the previous-keys ring', async () => {
  // HERALD_PREVIOUS_MASTER_KEYS lets a herald with a new key open secrets sealed under the old.
  const rotated = await startTestHerald('secrets-ring', {
    env: {
      HERALD_MASTER_KEY: Buffer.alloc(32, 3).toString('base64'),
      HERALD_PREVIOUS_MASTER_KEYS: MASTER_KEY,
    },
  });
  try {
    const box = createSecretBox([Buffer.from(MASTER_KEY, 'base64')]);
    const app = await createApp(rotated, 'ring');
    const ep = await createEndpoint(rotated, app, { url: `${receiver.url}/ring`, secret: SECRET });
    // Seal this endpoint's secret under the old key only, as an older deployment would have.
    await rotated.database.db.query('update endpoint_secret set sealed = $2 where endpoint_id = $1', [
      ep,
      box.seal(SECRET, ep),
    ]);
    await publishVia(rotated, app, { eventType: 'e', payload: { ring: true } });
    const request = await waitFor('the delivery', () => receiver.requests.find((r) => r.path === '/ring'));
    const headers = Object.fromEntries(
      ['webhook-id', 'webhook-timestamp', 'webhook-signature'].map((h) => [h, String(request.headers[h])]),
    );
    assert.deepEqual(new Webhook(SECRET).verify(request.body, headers), { ring: true });
  } finally {
    await rotated.close();
  }
});

test('a secret sealed under a master key this process lacks answers 503 secret_unavailable, naming the key, not a 500', async () => {
  // As a process started before a rotation began finds what a process with the new key sealed.
  const newer = Buffer.alloc(32, 4);
  const app = await createApp(t, 'unheld-key');
  const ep = await createEndpoint(t, app, { url: `${receiver.url}/unheld`, secret: SECRET });
  const source = await t.call('POST', '/api/v1/source', {
    scheme: 'standard-webhooks',
    secret: SECRET,
    app,
    eventType: 'order.relayed',
  });
  assert.equal(source.status, 201, JSON.stringify(source.body));
  const box = createSecretBox([newer]);
  await t.database.db.query('update endpoint_secret set sealed = $2 where endpoint_id = $1', [
    ep,
    box.seal(SECRET, ep),
  ]);
  await t.database.db.query('update source_secret set sealed = $2 where source_id = $1', [
    source.body.id,
    box.seal(SECRET, source.body.id),
  ]);
  const reveal = await fetch(`${t.url}/api/v1/app/${app}/endpoint/${ep}/secret`, {
    headers: { authorization: `Bearer ${ADMIN_KEY}` },
  });
  assert.equal(reveal.headers.get('retry-after'), '1', 'another process may hold the key');
  const answers = [
    { status: reveal.status, body: await reveal.json() },
    await t.call('PATCH', `/api/v1/source/${source.body.id}`, { eventType: 'order.renamed' }),
  ];
  for (const answer of answers) {
    assert.equal(answer.status, 503, JSON.stringify(answer.body));
    assert.equal(answer.body.code, 'secret_unavailable');
    assert.match(answer.body.detail, new RegExp(`master key ${keyIdOf(newer)}.*HERALD_PREVIOUS_MASTER_KEYS`));
    assert.doesNotMatch(JSON.stringify(answer.body), /whsec_|C2FVsBQ/);
  }
  const kept = await t.call('GET', `/api/v1/source/${source.body.id}`);
  assert.equal(kept.body.eventType, 'order.relayed', 'the refused change was not kept');
});

test('embedded mode generates a 0600 key file once; server mode refuses to start without a key', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'herald-key-'));
  const first = loadMasterKey(undefined, dir, true);
  const second = loadMasterKey(undefined, dir, true);
  assert.ok(first.equals(second), 'the generated key is kept');
  assert.equal(fs.statSync(path.join(dir, 'master.key')).mode & 0o777, 0o600);
  fs.rmSync(dir, { recursive: true });
  assert.throws(() => loadConfig({ DATABASE_URL: 'postgres://x/y' }), /HERALD_MASTER_KEY/);
  assert.throws(() => loadMasterKeys('not-a-key', [], dir, false), /HERALD_MASTER_KEY/);
  assert.throws(() => loadMasterKeys(MASTER_KEY, ['short'], dir, false), /HERALD_PREVIOUS_MASTER_KEYS/);
});

/** An app with an endpoint whose signing secret is sealed under `key`. */
async function seedEndpointSealedUnder(db: Db, key: Buffer, name: string): Promise<void> {
  const app = await seedApp(db, name);
  const endpoint = await seedEndpoint(db, app.id, `http://127.0.0.1:9/${name}`);
  await insertCurrentSecret(db, app.id, endpoint.id, createSecretBox([key]).seal(SECRET, endpoint.id));
}

test('an embedded database is judged by whether its keys open its secrets: a previous key listed will do, a key that opens none will not', async () => {
  const database = await freshDatabase('keys_judged');
  try {
    const old = Buffer.alloc(32, 8);
    const fresh = Buffer.alloc(32, 9);
    const judged = (keys: Buffer[]) =>
      assertSecretsUnderKeys(database.db, createSecretBox(keys), keys, '/data');
    // No secret yet (a database migrated before its first start): any key will do.
    await judged([fresh]);
    await seedEndpointSealedUnder(database.db, old, 'keys-judged');
    await judged([old]);
    // A new key, the old one listed among the previous: the secret opens, under it.
    await judged([fresh, old]);
    // A new key alone (the key file made anew): refused, naming the variable and the file.
    await assert.rejects(judged([fresh]), /HERALD_MASTER_KEY.*\/data\/master\.key is not it/);
  } finally {
    await database.drop();
  }
});

test('a server process whose keys do not open the newest secrets refuses to start, naming the variable; with the old key listed it starts', async () => {
  const database = await freshDatabase('keys_judged_server');
  try {
    await seedEndpointSealedUnder(database.db, Buffer.from(MASTER_KEY, 'base64'), 'keys-server');
    const other = Buffer.alloc(32, 5).toString('base64');
    // A process left on another key: it would fail every attempt, and seal new secrets under it.
    const refused = await startHeraldOn(database, { env: { HERALD_MASTER_KEY: other } }).then(
      async (started) => {
        await started.close();
        return null;
      },
      (error: Error) => error,
    );
    assert.match(
      String(refused?.message),
      /HERALD_MASTER_KEY.*neither HERALD_MASTER_KEY nor HERALD_PREVIOUS_MASTER_KEYS holds it/,
    );
    // Mid-rotation: the new key, the old one listed.
    const rotating = await startHeraldOn(database, {
      env: { HERALD_MASTER_KEY: other, HERALD_PREVIOUS_MASTER_KEYS: MASTER_KEY },
    });
    await rotating.close();
  } finally {
    await database.drop();
  }
});
