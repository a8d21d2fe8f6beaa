// The audit log: every administrative change leaves an entry naming the key that made it, the
// action, the target and the time, in the same transaction as the change; no entry ever carries
// a payload, a signing secret, a header value or an API key token.

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, test } from 'node:test';
import pg from 'pg';
import { type AuditRow, listAuditForTarget } from '../src/db/audit.ts';
import { createApp, publishVia } from './support/fixtures.ts';
import { ADMIN_KEY, startTestHerald, type TestHerald } from './support/herald.ts';
import { type Receiver, startReceiver } from './support/receiver.ts';
import { waitFor, waitForLockWaiter } from './support/wait.ts';

const SECRET = `whsec_${randomBytes(24).toString('base64')}`;
const ROTATED = `whsec_${randomBytes(32).toString('base64')}`;
const AUTH_HEADER_VALUE = `Bearer hdr-${randomBytes(8).toString('hex')}`;
const PLAIN_HEADER_VALUE = `tenant-${randomBytes(8).toString('hex')}`;
const REPLACED_HEADER_VALUE = `replaced-${randomBytes(8).toString('hex')}`;
const PAYLOAD_MARKER = `payload-${randomBytes(8).toString('hex')}`;

let t: TestHerald;
let receiver: Receiver;
/** The admin key every change below is made with, so entries can be told from the env key's. */
let admin: { id: string; key: string };
const tokens: string[] = [ADMIN_KEY];
let startedAt: Date;

before(async () => {
  receiver = await startReceiver((request) => ({
    status: request.path === '/failing' ? 500 : request.path === '/gone' ? 410 : 204,
  }));
  // An attempt to /slow is in flight until the test releases it.
  const answer = receiver.respond;
  receiver.respond = (request, n) => (request.path === '/slow' ? 'hold' : answer(request, n));
  t = await startTestHerald('audit', { env: { HERALD_DISABLE_AFTER_FAILURES: '2' } });
  startedAt = new Date(Date.now() - 1000);
  const created = await t.call('POST', '/api/v1/api-key', { name: 'auditor', scopes: ['admin'] });
  assert.equal(created.status, 201);
  admin = { id: created.body.id, key: created.body.key };
  tokens.push(admin.key);
});
after(async () => {
  await t.close();
  await receiver.close();
});

const call = (method: string, path: string, body?: unknown) =>
  t.call(method, path, body, { authorization: `Bearer ${admin.key}` });

async function ok(method: string, path: string, body?: unknown, status = 200) {
  const answer = await call(method, path, body);
  assert.equal(answer.status, status, `${method} ${path}: ${JSON.stringify(answer.body)}`);
  return answer.body;
}

/** The one entry for `action` on `targetId`, checked for actor, target and time. */
async function entry(
  targetId: string,
  action: string,
  expected: { actor?: string; targetType: string; appId: string | null },
): Promise<AuditRow> {
  const rows = (await listAuditForTarget(t.database.db, targetId)).filter((r) => r.action === action);
  assert.ok(rows.length > 0, `an audit entry ${action} for ${targetId}`);
  const row = rows.at(-1)!;
  assert.equal(row.actor, expected.actor ?? admin.id, `${action}: actor`);
  assert.equal(row.targetType, expected.targetType, `${action}: target type`);
  assert.equal(row.appId, expected.appId, `${action}: app`);
  assert.ok(row.at >= startedAt && row.at <= new Date(), `${action}: time ${row.at.toISOString()}`);
  return row;
}

test('API keys: created (by the env admin key and by a stored key) and revoked', async () => {
  await entry(admin.id, 'api_key.created', { actor: 'env-admin-key', targetType: 'api_key', appId: null });

  const app = await createApp(t, 'key-scope');
  const created = await ok(
    'POST',
    '/api/v1/api-key',
    { name: 'tenant', scopes: ['publish'], apps: [app] },
    201,
  );
  tokens.push(created.key);
  const row = await entry(created.id, 'api_key.created', { targetType: 'api_key', appId: null });
  assert.deepEqual(row.details, { scopes: ['publish'], apps: [app] });

  await ok('DELETE', `/api/v1/api-key/${created.id}`, undefined, 204);
  await entry(created.id, 'api_key.revoked', { targetType: 'api_key', appId: null });
});

