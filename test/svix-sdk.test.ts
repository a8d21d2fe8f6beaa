// The official `svix` SDK drives herald unchanged: every call below is the SDK's own request and
// its own response parsing. A failure here is a Svix-compatibility bug in herald.

import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { ApiException, type EndpointOut, type MessageAttemptOut, Ordering, Svix, Webhook } from 'svix';
import { ADMIN_KEY, startTestHerald, type TestHerald } from './support/herald.ts';
import { type ReceivedRequest, type Receiver, startReceiver } from './support/receiver.ts';
import { waitFor } from './support/wait.ts';

const APP_ID = /^app_[0-9a-f]{12}/;
const EP_ID = /^ep_[0-9a-f]{12}/;
const MSG_ID = /^msg_[0-9a-f]{12}/;
const ATTEMPT_ID = /^atmpt_[0-9a-f]{12}/;

const newSecret = () => `whsec_${randomBytes(24).toString('base64')}`;

function assertDate(value: unknown, what: string): void {
  assert.ok(value instanceof Date, `${what} is a Date`);
  assert.ok(!Number.isNaN(value.getTime()), `${what} is a valid date`);
  assert.ok(
    Math.abs(value.getTime() - Date.now()) < 10 * 60_000,
    `${what} is recent: ${value.toISOString()}`,
  );
}

/** The SDK's error for a rejected call, with the HTTP status herald answered. */
async function rejectsWith(status: number, call: () => Promise<unknown>): Promise<ApiException<unknown>> {
  try {
    await call();
  } catch (error) {
    assert.ok(error instanceof ApiException, `expected ApiException, got ${String(error)}`);
    assert.equal(error.code, status, `status (body: ${JSON.stringify(error.body)})`);
    return error;
  }
  assert.fail(`expected the call to fail with ${status}`);
}

/** The request's Standard Webhooks headers, as the svix verifier wants them. */
function webhookHeaders(request: ReceivedRequest): Record<string, string> {
  const header = (name: string) => {
    const value = request.headers[name];
    assert.equal(typeof value, 'string', `${name} header present`);
    return value as string;
  };
  return {
    'webhook-id': header('webhook-id'),
    'webhook-timestamp': header('webhook-timestamp'),
    'webhook-signature': header('webhook-signature'),
  };
}

let t: TestHerald;
let svix: Svix;
let receiver: Receiver;
/** Paths whose requests the receiver answers with 500 (the rest get 204). */
const failing = new Set<string>();

const requestsTo = (path: string) => receiver.requests.filter((r) => r.path === path);

before(async () => {
  t = await startTestHerald('svix_sdk', {
    // Three attempts per cycle, and no auto-disable in the way of the recover test.
    env: { HERALD_RETRY_SCHEDULE: '0.05,0.05', HERALD_DISABLE_AFTER_FAILURES: '100' },
  });
  // No client-side retries: a 5xx from herald must surface, not be papered over.
  svix = new Svix(ADMIN_KEY, { serverUrl: t.url, retryScheduleInMs: [] });
  receiver = await startReceiver((request) =>
    failing.has(request.path) ? { status: 500, body: 'broken' } : { status: 204 },
  );
});

after(async () => {
  await receiver?.close();
  await t?.close();
});