test('applications: created, updated and deleted', async () => {
  const created = await ok('POST', '/api/v1/app', { name: 'Audited', uid: 'audited' }, 201);
  await entry(created.id, 'app.created', { targetType: 'app', appId: created.id });

  await ok('PATCH', `/api/v1/app/${created.id}`, { name: 'Audited, renamed' });
  const patched = await entry(created.id, 'app.updated', { targetType: 'app', appId: created.id });
  assert.deepEqual(patched.details, { changed: ['name'] });

  await ok('PUT', `/api/v1/app/${created.id}`, {
    name: 'Audited, renamed',
    uid: 'audited',
    metadata: { tier: 'gold' },
  });
  const replaced = await entry(created.id, 'app.updated', { targetType: 'app', appId: created.id });
  assert.deepEqual(replaced.details, { changed: ['metadata'] }, 'names of fields, not their values');

  // Svix: publishing with `application` creates the app when the path names none.
  const message = await ok(
    'POST',
    '/api/v1/app/made-by-publish/msg',
    { eventType: 'e', payload: {}, application: { name: 'Made by publish' } },
    202,
  );
  const madeBy = await call('GET', '/api/v1/app/made-by-publish');
  await entry(madeBy.body.id, 'app.created', { targetType: 'app', appId: madeBy.body.id });
  await entry(message.id, 'message.created', { targetType: 'message', appId: madeBy.body.id });

  await ok('DELETE', `/api/v1/app/${created.id}`, undefined, 204);
  await entry(created.id, 'app.deleted', { targetType: 'app', appId: created.id });
});

test('event types: created, updated, archived and expunged', async () => {
  await ok('POST', '/api/v1/event-type', { name: 'audit.one', description: 'one' }, 201);
  await entry('audit.one', 'event_type.created', { targetType: 'event_type', appId: null });
  await ok('PATCH', '/api/v1/event-type/audit.one', { description: 'one, patched' });
  await ok('PUT', '/api/v1/event-type/audit.one', { description: 'one, replaced' });
  const updates = (await listAuditForTarget(t.database.db, 'audit.one')).filter(
    (r) => r.action === 'event_type.updated',
  );
  assert.equal(updates.length, 2);
  await ok('PUT', '/api/v1/event-type/audit.two', { description: 'two' }, 201);
  await entry('audit.two', 'event_type.created', { targetType: 'event_type', appId: null });
  await ok('DELETE', '/api/v1/event-type/audit.one', undefined, 204);
  await entry('audit.one', 'event_type.archived', { targetType: 'event_type', appId: null });
  await ok('DELETE', '/api/v1/event-type/audit.two?expunge=true', undefined, 204);
  await entry('audit.two', 'event_type.expunged', { targetType: 'event_type', appId: null });
});

test('endpoints: created, updated, disabled, enabled, secret rotated, headers updated, deleted', async () => {
  const app = await createApp(t, 'audit-endpoints');
  const ep = await ok(
    'POST',
    `/api/v1/app/${app}/endpoint`,
    {
      url: `${receiver.url}/ok`,
      secret: SECRET,
      headers: { authorization: AUTH_HEADER_VALUE, 'x-tenant': PLAIN_HEADER_VALUE },
    },
    201,
  );
  const target = { targetType: 'endpoint', appId: app };
  const created = await entry(ep.id, 'endpoint.created', target);
  // The origin only: a URL's path may be its credential.
  assert.deepEqual(created.details, { url: `${new URL(receiver.url).origin}/…` });
  const headers = await entry(ep.id, 'endpoint.headers_updated', target);
  assert.deepEqual(headers.details, { headers: ['authorization', 'x-tenant'] });

  const path = `/api/v1/app/${app}/endpoint/${ep.id}`;
  await ok('PATCH', path, { description: 'described' });
  const updated = await entry(ep.id, 'endpoint.updated', target);
  assert.deepEqual(updated.details, { changed: ['description'] });
  await ok('PATCH', path, { idempotent: false, clientErrorPolicy: 'dead-letter', metadata: { team: 'a' } });
  const contract = (await listAuditForTarget(t.database.db, ep.id)).filter(
    (r) => r.action === 'endpoint.updated',
  );
  assert.deepEqual(contract.at(-1)?.details, { changed: ['metadata', 'idempotent', 'clientErrorPolicy'] });

  // Reading a signing secret is on record.
  await ok('GET', `${path}/secret`);
  const revealed = await entry(ep.id, 'endpoint.secret_revealed', target);
  assert.deepEqual(revealed.details, {});

  await ok('PATCH', path, { disabled: true });
  await entry(ep.id, 'endpoint.disabled', target);
  await ok('PATCH', path, { disabled: false });
  await entry(ep.id, 'endpoint.enabled', target);

  await ok('POST', `${path}/secret/rotate`, { key: ROTATED }, 204);
  const rotated = await entry(ep.id, 'endpoint.secret_rotated', target);
  assert.deepEqual(rotated.details, { graceSeconds: 24 * 3600 });

  await ok('PUT', `${path}/headers`, { headers: { 'x-tenant': REPLACED_HEADER_VALUE } }, 204);
  await ok('PATCH', `${path}/headers`, { headers: { 'x-extra': PLAIN_HEADER_VALUE } }, 204);
  const patched = await entry(ep.id, 'endpoint.headers_updated', target);
  assert.deepEqual(patched.details, { headers: ['x-tenant', 'x-extra'] });

  await ok('DELETE', path, undefined, 204);
  await entry(ep.id, 'endpoint.deleted', target);
});

test('two DELETEs of one endpoint at once: one deletes it and is audited, the other is a 404', async () => {
  const app = await createApp(t, 'audit-double-delete');
  const ep = await ok('POST', `/api/v1/app/${app}/endpoint`, { url: `${receiver.url}/ok` }, 201);
  const path = `/api/v1/app/${app}/endpoint/${ep.id}`;
  // Both pass their lookup, then wait for the endpoint's row, held here, to delete it.
  const holder = new pg.Client({ connectionString: t.database.url });
  await holder.connect();
  try {
    await holder.query('begin');
    await holder.query('select 1 from endpoint where id = $1 for update', [ep.id]);
    const deletes = [call('DELETE', path), call('DELETE', path)];
    // Both deletes wait for the endpoint.
    await waitForLockWaiter(t.database.db, 'delete from endpoint where id', 10_000, 2);
    await holder.query('commit');
    const statuses = (await Promise.all(deletes)).map((answer) => answer.status).sort();
    assert.deepEqual(statuses, [204, 404]);
  } finally {
    await holder.end();
  }
  const audited = (await listAuditForTarget(t.database.db, ep.id)).filter(
    (r) => r.action === 'endpoint.deleted',
  );
  assert.equal(audited.length, 1, 'one deletion, one entry');
});

test('messages: resent, content expunged; endpoints recovered; attempt content expunged', async () => {
  const app = await createApp(t, 'audit-messages');
  const ep = await ok(
    'POST',
    `/api/v1/app/${app}/endpoint`,
    { url: `${receiver.url}/ok`, secret: SECRET },
    201,
  );
  const msg = await publishVia(
    t,
    app,
    { eventType: 'invoice.paid', payload: { note: PAYLOAD_MARKER } },
    { authorization: `Bearer ${admin.key}` },
  );
  await entry(msg, 'message.created', { targetType: 'message', appId: app });
  const attempts = await waitFor('the first attempt to succeed', async () => {
    const page = await call('GET', `/api/v1/app/${app}/attempt/msg/${msg}`);
    return page.body.data.length > 0 && page.body.data[0].status === 0 ? page.body.data : null;
  });

  await ok('POST', `/api/v1/app/${app}/msg/${msg}/endpoint/${ep.id}/resend`, undefined, 202);
  const resent = await entry(msg, 'message.resent', { targetType: 'message', appId: app });
  assert.deepEqual(resent.details, { endpointId: ep.id });

  const since = new Date(Date.now() - 3600_000).toISOString();
  await ok('POST', `/api/v1/app/${app}/endpoint/${ep.id}/recover`, { since }, 202);
  const recovered = await entry(ep.id, 'endpoint.recovered', { targetType: 'endpoint', appId: app });
  assert.deepEqual(recovered.details, { since, until: null, deliveries: 0, leftForReview: 0 });

  const attemptId = attempts[0].id;
  await ok('DELETE', `/api/v1/app/${app}/msg/${msg}/attempt/${attemptId}/content`, undefined, 204);
  const expunged = await entry(attemptId, 'attempt.content_expunged', { targetType: 'attempt', appId: app });
  assert.deepEqual(expunged.details, { messageId: msg });

  await ok('DELETE', `/api/v1/app/${app}/msg/${msg}/content`, undefined, 204);
  await entry(msg, 'message.content_expunged', { targetType: 'message', appId: app });
});