describe('svix SDK against herald', () => {
  test('health.get', async () => {
    assert.equal(await svix.health.get(), undefined);
  });

  test('application: create, get by id and uid, getOrCreate, list, update, patch, delete', async () => {
    const created = await svix.application.create({
      name: 'Acme',
      uid: 'acme',
      metadata: { plan: 'pro' },
      throttleRate: 100,
    });
    assert.match(created.id, APP_ID);
    assert.equal(created.uid, 'acme');
    assert.equal(created.name, 'Acme');
    assert.deepEqual(created.metadata, { plan: 'pro' });
    assert.equal(created.throttleRate, 100);
    assertDate(created.createdAt, 'createdAt');
    assertDate(created.updatedAt, 'updatedAt');

    const byId = await svix.application.get(created.id);
    const byUid = await svix.application.get('acme');
    assert.equal(byId.id, created.id);
    assert.equal(byUid.id, created.id);
    assert.equal(byUid.name, 'Acme');

    // getOrCreate: the existing app comes back; nothing new is stored.
    const again = await svix.application.getOrCreate({ name: 'Other name', uid: 'acme' });
    assert.equal(again.id, created.id);
    assert.equal(again.name, 'Acme');
    // `rateLimit` is the SDK's newer name for throttleRate.
    const fresh = await svix.application.getOrCreate({ name: 'Globex', uid: 'globex', rateLimit: 7 });
    assert.match(fresh.id, APP_ID);
    assert.notEqual(fresh.id, created.id);
    assert.equal(fresh.name, 'Globex');
    assert.equal(fresh.rateLimit, 7);
    assert.equal(fresh.throttleRate, 7);
    const rows = await t.database.db.query<{ n: number }>(
      `select count(*)::int as n from app where uid in ('acme', 'globex')`,
    );
    assert.equal(rows.rows[0]!.n, 2);

    // A second create with a taken uid is a conflict.
    await rejectsWith(409, () => svix.application.create({ name: 'Dup', uid: 'acme' }));

    const list = await svix.application.list({ limit: 250 });
    const ids = list.data.map((a) => a.id);
    assert.ok(ids.includes(created.id) && ids.includes(fresh.id), 'both apps are listed');
    assert.equal(list.done, true);
    for (const a of list.data) assertDate(a.createdAt, 'listed createdAt');

    const updated = await svix.application.update('acme', { name: 'Acme Corp', uid: 'acme' });
    assert.equal(updated.id, created.id);
    assert.equal(updated.name, 'Acme Corp');
    assert.deepEqual(updated.metadata, {}, 'PUT replaces metadata');
    assert.ok(updated.updatedAt.getTime() >= created.updatedAt.getTime());
    const keptUid = await svix.application.update('acme', { name: 'Acme Corp' });
    assert.equal(keptUid.uid, 'acme', 'a PUT without uid keeps the uid the path used');

    const patched = await svix.application.patch(created.id, { metadata: { tier: 'gold' }, rateLimit: 9 });
    assert.equal(patched.name, 'Acme Corp', 'PATCH keeps what it does not name');
    assert.equal(patched.rateLimit, 9);
    assert.deepEqual(patched.metadata, { tier: 'gold' });
    assert.equal(patched.uid, 'acme');

    await svix.application.delete('globex');
    await rejectsWith(404, () => svix.application.get(fresh.id));
    await rejectsWith(404, () => svix.application.get('globex'));
    assert.equal((await svix.application.get('acme')).name, 'Acme Corp');
  });

  test('application list pages with limit and iterator', async () => {
    const made: string[] = [];
    for (let i = 0; i < 5; i++) made.push((await svix.application.create({ name: `page-${i}` })).id);
    const seen: string[] = [];
    let iterator: string | null = null;
    for (let pages = 0; ; pages++) {
      assert.ok(pages < 20, 'pagination terminates');
      const page = await svix.application.list({ limit: 2, iterator });
      assert.ok(page.data.length <= 2);
      seen.push(...page.data.map((a) => a.id));
      if (page.done) break;
      iterator = page.iterator;
    }
    assert.equal(new Set(seen).size, seen.length, 'no app twice');
    for (const id of made) assert.ok(seen.includes(id), `${id} listed`);
  });

  test('eventType: create, get, list, update, patch, delete (archive) and expunge', async () => {
    const schema = { '1': { type: 'object', properties: { id: { type: 'string' } } } };
    const created = await svix.eventType.create({
      name: 'invoice.paid',
      description: 'An invoice was paid',
      schemas: schema,
    });
    assert.equal(created.name, 'invoice.paid');
    assert.equal(created.description, 'An invoice was paid');
    assert.deepEqual(created.schemas, schema);
    assert.equal(created.archived, false);
    assertDate(created.createdAt, 'createdAt');
    await svix.eventType.create({ name: 'invoice.voided', description: 'Voided' });
    await rejectsWith(409, () => svix.eventType.create({ name: 'invoice.paid', description: 'again' }));

    const got = await svix.eventType.get('invoice.paid');
    assert.equal(got.description, 'An invoice was paid');
    const list = await svix.eventType.list();
    assert.deepEqual(
      list.data.map((e) => e.name),
      ['invoice.paid', 'invoice.voided'],
    );
    // As in Svix, the list leaves the schemas out unless asked for them.
    assert.equal(list.data[0]!.schemas, null);
    const withSchemas = await svix.eventType.list({ withContent: true });
    assert.deepEqual(withSchemas.data[0]!.schemas, schema);

    const updated = await svix.eventType.update('invoice.paid', { description: 'Paid in full' });
    assert.equal(updated.description, 'Paid in full');
    assert.equal(updated.schemas, null, 'PUT replaces the schemas');
    const upserted = await svix.eventType.update('invoice.refunded', { description: 'Refunded' });
    assert.equal(upserted.name, 'invoice.refunded');

    const patched = await svix.eventType.patch('invoice.paid', { deprecated: true });
    assert.equal(patched.deprecated, true);
    assert.equal(patched.description, 'Paid in full');

    await svix.eventType.delete('invoice.voided');
    assert.equal((await svix.eventType.get('invoice.voided')).archived, true);
    const visible = await svix.eventType.list();
    assert.ok(!visible.data.some((e) => e.name === 'invoice.voided'), 'archived types are hidden');
    const all = await svix.eventType.list({ includeArchived: true });
    assert.ok(all.data.some((e) => e.name === 'invoice.voided'));
    // Create "creates or unarchives": an archived name is taken up again with the new fields.
    const revived = await svix.eventType.create({ name: 'invoice.voided', description: 'Voided again' });
    assert.equal(revived.archived, false);
    assert.equal(revived.description, 'Voided again');
    assert.ok((await svix.eventType.list()).data.some((e) => e.name === 'invoice.voided'));
    // PUT creates what its path names: only a name a message could carry.
    const badName = await rejectsWith(422, () => svix.eventType.update('invoice paid', { description: 'x' }));
    assert.deepEqual((badName.body as { detail: { loc: string[] }[] }).detail[0]!.loc, [
      'path',
      'event_type_name',
    ]);

    await svix.eventType.delete('invoice.refunded', { expunge: true });
    await rejectsWith(404, () => svix.eventType.get('invoice.refunded'));

    // A name may begin with '-', the mark of a walk back: paged one at a time, none is lost.
    await svix.eventType.create({ name: '-dash.first', description: 'Sorts first' });
    await svix.eventType.create({ name: '--dash.twice', description: 'Sorts before it' });
    const names = (await svix.eventType.list({ limit: 250 })).data.map((e) => e.name);
    const paged: string[] = [];
    let iterator: string | null = null;
    for (let pages = 0; pages <= names.length; pages++) {
      const page = await svix.eventType.list({ limit: 1, iterator });
      paged.push(...page.data.map((e) => e.name));
      if (page.done) break;
      iterator = page.iterator;
    }
    assert.deepEqual(paged, names);
    const last = await svix.eventType.list({ limit: 1, iterator: `-${names.at(-1)}` });
    assert.deepEqual(
      last.data.map((e) => e.name),
      [names.at(-2)],
      'and walked back',
    );
    const fromDash = await svix.eventType.list({ limit: 1, iterator: `-${names[1]}` });
    assert.deepEqual(
      fromDash.data.map((e) => e.name),
      [names[0]],
    );
    for (const name of ['-dash.first', '--dash.twice']) await svix.eventType.delete(name, { expunge: true });
  });

  test('endpoint: create, get, list, update, patch, secret, headers, stats, delete', async () => {
    const app = await svix.application.create({ name: 'Endpoints', uid: 'ep-app' });
    const secret = newSecret();
    const url = `${receiver.url}/crud`;
    const created = await svix.endpoint.create('ep-app', {
      url,
      uid: 'crud-ep',
      description: 'CRUD endpoint',
      filterTypes: ['invoice.paid'],
      channels: ['project-1'],
      metadata: { owner: 'billing' },
      secret,
      version: null,
      rateLimit: 50,
    });
    assert.match(created.id, EP_ID);
    assert.equal(created.url, url);
    assert.equal(created.uid, 'crud-ep');
    assert.equal(created.description, 'CRUD endpoint');
    assert.deepEqual(created.filterTypes, ['invoice.paid']);
    assert.deepEqual(created.channels, ['project-1']);
    assert.deepEqual(created.metadata, { owner: 'billing' });
    assert.equal(created.version, 1);
    assert.equal(created.rateLimit, 50);
    assert.equal(created.disabled, false);
    assertDate(created.createdAt, 'createdAt');

    // id and uid both work, for the app and the endpoint.
    for (const [a, e] of [
      [app.id, created.id],
      ['ep-app', 'crud-ep'],
      [app.id, 'crud-ep'],
    ] as const) {
      assert.equal((await svix.endpoint.get(a, e)).id, created.id);
    }
    assert.equal((await svix.endpoint.getSecret('ep-app', 'crud-ep')).key, secret);

    const list = await svix.endpoint.list(app.id);
    assert.deepEqual(
      list.data.map((e) => e.id),
      [created.id],
    );
    assert.equal(list.done, true);
    // Newest first, as Svix's server lists endpoints; `order` turns it.
    const second = await svix.endpoint.create('ep-app', { url: `${receiver.url}/second` });
    assert.deepEqual(
      (await svix.endpoint.list(app.id)).data.map((e) => e.id),
      [second.id, created.id],
    );
    assert.deepEqual(
      (await svix.endpoint.list(app.id, { order: Ordering.Ascending })).data.map((e) => e.id),
      [created.id, second.id],
    );
    await svix.endpoint.delete('ep-app', second.id);
    // No uid may be another endpoint's id (one that begins as ids do), as in Svix: it would hide
    // one of the two, and a delete by it would remove the other.
    const older = await svix.endpoint.create('ep-app', { url: `${receiver.url}/older`, uid: 'older' });
    const target = await svix.endpoint.create('ep-app', { url: `${receiver.url}/target` });
    const refused = await rejectsWith(422, () => svix.endpoint.patch('ep-app', 'older', { uid: target.id }));
    assert.deepEqual((refused.body as { detail: { loc: string[] }[] }).detail[0]!.loc, ['body', 'uid']);
    assert.equal((await svix.endpoint.get('ep-app', 'older')).id, older.id, 'its uid as it was');
    await svix.endpoint.delete('ep-app', target.id);
    await svix.endpoint.delete('ep-app', older.id);

    // herald's own fields, which the SDK cannot send: set through the HTTP API, kept by a PUT.
    const own = { idempotent: false, clientErrorPolicy: 'dead-letter' };
    assert.equal((await t.call('PATCH', '/api/v1/app/ep-app/endpoint/crud-ep', own)).status, 200);
    const updated = await svix.endpoint.update('ep-app', created.id, {
      url: `${url}/v2`,
      uid: 'crud-ep',
      description: 'updated',
      filterTypes: ['invoice.paid', 'invoice.voided'],
    });
    assert.equal(updated.id, created.id);
    assert.equal(updated.url, `${url}/v2`);
    assert.equal(updated.description, 'updated');
    assert.deepEqual(updated.filterTypes, ['invoice.paid', 'invoice.voided']);
    assert.equal(updated.channels, null, 'PUT replaces channels');
    assert.deepEqual(updated.metadata, {});
    const afterPut = await t.call('GET', '/api/v1/app/ep-app/endpoint/crud-ep');
    assert.deepEqual(
      { idempotent: afterPut.body.idempotent, clientErrorPolicy: afterPut.body.clientErrorPolicy },
      own,
      'a PUT that does not name them keeps them',
    );
    // An upsert repeated by uid, its body without `uid`, keeps the uid: one endpoint, not two.
    for (let i = 0; i < 2; i++) {
      const again = await t.call('PUT', '/api/v1/app/ep-app/endpoint/crud-ep', {
        url: `${url}/v2`,
        description: 'updated',
        filterTypes: ['invoice.paid', 'invoice.voided'],
      });
      assert.equal(again.status, 200);
      assert.deepEqual({ id: again.body.id, uid: again.body.uid }, { id: created.id, uid: 'crud-ep' });
    }
    assert.equal((await svix.endpoint.list(app.id)).data.length, 1);

    const patched = await svix.endpoint.patch('ep-app', 'crud-ep', { disabled: true, metadata: { a: 'b' } });
    assert.equal(patched.disabled, true);
    assert.equal(patched.description, 'updated', 'PATCH keeps what it does not name');
    assert.deepEqual(patched.filterTypes, ['invoice.paid', 'invoice.voided']);
    assert.deepEqual(patched.metadata, { a: 'b' });
    const enabled = await svix.endpoint.patch('ep-app', 'crud-ep', { disabled: false, rateLimit: 25 });
    assert.equal(enabled.disabled, false);
    assert.equal(enabled.rateLimit, 25);
    assert.equal(enabled.throttleRate, 25);
    // A PATCH may lift the throttle with 0 under either name, as Svix's contract allows.
    const unthrottled = await svix.endpoint.patch('ep-app', 'crud-ep', { rateLimit: 0 });
    assert.equal(unthrottled.throttleRate, 0);
    assert.equal(unthrottled.rateLimit, 0);
    // The secret survives every update.
    assert.equal((await svix.endpoint.getSecret(app.id, created.id)).key, secret);

    // Headers: replace, read back (credentials by name only), merge, delete.
    await svix.endpoint.updateHeaders('ep-app', 'crud-ep', {
      headers: { 'x-tenant': 'acme', authorization: 'Bearer s3cret' },
    });
    const headers = await svix.endpoint.getHeaders('ep-app', 'crud-ep');
    assert.deepEqual(headers.headers, { 'x-tenant': 'acme' });
    assert.deepEqual(headers.sensitive, ['authorization']);
    await svix.endpoint.patchHeaders('ep-app', 'crud-ep', { headers: { 'x-region': 'eu' } });
    const merged = await svix.endpoint.getHeaders('ep-app', 'crud-ep');
    assert.deepEqual(merged.headers, { 'x-tenant': 'acme', 'x-region': 'eu' });
    assert.deepEqual(merged.sensitive, ['authorization']);
    await svix.endpoint.patchHeaders('ep-app', 'crud-ep', { headers: {}, deleteHeaders: ['x-tenant'] });
    assert.deepEqual((await svix.endpoint.getHeaders('ep-app', 'crud-ep')).headers, { 'x-region': 'eu' });
    // Header names are case-insensitive: another spelling replaces or removes the header, and
    // two spellings of one in a body are refused (both would go out).
    await svix.endpoint.patchHeaders('ep-app', 'crud-ep', { headers: { 'X-Region': 'us' } });
    assert.deepEqual((await svix.endpoint.getHeaders('ep-app', 'crud-ep')).headers, { 'X-Region': 'us' });
    await svix.endpoint.patchHeaders('ep-app', 'crud-ep', { headers: {}, deleteHeaders: ['x-REGION'] });
    assert.deepEqual((await svix.endpoint.getHeaders('ep-app', 'crud-ep')).headers, {});
    await rejectsWith(422, () =>
      svix.endpoint.updateHeaders('ep-app', 'crud-ep', { headers: { 'X-A': '1', 'x-a': '2' } }),
    );
    await svix.endpoint.updateHeaders('ep-app', 'crud-ep', { headers: { 'x-region': 'eu' } });
    await rejectsWith(422, () =>
      svix.endpoint.updateHeaders('ep-app', 'crud-ep', { headers: { 'webhook-id': 'forged' } }),
    );

    const stats = await svix.endpoint.getStats('ep-app', 'crud-ep');
    assert.deepEqual(stats, { success: 0, pending: 0, sending: 0, fail: 0, canceled: 0 });

    await svix.endpoint.delete('ep-app', 'crud-ep');
    await rejectsWith(404, () => svix.endpoint.get('ep-app', created.id));
    assert.deepEqual((await svix.endpoint.list('ep-app')).data, []);
  });

  test('endpoint create sends its headers with every delivery', async () => {
    await svix.application.create({ name: 'Headers', uid: 'hdr-app' });
    const endpoint = await svix.endpoint.create('hdr-app', {
      url: `${receiver.url}/with-headers`,
      headers: { 'x-from-create': 'yes' },
    });
    assert.deepEqual((await svix.endpoint.getHeaders('hdr-app', endpoint.id)).headers, {
      'x-from-create': 'yes',
    });
    await svix.message.create('hdr-app', { eventType: 'invoice.paid', payload: { n: 1 } });
    const [request] = await waitFor(
      'the delivery',
      () => requestsTo('/with-headers').length > 0 && requestsTo('/with-headers'),
    );
    assert.equal(request!.headers['x-from-create'], 'yes');
  });

  describe('messages and attempts', () => {
    let appId: string;
    let endpoint: EndpointOut;
    let secret: string;

    before(async () => {
      appId = (await svix.application.create({ name: 'Messages', uid: 'msg-app' })).id;
      secret = newSecret();
      endpoint = await svix.endpoint.create('msg-app', {
        url: `${receiver.url}/deliver`,
        uid: 'deliver-ep',
        filterTypes: ['order.created'],
        secret,
      });
    });

    test('message.create is delivered, signed, and verifiable with svix Webhook', async () => {
      const payload = { order: { id: 'ord_1', total: 4200 }, note: 'ünïcødé ✓' };
      const message = await svix.message.create(
        'msg-app',
        { eventType: 'order.created', eventId: 'evt-1', payload, channels: ['eu'] },
        { idempotencyKey: 'order-1-created' },
      );
      assert.match(message.id, MSG_ID);
      assert.equal(message.eventType, 'order.created');
      assert.equal(message.eventId, 'evt-1');
      assert.deepEqual(message.channels, ['eu']);
      assertDate(message.timestamp, 'timestamp');

      const [request] = await waitFor(
        'the delivery',
        () => requestsTo('/deliver').length > 0 && requestsTo('/deliver'),
      );
      assert.equal(request!.headers['content-type'], 'application/json');
      assert.deepEqual(JSON.parse(request!.body), payload);
      const headers = webhookHeaders(request!);
      assert.equal(headers['webhook-id'], message.id);
      assert.deepEqual(new Webhook(secret).verify(request!.body, headers), payload);
      assert.throws(() => new Webhook(newSecret()).verify(request!.body, headers), /signature/i);

      // Same idempotency key, same content: the same message, nothing new stored or sent.
      const replay = await svix.message.create(
        'msg-app',
        { eventType: 'order.created', eventId: 'evt-1', payload, channels: ['eu'] },
        { idempotencyKey: 'order-1-created' },
      );
      assert.equal(replay.id, message.id);
      // Same key, different content: a conflict.
      await rejectsWith(409, () =>
        svix.message.create(
          'msg-app',
          { eventType: 'order.created', payload: { other: true } },
          { idempotencyKey: 'order-1-created' },
        ),
      );
      const stored = await t.database.db.query<{ n: number }>(
        'select count(*)::int as n from message where app_id = $1',
        [appId],
      );
      assert.equal(stored.rows[0]!.n, 1);

      // get: by id, by eventId, with and without content.
      const got = await svix.message.get('msg-app', message.id);
      assert.equal(got.id, message.id);
      assert.deepEqual(got.payload, payload);
      assert.deepEqual(got.channels, ['eu']);
      assertDate(got.timestamp, 'timestamp');
      assert.equal((await svix.message.get(appId, 'evt-1')).id, message.id);
      assert.deepEqual((await svix.message.get(appId, message.id, { withContent: false })).payload, {});

      // The attempt history, through every listing.
      const attempt = await waitFor('a finished attempt', async () => {
        const page = await svix.messageAttempt.listByMsg('msg-app', message.id);
        return page.data.find((a) => a.status === 0);
      });
      assertSuccessfulAttempt(attempt, message.id, endpoint.id, 0);
      assert.equal(attempt.url, `${receiver.url}/deliver`);

      const byEndpoint = await svix.messageAttempt.listByEndpoint('msg-app', 'deliver-ep');
      assert.deepEqual(
        byEndpoint.data.map((a) => a.id),
        [attempt.id],
      );
      assertSuccessfulAttempt(byEndpoint.data[0]!, message.id, endpoint.id, 0);
      // The endpoint filter of a message's attempts takes the endpoint's id or its uid.
      for (const endpointId of [endpoint.id, 'deliver-ep']) {
        const filtered = await svix.messageAttempt.listByMsg('msg-app', message.id, { endpointId });
        assert.deepEqual(
          filtered.data.map((a) => a.id),
          [attempt.id],
          `endpoint_id=${endpointId}`,
        );
      }
      await rejectsWith(404, () =>
        svix.messageAttempt.listByMsg('msg-app', message.id, { endpointId: 'no-such-ep' }),
      );

      const one = await svix.messageAttempt.get('msg-app', message.id, attempt.id);
      assertSuccessfulAttempt(one, message.id, endpoint.id, 0);
      assert.equal(one.id, attempt.id);
      await rejectsWith(404, () => svix.messageAttempt.get('msg-app', message.id, 'atmpt_nope'));

      const destinations = await svix.messageAttempt.listAttemptedDestinations('msg-app', message.id);
      assert.equal(destinations.data.length, 1);
      const destination = destinations.data[0]!;
      assert.equal(destination.id, endpoint.id);
      assert.equal(destination.url, `${receiver.url}/deliver`);
      assert.equal(destination.status, 0);
      assert.equal(destination.statusText, 'success');
      assertDate(destination.createdAt, 'createdAt');

      const attempted = await svix.messageAttempt.listAttemptedMessages('msg-app', 'deliver-ep');
      assert.equal(attempted.data.length, 1);
      const sent = attempted.data[0]!;
      assert.equal(sent.id, message.id);
      assert.equal(sent.eventType, 'order.created');
      assert.deepEqual(sent.payload, payload);
      assert.equal(sent.status, 0);
      assert.equal(sent.statusText, 'success');
      assertDate(sent.timestamp, 'timestamp');

      const stats = await svix.endpoint.getStats('msg-app', 'deliver-ep');
      assert.equal(stats.success, 1);
      assert.equal(stats.fail, 0);

      // Resend: a manual attempt, a second request with the same webhook-id.
      const resent = await svix.messageAttempt.resend('msg-app', message.id, 'deliver-ep');
      assert.deepEqual(resent, {});
      const second = await waitFor('the resent request', () => requestsTo('/deliver')[1]);
      assert.equal(second.headers['webhook-id'], message.id);
      assert.deepEqual(new Webhook(secret).verify(second.body, webhookHeaders(second)), payload);
      const manual = await waitFor('the manual attempt', async () => {
        const page = await svix.messageAttempt.listByMsg('msg-app', message.id);
        return page.data.length === 2 && page.data.every((a) => a.status === 0) && page.data;
      });
      assert.equal(new Set(manual.map((a) => a.id)).size, 2);
      assert.deepEqual(manual.map((a) => a.triggerType).sort(), [0, 1], 'one scheduled, one manual');
      // Only the subscribed event type was ever sent here.
      await svix.message.create('msg-app', { eventType: 'order.cancelled', payload: { x: 1 } });
      const listed = await svix.message.list('msg-app');
      assert.equal(listed.data.length, 2);
      assert.deepEqual(
        (await svix.messageAttempt.listAttemptedMessages('msg-app', 'deliver-ep')).data.map((m) => m.id),
        [message.id],
      );
    });

    // herald accepts `tags` (src/schemas/svix.ts) but never stores them: NewMessage in
    // src/db/messages.ts has no tags and publishMessage's INSERT leaves message.tags null.
    test('message.create with tags returns them', async () => {
      const message = await svix.message.create('msg-app', {
        eventType: 'order.tagged',
        payload: { tagged: true },
        tags: ['vip'],
      });
      assert.deepEqual(message.tags, ['vip']);
      assert.deepEqual((await svix.message.get('msg-app', message.id)).tags, ['vip']);
    });

    test('message.create with `application` creates the app', async () => {
      const message = await svix.message.create('auto-created', {
        eventType: 'order.created',
        payload: { hello: 'world' },
        application: { name: 'Auto', uid: 'auto-created' },
      });
      assert.match(message.id, MSG_ID);
      const app = await svix.application.get('auto-created');
      assert.equal(app.name, 'Auto');
      assert.equal((await svix.message.get(app.id, message.id)).id, message.id);
    });

    test('message.list walks every page once, newest first', async () => {
      await svix.application.create({ name: 'Paging', uid: 'paging' });
      const created: string[] = [];
      for (let i = 0; i < 7; i++) {
        created.push((await svix.message.create('paging', { eventType: 'page.test', payload: { i } })).id);
      }
      const seen: string[] = [];
      let iterator: string | null = null;
      let pages = 0;
      let prevIterator: string | null = null;
      for (;;) {
        pages++;
        assert.ok(pages <= 10, 'pagination terminates');
        const page = await svix.message.list('paging', { limit: 3, iterator });
        assert.ok(page.data.length <= 3);
        for (const m of page.data) assertDate(m.timestamp, 'timestamp');
        seen.push(...page.data.map((m) => m.id));
        prevIterator = page.prevIterator ?? null;
        if (page.done) break;
        iterator = page.iterator;
      }
      assert.equal(pages, 3);
      assert.equal(new Set(seen).size, seen.length, 'no message twice');
      assert.deepEqual(new Set(seen), new Set(created));
      assert.deepEqual(seen, [...seen].sort().reverse(), 'newest first');

      // And back from the last page: prevIterator walks to the first one, and says done there.
      const back: string[] = [];
      for (let pagesBack = 1; ; pagesBack++) {
        assert.ok(pagesBack <= 10, 'walking back terminates');
        const page = await svix.message.list('paging', { limit: 3, iterator: prevIterator });
        back.unshift(...page.data.map((m) => m.id));
        if (page.done) break;
        prevIterator = page.prevIterator ?? null;
      }
      assert.deepEqual([...back, ...seen.slice(-1)], seen, 'every page before the last, once, in order');
      // Before the first page there is nothing: an empty page, done, with nothing to go on from.
      const beforeFirst = await svix.message.list('paging', { limit: 3, iterator: `-${seen[0]}` });
      assert.deepEqual(
        { data: beforeFirst.data, done: beforeFirst.done, iterator: beforeFirst.iterator ?? null },
        { data: [], done: true, iterator: null },
      );
      // Payloads on the listing, and their absence on request.
      const first = await svix.message.list('paging', { limit: 1 });
      assert.equal(typeof first.data[0]!.payload.i, 'number');
      const bare = await svix.message.list('paging', { limit: 1, withContent: false });
      assert.deepEqual(bare.data[0]!.payload, {});
      const filtered = await svix.message.list('paging', { eventTypes: ['nothing.here'] });
      assert.deepEqual(filtered.data, []);
    });
  });

  test('rotateSecret: a new secret, and the old one keeps signing during the grace period', async () => {
    await svix.application.create({ name: 'Rotation', uid: 'rot-app' });
    const endpoint = await svix.endpoint.create('rot-app', { url: `${receiver.url}/rotate` });
    const oldSecret = (await svix.endpoint.getSecret('rot-app', endpoint.id)).key;
    assert.match(oldSecret, /^whsec_[A-Za-z0-9+/=]{32,}$/);

    await svix.endpoint.rotateSecret('rot-app', endpoint.id);
    const rotated = (await svix.endpoint.getSecret('rot-app', endpoint.id)).key;
    assert.match(rotated, /^whsec_[A-Za-z0-9+/=]{32,}$/);
    assert.notEqual(rotated, oldSecret);

    const message = await svix.message.create('rot-app', { eventType: 'rot.test', payload: { r: 1 } });
    const request = await waitFor('the delivery', () => requestsTo('/rotate')[0]);
    const headers = webhookHeaders(request);
    assert.equal(headers['webhook-id'], message.id);
    const signatures = headers['webhook-signature']!.split(' ');
    assert.equal(signatures.length, 2, `two signatures: ${headers['webhook-signature']}`);
    for (const s of signatures) assert.match(s, /^v1,[A-Za-z0-9+/]+=*$/);
    assert.deepEqual(new Webhook(rotated).verify(request.body, headers), { r: 1 });
    assert.deepEqual(new Webhook(oldSecret).verify(request.body, headers), { r: 1 });

    // Rotating to a chosen key installs exactly that key.
    const chosen = newSecret();
    await svix.endpoint.rotateSecret('rot-app', endpoint.id, { key: chosen });
    assert.equal((await svix.endpoint.getSecret('rot-app', endpoint.id)).key, chosen);
    // One given without its whsec_ prefix (as Svix takes it) comes back with it, as Svix gives it.
    const bare = newSecret();
    await svix.endpoint.rotateSecret('rot-app', endpoint.id, { key: bare.slice('whsec_'.length) });
    assert.equal((await svix.endpoint.getSecret('rot-app', endpoint.id)).key, bare);
    const created = await svix.endpoint.create('rot-app', {
      url: `${receiver.url}/rotate-bare`,
      secret: chosen.slice('whsec_'.length),
    });
    assert.equal((await svix.endpoint.getSecret('rot-app', created.id)).key, chosen);
  });

  test('rotateSecret past 5 previous secrets still signing is refused 400 limit_reached, as in Svix; rotating goes on once their grace ends', async () => {
    await svix.application.create({ name: 'Rotation limit', uid: 'rot-limit' });
    const endpoint = await svix.endpoint.create('rot-limit', { url: `${receiver.url}/rotate-limit` });
    for (let n = 0; n < 5; n++) await svix.endpoint.rotateSecret('rot-limit', endpoint.id);
    const current = (await svix.endpoint.getSecret('rot-limit', endpoint.id)).key;
    const refused = await rejectsWith(400, () => svix.endpoint.rotateSecret('rot-limit', endpoint.id));
    assert.equal((refused.body as { code: string }).code, 'limit_reached');
    assert.equal((await svix.endpoint.getSecret('rot-limit', endpoint.id)).key, current, 'nothing rotated');
    // A leaked secret is replaced all the same, with no grace: it stops signing at once.
    const replaced = await t.call('POST', `/api/v1/app/rot-limit/endpoint/${endpoint.id}/secret/rotate`, {
      gracePeriodSeconds: 0,
    });
    assert.equal(replaced.status, 204, JSON.stringify(replaced.body));
    assert.notEqual((await svix.endpoint.getSecret('rot-limit', endpoint.id)).key, current);
    const signing = await t.database.db.query<{ n: number }>(
      'select count(*)::int as n from endpoint_secret where endpoint_id = $1 and (expires_at is null or expires_at > now())',
      [endpoint.id],
    );
    assert.equal(
      signing.rows[0]!.n,
      6,
      'the new secret and the five previous ones: the leaked one signs no more',
    );
    // The grace of three of them ends; they go at the next rotation, which goes through.
    await t.database.db.query(
      `update endpoint_secret set expires_at = now() - interval '1 second'
        where id in (select id from endpoint_secret where endpoint_id = $1 and expires_at is not null order by id limit 3)`,
      [endpoint.id],
    );
    await svix.endpoint.rotateSecret('rot-limit', endpoint.id);
    const kept = await t.database.db.query<{ n: number }>(
      'select count(*)::int as n from endpoint_secret where endpoint_id = $1',
      [endpoint.id],
    );
    assert.equal(kept.rows[0]!.n, 4, 'the current secret and three previous ones; the ended four are gone');
  });

  test('recover: failed deliveries start again and succeed', async () => {
    await svix.application.create({ name: 'Recover', uid: 'rec-app' });
    const endpoint = await svix.endpoint.create('rec-app', { url: `${receiver.url}/recover` });
    failing.add('/recover');
    const message = await svix.message.create('rec-app', { eventType: 'rec.test', payload: { n: 1 } });
    await waitFor(
      'the delivery to fail',
      async () => (await svix.endpoint.getStats('rec-app', endpoint.id)).fail === 1,
    );
    assert.equal(requestsTo('/recover').length, 3, 'three attempts in one cycle');
    const failed = await svix.messageAttempt.listByEndpoint('rec-app', endpoint.id);
    assert.equal(failed.data.length, 3);
    for (const a of failed.data) {
      assert.equal(a.status, 2);
      assert.equal(a.statusText, 'fail');
      assert.equal(a.responseStatusCode, 500);
      assert.equal(a.response, 'broken');
    }
    const destination = (await svix.messageAttempt.listAttemptedDestinations('rec-app', message.id)).data[0]!;
    assert.equal(destination.status, 2);
    assert.equal(destination.statusText, 'fail');

    failing.delete('/recover');
    const recovering = await svix.endpoint.recover('rec-app', endpoint.id, {
      since: new Date(Date.now() - 3600_000),
    });
    assert.equal(typeof recovering.id, 'string');
    assert.equal(recovering.task, 'endpoint.recover');
    assert.equal(recovering.status, 'finished');
    assertDate(recovering.updatedAt, 'updatedAt');
    // Each call is a task of its own.
    const again = await svix.endpoint.recover('rec-app', endpoint.id, {
      since: new Date(Date.now() - 3600_000),
    });
    assert.notEqual(again.id, recovering.id);

    await waitFor(
      'the recovered delivery',
      async () => (await svix.endpoint.getStats('rec-app', endpoint.id)).success === 1,
    );
    assert.equal(requestsTo('/recover').length, 4);
    const succeeded = await svix.messageAttempt.listByEndpoint('rec-app', endpoint.id, { status: 0 });
    assert.equal(succeeded.data.length, 1);
    assertSuccessfulAttempt(succeeded.data[0]!, message.id, endpoint.id, 1);
    const failures = await svix.messageAttempt.listByEndpoint('rec-app', endpoint.id, { status: 2 });
    assert.equal(failures.data.length, 3);
  });

  test('replayMissing: an endpoint created later gets the earlier messages it matches, once, signed', async () => {
    await svix.application.create({ name: 'Replay missing', uid: 'late-app' });
    const early = await svix.message.create('late-app', { eventType: 'late.match', payload: { n: 1 } });
    await svix.message.create('late-app', { eventType: 'late.other', payload: { n: 2 } });
    const secret = newSecret();
    const endpoint = await svix.endpoint.create('late-app', {
      url: `${receiver.url}/late`,
      filterTypes: ['late.match'],
      secret,
    });
    const later = await svix.message.create('late-app', { eventType: 'late.match', payload: { n: 3 } });
    await waitFor('the message published after the endpoint', () => requestsTo('/late').length === 1);

    const replayed = await svix.endpoint.replayMissing('late-app', endpoint.id, {
      since: new Date(Date.now() - 3600_000),
    });
    assert.equal(typeof replayed.id, 'string');
    assert.equal(replayed.task, 'endpoint.replay');
    assert.equal(replayed.status, 'finished');
    assertDate(replayed.updatedAt, 'updatedAt');
    const [, missed] = await waitFor('the missed message', () => {
      const got = requestsTo('/late');
      return got.length === 2 && got;
    });
    // Signed with the endpoint's secret, under the message's own id.
    const verified = new Webhook(secret).verify(missed!.body, webhookHeaders(missed!)) as { n: number };
    assert.deepEqual(verified, { n: 1 });
    assert.equal(missed!.headers['webhook-id'], early.id);
    // Again: nothing is missing any more, and nothing is routed twice.
    const again = await t.call('POST', `/api/v1/app/late-app/endpoint/${endpoint.id}/replay-missing`, {
      since: new Date(Date.now() - 3600_000).toISOString(),
    });
    assert.equal(again.status, 202, JSON.stringify(again.body));
    assert.equal(again.body.deliveries, 0);
    const routed = await t.database.db.query<{ messageId: string }>(
      'select message_id as "messageId" from delivery where endpoint_id = $1 order by message_id',
      [endpoint.id],
    );
    assert.deepEqual(
      routed.rows.map((r) => r.messageId),
      [early.id, later.id].sort(),
    );
  });

  test('errors come back as ApiException with Svix-shaped bodies', async () => {
    const missing = await rejectsWith(404, () => svix.application.get('no-such-app'));
    assert.equal((missing.body as { code: string }).code, 'not_found');
    const invalid = await rejectsWith(422, () => svix.application.create({ name: '' }));
    const detail = (invalid.body as { detail: { loc: string[] }[] }).detail;
    assert.ok(Array.isArray(detail));
    assert.deepEqual(detail[0]!.loc, ['body', 'name']);
    const stranger = new Svix('not-a-key', { serverUrl: t.url, retryScheduleInMs: [] });
    await rejectsWith(401, () => stranger.application.list());
  });
});