test('an attempt in flight has no response to expunge yet: 409 and no audit entry, then 204 once it finished', async () => {
  const app = await createApp(t, 'audit-in-flight');
  await ok('POST', `/api/v1/app/${app}/endpoint`, { url: `${receiver.url}/slow` }, 201);
  const msg = await publishVia(t, app, { eventType: 'e', payload: { slow: true } });
  const attemptsOf = async () => (await call('GET', `/api/v1/app/${app}/attempt/msg/${msg}`)).body.data;
  const [sending] = await waitFor('the attempt in flight', async () => {
    const data = await attemptsOf();
    return data.length > 0 && data[0].status === 3 ? data : null;
  });
  const path = `/api/v1/app/${app}/msg/${msg}/attempt/${sending.id}/content`;
  const refused = await call('DELETE', path);
  assert.equal(refused.status, 409, JSON.stringify(refused.body));
  const entries = await t.database.db.query(
    `select id from audit_entry where target_id = $1 and action = 'attempt.content_expunged'`,
    [sending.id],
  );
  assert.equal(entries.rowCount, 0, 'nothing expunged, nothing audited');
  receiver.release();
  await waitFor('the attempt to finish', async () => (await attemptsOf())[0].status !== 3);
  await ok('DELETE', path, undefined, 204);
  await entry(sending.id, 'attempt.content_expunged', { targetType: 'attempt', appId: app });
});

test('the worker auto-disabling an endpoint is audited with its reason, as actor `worker`', async () => {
  const app = await createApp(t, 'audit-worker');
  const failing = await ok('POST', `/api/v1/app/${app}/endpoint`, { url: `${receiver.url}/failing` }, 201);
  const gone = await ok('POST', `/api/v1/app/${app}/endpoint`, { url: `${receiver.url}/gone` }, 201);
  for (let i = 0; i < 2; i++) await publishVia(t, app, { eventType: 'e', payload: { note: PAYLOAD_MARKER } });
  for (const [ep, reason, statusCode] of [
    [failing.id, 'failures', 500],
    [gone.id, 'gone', 410],
  ] as const) {
    await waitFor(`endpoint ${reason} to be auto-disabled`, async () => {
      const current = await call('GET', `/api/v1/app/${app}/endpoint/${ep}`);
      return current.body.disabled === true && current.body.disabledReason === reason;
    });
    const row = await entry(ep, 'endpoint.disabled', { actor: 'worker', targetType: 'endpoint', appId: app });
    assert.equal(row.details['reason'], reason);
    assert.equal(row.details['statusCode'], statusCode);
    assert.match(String(row.details['deliveryId']), /^dlv_/);
  }
});

test('no audit entry holds a payload, a secret, a header value or a token', async () => {
  const forbidden = [
    SECRET,
    SECRET.slice('whsec_'.length),
    ROTATED,
    ROTATED.slice('whsec_'.length),
    AUTH_HEADER_VALUE,
    PLAIN_HEADER_VALUE,
    REPLACED_HEADER_VALUE,
    PAYLOAD_MARKER,
    ...tokens,
  ];
  const rows = await t.database.db.query<{ action: string; row: string }>(
    'select action, row_to_json(a)::text as row from audit_entry a order by id',
  );
  assert.ok(rows.rows.length >= 25, `the tests above wrote entries (${rows.rows.length})`);
  for (const { action, row } of rows.rows) {
    for (const value of forbidden) assert.ok(!row.includes(value), `${action} holds ${value}: ${row}`);
    assert.ok(!row.includes('whsec_'), `${action} holds a signing secret: ${row}`);
  }
});