function assertSuccessfulAttempt(a: MessageAttemptOut, msgId: string, endpointId: string, trigger: number) {
  assert.match(a.id, ATTEMPT_ID);
  assert.equal(a.msgId, msgId);
  assert.equal(a.endpointId, endpointId);
  assert.equal(a.status, 0);
  assert.equal(a.statusText, 'success');
  assert.equal(a.responseStatusCode, 204);
  assert.equal(typeof a.responseDurationMs, 'number');
  assert.equal(a.triggerType, trigger);
  assertDate(a.timestamp, 'attempt timestamp');
}

describe('edges of the contract the SDKs reach', () => {
  test('lists without a time filter ignore before and after, and keep their walk', async () => {
    await svix.application.create({ name: 'walk', uid: 'walk' });
    const made: string[] = [];
    for (let i = 0; i < 3; i++) {
      made.push((await svix.endpoint.create('walk', { url: `${receiver.url}/walk/${i}` })).id);
    }
    const ids = async (query: string) => {
      const page = await t.call('GET', `/api/v1/app/walk/endpoint${query}`);
      assert.equal(page.status, 200, JSON.stringify(page.body));
      return { ids: page.body.data.map((e: { id: string }) => e.id), done: page.body.done };
    };
    const plain = await ids('?limit=2');
    assert.deepEqual(plain, { ids: made.toReversed().slice(0, 2), done: false });
    // `after` once turned this list's walk to start from its oldest endpoint.
    assert.deepEqual(await ids('?limit=2&after=2030-01-01T00:00:00Z'), plain);
    assert.deepEqual(await ids('?limit=2&before=2000-01-01T00:00:00Z'), plain);
  });

  test('an event type named with 256 characters has a prevIterator the list takes back', async () => {
    for (const c of ['x', 'y']) await svix.eventType.create({ name: c.repeat(256), description: c });
    const first = await svix.eventType.list({ limit: 1, iterator: 'x'.repeat(255) });
    assert.deepEqual(
      first.data.map((e) => e.name),
      ['x'.repeat(256)],
    );
    const second = await svix.eventType.list({ limit: 1, iterator: first.iterator! });
    assert.deepEqual(
      second.data.map((e) => e.name),
      ['y'.repeat(256)],
    );
    assert.equal(second.prevIterator?.length, 257);
    const back = await svix.eventType.list({ limit: 1, iterator: second.prevIterator! });
    assert.deepEqual(
      back.data.map((e) => e.name),
      ['x'.repeat(256)],
    );
  });

  test('options the SDKs send are honoured or refused by name, never dropped', async () => {
    await svix.application.create({ name: 'sdk-options', uid: 'sdk-options' });
    await svix.application.create({ name: 'sdk-options-bare', uid: 'sdk-options-bare' });
    const endpoint = await svix.endpoint.create('sdk-options', { url: `${receiver.url}/sdk-options` });

    // listByEndpoint({ withMsg }): each attempt with its message.
    const msg = await svix.message.create('sdk-options', { eventType: 'order.paid', payload: { n: 7 } });
    await waitFor('the attempt', async () => {
      const page = await svix.messageAttempt.listByEndpoint('sdk-options', endpoint.id);
      return page.data.some((a) => a.status === 0);
    });
    const [attempt] = (
      await svix.messageAttempt.listByEndpoint('sdk-options', endpoint.id, { withMsg: true })
    ).data;
    assert.equal(attempt?.msg?.id, msg.id);
    assert.equal(attempt?.msg?.eventType, 'order.paid');
    assert.deepEqual(attempt?.msg?.payload, { n: 7 });
    const [plain] = (await svix.messageAttempt.listByEndpoint('sdk-options', endpoint.id)).data;
    assert.equal(plain?.msg, undefined);

    // sendExample({ exampleIndex }): that example of the newest schema; one past the list is a 422.
    await svix.eventType.create({
      name: 'order.shipped',
      description: 'shipped',
      schemas: { '1': { type: 'object', examples: [{ which: 'first' }, { which: 'second' }] } },
    });
    const second = await svix.endpoint.sendExample('sdk-options', endpoint.id, {
      eventType: 'order.shipped',
      exampleIndex: 1,
    });
    assert.deepEqual(second.payload, { which: 'second' });
    const past = await t.call('POST', `/api/v1/app/sdk-options/endpoint/${endpoint.id}/send-example`, {
      eventType: 'order.shipped',
      exampleIndex: 2,
    });
    assert.equal(past.status, 422, JSON.stringify(past.body));
    assert.deepEqual(past.body.detail[0].loc, ['body', 'exampleIndex']);

    // eventType featureFlags and groupName: refused by name.
    for (const field of ['featureFlags', 'groupName']) {
      const refused = await t.call('POST', '/api/v1/event-type', {
        name: `flagged.${field}`,
        description: 'd',
        [field]: field === 'featureFlags' ? ['beta'] : 'group',
      });
      assert.equal(refused.status, 422, JSON.stringify(refused.body));
      assert.deepEqual(refused.body.detail[0].loc, ['body', field]);
    }

    // application.list({ excludeAppsWithNoEndpoints }).
    const listed = async (options: Parameters<typeof svix.application.list>[0]) => {
      const uids: string[] = [];
      let iterator: string | null = null;
      for (;;) {
        const page = await svix.application.list({ ...options, limit: 250, iterator });
        uids.push(...page.data.map((a) => a.uid ?? ''));
        if (page.done) return uids;
        iterator = page.iterator;
      }
    };
    assert.ok((await listed({})).includes('sdk-options-bare'));
    const withEndpoints = await listed({ excludeAppsWithNoEndpoints: true });
    assert.ok(withEndpoints.includes('sdk-options'));
    assert.ok(!withEndpoints.includes('sdk-options-bare'));
    const disabled = await t.call('GET', '/api/v1/app?exclude_apps_with_disabled_endpoints=true');
    assert.equal(disabled.status, 422, JSON.stringify(disabled.body));
    assert.deepEqual(disabled.body.detail[0].loc, ['query', 'exclude_apps_with_disabled_endpoints']);
  });

  test('a secret of 75 bytes, the contract’s longest, can be imported and signs', async () => {
    await svix.application.create({ name: 'long-secret', uid: 'long-secret' });
    const secret = `whsec_${randomBytes(75).toString('base64')}`;
    assert.equal(secret.length, 'whsec_'.length + 100);
    const endpoint = await svix.endpoint.create('long-secret', {
      url: `${receiver.url}/long-secret`,
      secret,
    });
    assert.equal((await svix.endpoint.getSecret('long-secret', endpoint.id)).key, secret);
    await svix.message.create('long-secret', { eventType: 'e', payload: { n: 1 } });
    const [request] = await waitFor('the signed request', () => {
      const found = requestsTo('/long-secret');
      return found.length > 0 && found;
    });
    new Webhook(secret).verify(request!.body, request!.headers as Record<string, string>);
  });
});

describe('Svix header names (HERALD_SVIX_HEADERS)', () => {
  test('set, a receiver written for Svix verifies from svix-* headers alone; unset, none are sent', async () => {
    const svixNamed = await startTestHerald('svix_headers', { env: { HERALD_SVIX_HEADERS: 'true' } });
    try {
      const secret = newSecret();
      /** Publishes one message through `client` to an endpoint at `path`; its id. */
      const publishTo = async (client: Svix, path: string) => {
        await client.application.create({ name: 'names', uid: 'names' });
        await client.endpoint.create('names', { url: `${receiver.url}${path}`, secret });
        return (await client.message.create('names', { eventType: 'e', payload: { n: 1 } })).id;
      };
      const namedId = await publishTo(
        new Svix(ADMIN_KEY, { serverUrl: svixNamed.url, retryScheduleInMs: [] }),
        '/svix-named',
      );
      await publishTo(svix, '/standard-named');
      const firstTo = (path: string) => waitFor(`the request to ${path}`, () => requestsTo(path)[0]);
      const named = await firstTo('/svix-named');
      const standard = await firstTo('/standard-named');
      // As a receiver following Clerk's or Resend's documentation reads them: by name, nothing else.
      const svixOnly = {
        'svix-id': String(named.headers['svix-id']),
        'svix-timestamp': String(named.headers['svix-timestamp']),
        'svix-signature': String(named.headers['svix-signature']),
      };
      assert.deepEqual(new Webhook(secret).verify(named.body, svixOnly), { n: 1 });
      assert.equal(svixOnly['svix-id'], namedId);
      assert.deepEqual(
        [svixOnly['svix-id'], svixOnly['svix-timestamp'], svixOnly['svix-signature']],
        [named.headers['webhook-id'], named.headers['webhook-timestamp'], named.headers['webhook-signature']],
        'the same values under both names',
      );
      assert.deepEqual(
        Object.keys(standard.headers).filter((name) => name.startsWith('svix-')),
        [],
        'unset: the Standard Webhooks names only',
      );
      assert.deepEqual(new Webhook(secret).verify(standard.body, webhookHeaders(standard)), { n: 1 });
    } finally {
      await svixNamed.close();
    }
  });
});
