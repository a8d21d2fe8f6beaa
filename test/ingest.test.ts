// Invariant 11 end to end: verify the raw bytes, claim + outbox in one transaction, ACK after
// commit, duplicates observed and never republished, one business key on every outbound attempt.

import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import { mkdtemp, writeFile } from 'node:fs/promises';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { Webhook } from 'standardwebhooks';
import { createApp, createEndpoint } from './support/fixtures.ts';
import { startTestHerald, type TestHerald, testEnv } from './support/herald.ts';
import { signedHeaders } from './support/inbound.ts';
import { runHerald, startHerald } from './support/processes.ts';
import { type Receiver, startReceiver } from './support/receiver.ts';
import { waitFor, waitForLockWaiter } from './support/wait.ts';

const CLOCK_OFFSET = fileURLToPath(new URL('./support/clock-offset.ts', import.meta.url));

const SOURCE_SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const signer = new Webhook(SOURCE_SECRET.slice('whsec_'.length));
let t: TestHerald;
let receiver: Receiver;
let appId: string;

/** A Standard Webhooks source signed with SOURCE_SECRET, created through the API (201). */
async function createSource(uid: string, fields: Record<string, unknown> = {}) {
  const created = await t.call('POST', '/api/v1/source', {
    uid,
    scheme: 'standard-webhooks',
    secret: SOURCE_SECRET,
    app: 'tickets',
    eventType: 'ticket.changed',
    ...fields,
  });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  return created;
}

before(async () => {
  // Inbound deliveries may be larger than API requests (HERALD_MAX_BODY_BYTES, 1 MiB).
  t = await startTestHerald('ingest', { env: { HERALD_INGEST_MAX_BODY_BYTES: String(3 * 1024 * 1024) } });
  receiver = await startReceiver();
  appId = await createApp(t, 'tickets');
  await createEndpoint(t, appId, { url: `${receiver.url}/downstream` });
  const source = await t.call('POST', '/api/v1/source', {
    uid: 'helpdesk',
    scheme: 'standard-webhooks',
    secret: SOURCE_SECRET,
    app: 'tickets',
    eventType: 'ticket.changed',
    businessKey: '{{body.ticket}}:{{body.action}}',
  });
  assert.equal(source.status, 201, JSON.stringify(source.body));
  assert.equal(source.body.ingestPath, '/ingest/helpdesk');
  assert.equal(source.body.secret, undefined, 'secrets are write-only');
});
after(async () => {
  await t.close();
  await receiver.close();
});

const signed = (id: string, body: string, timestamp = new Date()) =>
  signedHeaders(signer, id, body, timestamp);

/** A string body goes out as text/plain unless `headers` name a type; bytes go out with none. */
async function deliver(
  headers: Record<string, string>,
  body: string | Buffer,
  source = 'helpdesk',
  base = t.url,
) {
  const response = await fetch(`${base}/ingest/${source}`, { method: 'POST', headers, body });
  return { status: response.status, body: await response.text() };
}

const count = async (table: string, where = 'true', params: unknown[] = []) =>
  (await t.database.db.query<{ n: number }>(`select count(*)::int as n from ${table} where ${where}`, params))
    .rows[0]!.n;

const tableCounts = async () => ({
  intake: await count('intake'),
  observation: await count('intake_observation'),
  message: await count('message'),
});

describe('verification happens before anything is stored', () => {
  test('a malformed or missing content type does not stand in the way of a genuine delivery', async () => {
    for (const [id, type] of [
      ['evt_type_json', 'json'],
      ['evt_type_list', 'application/json, text/plain'],
      ['evt_type_none', undefined],
    ] as const) {
      const body = JSON.stringify({ ticket: id, action: 'opened' });
      const { 'content-type': _, ...headers } = signed(id, body);
      const answer =
        type === undefined
          ? await deliver(headers, Buffer.from(body))
          : await deliver({ ...headers, 'content-type': type }, body);
      assert.equal(answer.status, 204, `${type}: ${answer.body}`);
    }
  });

  test('a changed byte, a stale timestamp, a missing signature or id: refused, nothing stored', async () => {
    const before = await tableCounts();
    const body = '{"ticket":1,"action":"opened"}';
    const good = signed('evt_bad_1', body);
    assert.equal((await deliver(good, body.replace('1', '2'))).status, 401);
    const stale = signed('evt_bad_2', body, new Date(Date.now() - 10 * 60_000));
    const staleAnswer = await deliver(stale, body);
    assert.equal(staleAnswer.status, 401);
    assert.equal(JSON.parse(staleAnswer.body).code, 'stale_timestamp');
    const { 'webhook-signature': _s, ...unsigned } = signed('evt_bad_3', body);
    assert.equal((await deliver(unsigned, body)).status, 401);
    const { 'webhook-id': _i, ...noId } = signed('evt_bad_4', body);
    assert.equal((await deliver(noId, body)).status, 400);
    assert.equal((await deliver({ ...good, 'webhook-signature': 'v1,!!!not-base64' }, body)).status, 401);
    assert.deepEqual(await tableCounts(), before);
  });

  test('an unknown source is refused before its body is read', async () => {
    // 2 MiB announced, a few bytes sent, the rest never: only an answer made before reading the
    // body can come back.
    const { port } = new URL(t.url);
    const answer = await new Promise<{ status: number; body: string }>((resolve, reject) => {
      const request = http.request(
        {
          host: '127.0.0.1',
          port,
          method: 'POST',
          path: '/ingest/no-such-source',
          headers: { 'content-type': 'application/json', 'content-length': String(2 * 1024 * 1024) },
        },
        (response) => {
          let body = '';
          response.on('data', (chunk) => {
            body += chunk;
          });
          response.on('end', () => resolve({ status: response.statusCode ?? 0, body }));
        },
      );
      request.on('error', reject);
      request.setTimeout(5_000, () => {
        request.destroy();
        reject(new Error('no answer before the body was sent'));
      });
      request.write('{"a":');
    });
    assert.equal(answer.status, 404);
    assert.equal(JSON.parse(answer.body).code, 'not_found');
  });

  test('unknown source 404, wrong method 405, body over HERALD_INGEST_MAX_BODY_BYTES 413 — and a missing business-key field 400', async () => {
    const body = '{"ticket":1,"action":"opened"}';
    assert.equal((await deliver(signed('x', body), body, 'nope')).status, 404);
    for (const method of ['GET', 'HEAD', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']) {
      const other = await fetch(`${t.url}/ingest/helpdesk`, { method });
      assert.equal(other.status, 405, method);
      assert.equal(other.headers.get('allow'), 'POST', method);
    }
    // Over the API's limit, within intake's: taken.
    const large = `{"ticket":"large","action":"opened","blob":"${'a'.repeat(2 * 1024 * 1024)}"}`;
    assert.equal((await deliver(signed('large', large), large)).status, 204);
    const huge = `{"ticket":1,"action":"opened","blob":"${'a'.repeat(4 * 1024 * 1024)}"}`;
    assert.equal((await deliver(signed('big', huge), huge)).status, 413);
    const noAction = '{"ticket":1}';
    const missing = await deliver(signed('evt_nokey', noAction), noAction);
    assert.equal(missing.status, 400);
    assert.equal(JSON.parse(missing.body).code, 'missing_business_key');
    // The refusal names the part of the template that failed, and why.
    assert.match(JSON.parse(missing.body).detail, /\{\{body\.action\}\} is missing/);
    const long = JSON.stringify({ ticket: 1, action: 'a'.repeat(600) });
    const tooLong = await deliver(signed('evt_longkey', long), long);
    assert.equal(tooLong.status, 400);
    assert.match(JSON.parse(tooLong.body).detail, /the key is \d+ characters, over 512/);
  });
});

test('a verified delivery refused for want of a business key is logged with its delivery id, the only record of it', async () => {
  const { proc, apiUrl } = await startHerald('api', testEnv(t.database.url, { LOG_LEVEL: 'info' }));
  try {
    assert.ok(apiUrl);
    const noAction = '{"ticket":7}';
    const refused = await deliver(signed('evt_logged_nokey', noAction), noAction, 'helpdesk', apiUrl);
    assert.equal(refused.status, 400);
    const record = await proc.waitForLog(/a verified delivery was refused/);
    assert.equal(record['deliveryId'], 'evt_logged_nokey');
    assert.match(String(record['why']), /\{\{body\.action\}\} is missing/);
    // A forged request is refused before it: nothing of it reaches the log.
    const forged = await deliver(signed('evt_forged_nokey', noAction), '{"ticket":8}', 'helpdesk', apiUrl);
    assert.equal(forged.status, 401);
    // Another authentic one after it: once its line is out, the forged one's would be too.
    const after = await deliver(signed('evt_logged_after', noAction), noAction, 'helpdesk', apiUrl);
    assert.equal(after.status, 400);
    await waitFor('the later refusal in the log', () =>
      proc.logs.some((r) => r['deliveryId'] === 'evt_logged_after'),
    );
    assert.ok(!proc.stdout.includes('evt_forged_nokey'), proc.describe());
  } finally {
    await proc.kill('SIGTERM');
  }
});

test('a template with two fields side by side is refused, naming the field: nothing would tell their values apart', async () => {
  const source = (uid: string, businessKey: string) => ({
    uid,
    scheme: 'standard-webhooks',
    secret: SOURCE_SECRET,
    app: 'tickets',
    eventType: 'ticket.changed',
    businessKey,
  });
  // {"a":"ab","b":"c"} and {"a":"a","b":"bc"} would both be `abc`.
  const refused = await t.call('POST', '/api/v1/source', source('adjacent', '{{body.a}}{{body.b}}'));
  assert.equal(refused.status, 422, JSON.stringify(refused.body));
  assert.deepEqual(refused.body.detail[0].loc, ['body', 'businessKey']);
  assert.match(refused.body.detail[0].msg, /separator between two fields/);
  const separated = await t.call('POST', '/api/v1/source', source('separated', 'x{{body.a}}-{{body.b}}'));
  assert.equal(separated.status, 201, JSON.stringify(separated.body));
  const patched = await t.call('PATCH', '/api/v1/source/separated', {
    businessKey: 'x{{delivery_id}}{{body.b}}',
  });
  assert.equal(patched.status, 422, JSON.stringify(patched.body));
  // A source that has such a template from before keeps it, and the rest of it can still change
  // (a secret rotated after a leak): its keys stay as its deliveries have them.
  await t.database.db.query(
    `update source set business_key = '{{body.a}}{{body.b}}' where uid = 'separated'`,
  );
  const rotated = await t.call('PATCH', '/api/v1/source/separated', {
    secret: 'whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD',
  });
  assert.equal(rotated.status, 200, JSON.stringify(rotated.body));
  assert.equal(rotated.body.businessKey, '{{body.a}}{{body.b}}');
});

test('two PATCHes of a source at once each keep what the other set', async () => {
  const made = await createSource('patched-at-once');
  const locker = new pg.Client({ connectionString: t.database.url });
  await locker.connect();
  try {
    // Both PATCHes read the source, then wait behind this lock on its row.
    await locker.query('begin');
    await locker.query('select 1 from source where id = $1 for update', [made.body.id]);
    const patches = [
      t.call('PATCH', '/api/v1/source/patched-at-once', { eventType: 'ticket.reopened' }),
      t.call('PATCH', '/api/v1/source/patched-at-once', { businessKey: 'pa:{{body.ticket}}' }),
    ];
    await waitForLockWaiter(t.database.db, ['from source where id', 'update source set'], 10_000, 2);
    await locker.query('rollback');
    for (const answer of await Promise.all(patches))
      assert.equal(answer.status, 200, JSON.stringify(answer.body));
  } finally {
    await locker.end();
  }
  const source = await t.call('GET', '/api/v1/source/patched-at-once');
  assert.equal(source.body.eventType, 'ticket.reopened');
  assert.equal(source.body.businessKey, 'pa:{{body.ticket}}');
});

describe('claim and outbox', () => {
  test('a redelivery of a claimed id is a duplicate (2xx) even when the changed template makes no key of it', async () => {
    const made = await t.call('POST', '/api/v1/source', {
      uid: 'rekeyed',
      scheme: 'standard-webhooks',
      secret: SOURCE_SECRET,
      app: 'tickets',
      eventType: 'ticket.changed',
      businessKey: '{{body.ticket}}:{{body.action}}',
    });
    assert.equal(made.status, 201, JSON.stringify(made.body));
    const body = '{"ticket":"rk","action":"opened"}';
    const first = signed('evt_rekeyed', body);
    assert.equal((await deliver(first, body, 'rekeyed')).status, 204);
    // The template now reads a header that the provider's retries do not carry.
    const patched = await t.call('PATCH', '/api/v1/source/rekeyed', {
      businessKey: '{{header.x-first-try}}',
    });
    assert.equal(patched.status, 200, JSON.stringify(patched.body));
    let n = 0;
    await waitFor('the new template to be in effect', async () => {
      const fresh = `{"ticket":"rk${++n}","action":"opened"}`;
      return (await deliver(signed(`evt_rekeyed_${n}`, fresh), fresh, 'rekeyed')).status === 400;
    });
    const again = await deliver(signed('evt_rekeyed', body), body, 'rekeyed');
    assert.equal(again.status, 204, again.body);
    const observed = await t.database.db.query<{ duplicate: boolean }>(
      `select o.duplicate from intake_observation o join intake i on i.id = o.intake_id
        where i.source_id = $1 and i.delivery_id = 'evt_rekeyed' order by o.id`,
      [made.body.id],
    );
    assert.deepEqual(
      observed.rows.map((r) => r.duplicate),
      [false, true],
    );
  });

  test('an accepted delivery becomes one message, relayed with the business key as Idempotency-Key', async () => {
    const body = '{"ticket":42,"action":"closed","by":"grace hopper"}';
    assert.equal((await deliver(signed('evt_42', body), body)).status, 204);
    const [request] = await waitFor('the relayed request', () => {
      const found = receiver.requests.filter((r) => r.body === body);
      return found.length > 0 && found;
    });
    assert.equal(request!.headers['idempotency-key'], '42:closed');
    const intake = await t.database.db.query<{ message_id: string; business_key: string }>(
      `select message_id, business_key from intake where delivery_id = 'evt_42'`,
    );
    assert.equal(intake.rows[0]!.business_key, '42:closed');
    assert.equal(request!.headers['webhook-id'], intake.rows[0]!.message_id);
    // Privacy: the intake keeps a digest, not the content. (The marker has letters outside hex, so
    // it cannot turn up by chance in an id or a digest.)
    const row = await t.database.db.query<{ row: string }>(
      `select row_to_json(i)::text as row from intake i where delivery_id = 'evt_42'`,
    );
    assert.ok(!row.rows[0]!.row.includes('hopper'));
  });

  test('a business key a header cannot carry as it is goes out percent-encoded, and is delivered', async () => {
    // The key reads the action: a line break and text beyond Latin-1 in it. The HTTP client refuses
    // such a header value, which failed every attempt (and counted against the endpoint).
    const body = JSON.stringify({ ticket: 44, action: 'résolu ✓\r\nx-injected: 1' });
    assert.equal((await deliver(signed('evt_44', body), body)).status, 204);
    const [request] = await waitFor('the relayed request', () => {
      const found = receiver.requests.filter((r) => r.body === body);
      return found.length > 0 && found;
    });
    // Rendered with the value's `:` encoded (the template's separator: business-key.ts), then sent
    // percent-encoded whole.
    const rendered = '44:résolu ✓\r\nx-injected%3A 1';
    assert.equal(request!.headers['idempotency-key'], encodeURIComponent(rendered));
    assert.equal(request!.headers['x-injected'], undefined);
    const intake = await t.database.db.query<{ business_key: string }>(
      `select business_key from intake where delivery_id = 'evt_44'`,
    );
    assert.equal(intake.rows[0]!.business_key, rendered, 'stored as rendered');

    // A key that reads like another one encoded is encoded too: two keys never go out alike.
    const lookalike = JSON.stringify({ ticket: 44, action: encodeURIComponent('résolu ✓\r\nx-injected: 1') });
    assert.equal((await deliver(signed('evt_44_lookalike', lookalike), lookalike)).status, 204);
    const [second] = await waitFor('the second relayed request', () => {
      const found = receiver.requests.filter((r) => r.body === lookalike);
      return found.length > 0 && found;
    });
    assert.notEqual(second!.headers['idempotency-key'], request!.headers['idempotency-key']);
    assert.equal(
      decodeURIComponent(second!.headers['idempotency-key'] as string),
      `44:${encodeURIComponent('résolu ✓\r\nx-injected: 1').replaceAll('%', '%25')}`,
    );
  });

  test('a JSON body that begins with a byte-order mark is relayed as the JSON text, without the mark', async () => {
    const json = '{"ticket":43,"action":"opened"}';
    const body = `\uFEFF${json}`;
    assert.equal((await deliver(signed('evt_bom', body), body)).status, 204);
    const [request] = await waitFor('the relayed request', () => {
      const found = receiver.requests.filter((r) => r.body === json);
      return found.length > 0 && found;
    });
    assert.equal(request!.headers['idempotency-key'], '43:opened');
    const intake = await t.database.db.query<{ message_id: string }>(
      `select message_id from intake where delivery_id = 'evt_bom'`,
    );
    const message = await t.call('GET', `/api/v1/app/tickets/msg/${intake.rows[0]!.message_id}`);
    assert.equal(message.status, 200, JSON.stringify(message.body));
    assert.deepEqual(message.body.payload, JSON.parse(json));
  });

  test('a body that is not UTF-8 is relayed as base64, byte for byte; other text as {"body": text}', async () => {
    await createSource('raw-bytes');
    const relayedPayload = async (deliveryId: string) => {
      const intake = await t.database.db.query<{ message_id: string }>(
        'select message_id from intake where delivery_id = $1',
        [deliveryId],
      );
      const message = await t.call('GET', `/api/v1/app/tickets/msg/${intake.rows[0]!.message_id}`);
      assert.equal(message.status, 200, JSON.stringify(message.body));
      return message.body.payload;
    };
    // A Latin-1 form post and bytes no text encoding holds: signed as bytes, kept as bytes.
    for (const [id, bytes] of [
      ['evt_latin1', Buffer.from('name=Ren\xe9', 'latin1')],
      ['evt_binary', Buffer.from([0xff, 0xfe, 0x41, 0x80])],
    ] as const) {
      const timestamp = Math.floor(Date.now() / 1000);
      const signature = crypto
        .createHmac('sha256', Buffer.from(SOURCE_SECRET.slice('whsec_'.length), 'base64'))
        .update(Buffer.concat([Buffer.from(`${id}.${timestamp}.`), bytes]))
        .digest('base64');
      const response = await fetch(`${t.url}/ingest/raw-bytes`, {
        method: 'POST',
        headers: {
          'content-type': 'application/octet-stream',
          'webhook-id': id,
          'webhook-timestamp': String(timestamp),
          'webhook-signature': `v1,${signature}`,
        },
        body: bytes,
      });
      assert.equal(response.status, 204, await response.text());
      const payload = await relayedPayload(id);
      assert.deepEqual(Object.keys(payload), ['bodyBase64'], JSON.stringify(payload));
      assert.deepEqual(Buffer.from(payload.bodyBase64, 'base64'), bytes);
    }
    // Other text whole: a byte-order mark is part of what was signed; `null` with a space JSON does
    // not know is text too (stored as JSON that does not parse, it failed every read of it).
    for (const [id, text] of [
      ['evt_text', 'name=René&plan=pro'],
      ['evt_text_bom', '\uFEFFid,amount\n7,12.50'],
      ['evt_nbsp_null', '\u00A0null'],
      ['evt_null_ls', 'null\u2028'],
    ] as const) {
      const sent = await deliver({ ...signed(id, text), 'content-type': 'text/plain' }, text, 'raw-bytes');
      assert.equal(sent.status, 204, sent.body);
      assert.deepEqual(await relayedPayload(id), { body: text }, id);
    }

    // JSON that is not an object (SendGrid's and PandaDoc's arrays) keeps its bytes inside
    // {"body": …}: an id past a double's precision stays itself.
    const storedPayload = async (deliveryId: string) => {
      const { rows } = await t.database.db.query<{ payload: string }>(
        'select m.payload from intake i join message m on m.id = i.message_id where i.delivery_id = $1',
        [deliveryId],
      );
      return rows[0]!.payload;
    };
    for (const [id, json] of [
      ['evt_array', '[{"id":1234567890123456789,"amt":1.50}]'],
      ['evt_number', ' 1e400 '],
      ['evt_null', 'null'],
      ['evt_string', '"caf\u00e9"'],
    ] as const) {
      const answer = await deliver(
        { ...signed(id, json), 'content-type': 'application/json' },
        json,
        'raw-bytes',
      );
      assert.equal(answer.status, 204, answer.body);
      assert.equal(await storedPayload(id), `{"body":${json}}`);
    }

    // U+0000, which PostgreSQL's text and jsonb cannot hold, is accepted and kept: the payload is
    // stored as JSON text, where a NUL is the escape \u0000, never the character itself.
    const nulText = 'line one\u0000line two';
    const textAnswer = await deliver(
      { ...signed('evt_nul_text', nulText), 'content-type': 'text/plain' },
      nulText,
      'raw-bytes',
    );
    assert.equal(textAnswer.status, 204, textAnswer.body);
    assert.deepEqual(await relayedPayload('evt_nul_text'), { body: nulText });
    for (const [id, json] of [
      ['evt_nul_json', '{"note":"a\\u0000b"}'],
      ['evt_nul_array', '["\\u0000"]'],
    ] as const) {
      const answer = await deliver(
        { ...signed(id, json), 'content-type': 'application/json' },
        json,
        'raw-bytes',
      );
      assert.equal(answer.status, 204, answer.body);
      assert.equal(await storedPayload(id), id === 'evt_nul_json' ? json : `{"body":${json}}`);
    }

    // JSON nested deeper than a payload may be (128) is relayed whole, as text: as a payload it
    // would be refused, and every reader that walks it could run out of stack.
    const deep = `{"a":${'['.repeat(5000)}${']'.repeat(5000)}}`;
    const deepAnswer = await deliver(
      { ...signed('evt_deep', deep), 'content-type': 'application/json' },
      deep,
      'raw-bytes',
    );
    assert.equal(deepAnswer.status, 204, deepAnswer.body);
    assert.deepEqual(await relayedPayload('evt_deep'), { body: deep });
    const list = await t.call('GET', '/api/v1/app/tickets/msg?limit=5');
    assert.equal(list.status, 200, JSON.stringify(list.body));
  });

  test('a Slack url_verification handshake is answered with its challenge, an app_rate_limited notice acknowledged; neither is stored', async () => {
    const secret = 'slack-signing-secret';
    await createSource('slack-events', { scheme: 'slack', secret });
    const slackSigned = (body: string) => {
      const timestamp = Math.floor(Date.now() / 1000);
      const signature = crypto.createHmac('sha256', secret).update(`v0:${timestamp}:${body}`).digest('hex');
      return {
        'content-type': 'application/json',
        'x-slack-request-timestamp': String(timestamp),
        'x-slack-signature': `v0=${signature}`,
      };
    };
    const before = await tableCounts();
    const handshake =
      '{"token":"t","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}';
    const answer = await deliver(slackSigned(handshake), handshake, 'slack-events');
    assert.equal(answer.status, 200, answer.body);
    assert.deepEqual(JSON.parse(answer.body), {
      challenge: '3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P',
    });
    assert.deepEqual(await tableCounts(), before, 'a handshake is not an event');
    // Unsigned, it is refused like any request.
    const forged = await deliver(
      { ...slackSigned(handshake), 'x-slack-signature': `v0=${'0'.repeat(64)}` },
      handshake,
      'slack-events',
    );
    assert.equal(forged.status, 401);
    // Slack's notice that it drops the app's events for a minute carries no event_id: answered
    // 2xx (an error would count towards Slack turning the subscription off), and stored nowhere.
    const limited =
      '{"token":"t","team_id":"T123","minute_rate_limited":1518467820,"api_app_id":"A123","type":"app_rate_limited"}';
    assert.equal((await deliver(slackSigned(limited), limited, 'slack-events')).status, 204);
    assert.deepEqual(await tableCounts(), before, 'a notice is not an event');
    // And the events that follow are relayed by their event_id — even one that reads like the
    // handshake's: a handshake is told by its type.
    for (const id of ['Ev01', 'url_verification']) {
      const event = `{"type":"event_callback","event_id":"${id}","event":{"type":"app_mention"}}`;
      assert.equal((await deliver(slackSigned(event), event, 'slack-events')).status, 204);
      assert.equal(await count('intake', 'delivery_id = $1', [id]), 1);
    }
  });

  test('ids past 2^53 in the business key are two events, each relayed under its own key', async () => {
    const tickets = ['1234567890123456789', '1234567890123456790'];
    for (const [i, ticket] of tickets.entries()) {
      const body = `{"ticket":${ticket},"action":"merged"}`;
      assert.equal((await deliver(signed(`evt_big_${i}`, body), body)).status, 204);
    }
    const keys = await waitFor('both relayed requests', () => {
      const found = receiver.requests
        .filter((r) => r.body.includes('"merged"'))
        .map((r) => r.headers['idempotency-key']);
      return found.length === 2 && found;
    });
    assert.deepEqual(keys.sort(), tickets.map((ticket) => `${ticket}:merged`).sort());
    assert.equal(await count('intake', "business_key like '%:merged'"), 2);
    assert.equal(await count('message', "business_key like '%:merged'"), 2);
  });

  test('50 concurrent deliveries of one id yield one message and 49 duplicate observations', async () => {
    const body = '{"ticket":7,"action":"reopened"}';
    const headers = signed('evt_7', body);
    const answers = await Promise.all(Array.from({ length: 50 }, () => deliver(headers, body)));
    assert.deepEqual(
      answers.map((a) => a.status),
      answers.map(() => 204),
    );
    assert.equal(await count('intake', `delivery_id = 'evt_7'`), 1);
    const intake = await t.database.db.query<{ id: string; message_id: string }>(
      `select id, message_id from intake where delivery_id = 'evt_7'`,
    );
    const { id, message_id } = intake.rows[0]!;
    assert.equal(await count('intake_observation', 'intake_id = $1 and duplicate', [id]), 49);
    assert.equal(await count('intake_observation', 'intake_id = $1 and not duplicate', [id]), 1);
    assert.equal(await count('message', `business_key = '7:reopened'`), 1);
    await waitFor('the one relayed request', () => receiver.requests.some((r) => r.body === body));
    assert.equal(await count('delivery', 'message_id = $1', [message_id]), 1);
  });

  test('another delivery id carrying the same business event joins the first message', async () => {
    const first = '{"ticket":9,"action":"merged","attempt":1}';
    const second = '{"ticket":9,"action":"merged","attempt":2}';
    assert.equal((await deliver(signed('evt_9a', first), first)).status, 204);
    assert.equal((await deliver(signed('evt_9b', second), second)).status, 204);
    const rows = await t.database.db.query<{ message_id: string }>(
      `select message_id from intake where delivery_id in ('evt_9a', 'evt_9b')`,
    );
    assert.equal(rows.rowCount, 2);
    assert.equal(new Set(rows.rows.map((r) => r.message_id)).size, 1, 'one message for one business key');
    const claims = await t.herald.core.metrics.registry.getSingleMetric('herald_intake_claims_total')?.get();
    const joined = (claims?.values ?? []).find(
      (v) => v.labels['source'] === 'helpdesk' && v.labels['outcome'] === 'joined',
    );
    assert.equal(joined?.value, 1, 'the second delivery id is counted as joined, not as a relayed claim');
  });

  test('keyed by its event and body, a GitHub request sent again under a new delivery id joins the first message', async () => {
    const created = await t.call('POST', '/api/v1/source', {
      uid: 'repo-events',
      scheme: 'github',
      secret: 'github-hook-secret',
      app: 'tickets',
      eventType: 'repo.push',
      businessKey: '{{header.x-github-event}}:{{body_sha256}}',
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const github = (id: string, body: string) => ({
      'content-type': 'application/json',
      'x-github-delivery': id,
      'x-github-event': 'push',
      'x-hub-signature-256': `sha256=${crypto.createHmac('sha256', 'github-hook-secret').update(body).digest('hex')}`,
    });
    const push = '{"ref":"refs/heads/main","after":"9f2d03b"}';
    // The genuine delivery, then its bytes and signature under an id of the sender's choosing.
    assert.equal((await deliver(github('d-1', push), push, 'repo-events')).status, 204);
    assert.equal((await deliver(github('d-forged', push), push, 'repo-events')).status, 204);
    const other = '{"ref":"refs/heads/main","after":"41cf635"}';
    assert.equal((await deliver(github('d-2', other), other, 'repo-events')).status, 204);
    const { rows } = await t.database.db.query<{
      delivery_id: string;
      message_id: string;
      business_key: string;
    }>(
      `select i.delivery_id, i.message_id, i.business_key from intake i join source s on s.id = i.source_id
        where s.uid = 'repo-events' order by i.delivery_id`,
    );
    const byId = new Map(rows.map((r) => [r.delivery_id, r]));
    assert.equal(byId.get('d-forged')!.message_id, byId.get('d-1')!.message_id, 'the replay made no message');
    assert.notEqual(
      byId.get('d-2')!.message_id,
      byId.get('d-1')!.message_id,
      'another push is another event',
    );
    assert.equal(
      byId.get('d-1')!.business_key,
      `push:${crypto.createHash('sha256').update(push).digest('hex')}`,
    );
  });

  test('a store failure answers 503 and keeps nothing, so the sender retries', async () => {
    await t.database.db.query(`create function fail_intake() returns trigger language plpgsql as $$
      begin if new.delivery_id = 'evt_fail' then raise exception 'disk full'; end if; return new; end $$`);
    await t.database.db.query(
      'create trigger fail_intake before insert on intake for each row execute function fail_intake()',
    );
    try {
      const body = '{"ticket":5,"action":"opened"}';
      const before = await tableCounts();
      const answer = await deliver(signed('evt_fail', body), body);
      assert.equal(answer.status, 503);
      assert.equal(JSON.parse(answer.body).code, 'store_unavailable');
      assert.ok(!answer.body.includes('disk full'), 'no internals in the response');
      assert.deepEqual(await tableCounts(), before);
    } finally {
      await t.database.db.query('drop trigger fail_intake on intake');
      await t.database.db.query('drop function fail_intake()');
    }
  });
});

describe('concurrent receipts of one delivery id or one business key', () => {
  // A batch of receipts is recorded by one call whose statements each take a fresh snapshot. A
  // concurrent transaction that claims the same delivery id, or publishes the same business key,
  // and commits while this batch waits for it at the unique index must be seen, not overwritten
  // nor duplicated. The open transaction here plays that concurrent receipt.
  /** Another connection with an open transaction that has run `sql` (its concurrent receipt). */
  async function concurrently<R extends pg.QueryResultRow>(sql: string, params: unknown[]) {
    const other = new pg.Client({ connectionString: t.database.url });
    await other.connect();
    await other.query('begin');
    const result = await other.query<R>(sql, params);
    return {
      rows: result.rows,
      commit: () => other.query('commit').then(() => {}),
      end: () => other.end(),
    };
  }
  const ids = async () => {
    const { rows } = await t.database.db.query<{ sourceId: string; appId: string }>(
      `select id as "sourceId", app_id as "appId" from source where uid = 'helpdesk'`,
    );
    return rows[0]!;
  };
  /**
   * Delivers `id` while `other` is open, lets `other` commit once the receipt waits for it, and
   * returns what was recorded of the receipt: its observations with the message its claim names.
   */
  async function receivedAgainst(
    other: { commit(): Promise<void>; end(): Promise<void> },
    id: string,
    body: string,
  ) {
    try {
      const answer = await deliverAgainst(other, id, body);
      assert.equal(answer.status, 204, answer.body);
    } finally {
      await other.end();
    }
    const { rows } = await t.database.db.query<{ duplicate: boolean; messageId: string | null }>(
      `select o.duplicate, i.message_id as "messageId"
         from intake i join intake_observation o on o.intake_id = i.id where i.delivery_id = $1`,
      [id],
    );
    return rows;
  }

  /** Sends, waits until its statement waits for the open transaction, then lets that commit. */
  async function deliverAgainst(other: { commit(): Promise<void> }, id: string, body: string) {
    const answer = deliver(signed(id, body), body);
    await waitForLockWaiter(t.database.db, 'herald_record_receipts');
    await other.commit();
    return answer;
  }

  test('the same delivery id claimed concurrently: a duplicate, nothing published', async () => {
    const { sourceId, appId } = await ids();
    const body = '{"ticket":21,"action":"opened"}';
    const other = await concurrently(
      `insert into intake (source_id, app_id, delivery_id, business_key, body_sha256)
       values ($1, $2, 'evt_race_id', '21:opened', '\\x00')`,
      [sourceId, appId],
    );
    assert.deepEqual(await receivedAgainst(other, 'evt_race_id', body), [
      { duplicate: true, messageId: null },
    ]);
    assert.equal(await count('message', `business_key = '21:opened'`), 0);
  });

  test('the same business key published concurrently: the new claim joins that message', async () => {
    const { sourceId, appId } = await ids();
    const body = '{"ticket":22,"action":"opened"}';
    const other = await concurrently<{ id: string }>(
      `insert into message (app_id, event_type, payload, idempotency_key, business_key, payload_expires_at)
       values ($1, 'ticket.changed', '{}', $2, '22:opened', now() + interval '1 day') returning id`,
      [appId, `intake:${sourceId}:22:opened`],
    );
    const theirs = other.rows[0]!.id;
    assert.deepEqual(await receivedAgainst(other, 'evt_race_key', body), [
      { duplicate: false, messageId: theirs },
    ]);
    assert.equal(await count('message', `business_key = '22:opened'`), 1);
  });
});

describe('the outbound leg', () => {
  test('every attempt of every cycle carries the same business key', async () => {
    let failing = true;
    receiver.respond = (request) =>
      request.path === '/flaky' && failing ? { status: 503 } : { status: 204 };
    const app = await createApp(t, 'relay');
    const ep = await createEndpoint(t, app, { url: `${receiver.url}/flaky` });
    await createSource('relay-src', { app: 'relay' });
    const body = '{"ticket":11,"action":"opened"}';
    assert.equal((await deliver(signed('evt_relay', body), body, 'relay-src')).status, 204);
    await waitFor(
      'three failed attempts',
      () => receiver.requests.filter((r) => r.path === '/flaky').length >= 3,
    );
    failing = false;
    await waitFor(
      'the success',
      () => receiver.requests.filter((r) => r.path === '/flaky').length >= 4,
      20_000,
    );
    const msg = (
      await t.database.db.query<{ message_id: string }>(
        `select message_id from intake where delivery_id = 'evt_relay'`,
      )
    ).rows[0]!.message_id;
    // A second cycle (resend) keeps the key too.
    await t.call('POST', `/api/v1/app/${app}/msg/${msg}/endpoint/${ep}/resend`);
    const sent = await waitFor('the resent request', () => {
      const all = receiver.requests.filter((r) => r.path === '/flaky');
      return all.length >= 5 && all;
    });
    assert.deepEqual(new Set(sent.map((r) => r.headers['idempotency-key'])), new Set(['evt_relay']));
    assert.deepEqual(new Set(sent.map((r) => r.headers['webhook-id'])), new Set([msg]));
  });
});

describe('source secret rotation', () => {
  const NEW_SECRET = 'whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD';

  /**
   * A source verified once through the API at `base` (so that it holds the source's verifier),
   * then given NEW_SECRET with the old one overlapping for `overlapSeconds`.
   */
  async function rotateCached(uid: string, overlapSeconds: number, base = t.url) {
    await createSource(uid);
    const first = '{"ticket":100,"action":"a"}';
    assert.equal((await deliver(signed(`evt_${uid}_0`, first), first, uid, base)).status, 204);
    const rotated = await t.call('PATCH', `/api/v1/source/${uid}`, {
      secret: NEW_SECRET,
      secretOverlapSeconds: overlapSeconds,
    });
    assert.equal(rotated.status, 200);
  }

  test('the replaced secret verifies during its overlap and stops at its end; the new one verifies', async () => {
    await rotateCached('rotating', 2);
    const body = '{"ticket":101,"action":"b"}';
    assert.equal(
      (await deliver(signed('evt_rot_1', body), body, 'rotating')).status,
      204,
      'old secret, in overlap',
    );
    let n = 2;
    await waitFor(
      'the old secret to stop verifying',
      async () => (await deliver(signed(`evt_rot_${n++}`, body), body, 'rotating')).status === 401,
      10_000,
      200,
    );
    const fresh = new Webhook(NEW_SECRET.slice('whsec_'.length));
    const headers = signedHeaders(fresh, 'evt_rot_new', body);
    assert.equal((await deliver(headers, body, 'rotating')).status, 204, 'the new secret verifies');
  });

  test("the replaced secret stops verifying when the database says its overlap ended, on an API whose clock is a minute behind the database's", async () => {
    // The overlap's end is written by the database's clock; the API's verifier for the source
    // must go when the database says the old secret expired, not when its own clock reaches that
    // time, a minute later (test/support/clock-offset.ts shifts the child's clock).
    const { proc, apiUrl } = await startHerald(
      'api',
      testEnv(t.database.url, {
        LOG_LEVEL: 'info',
        NODE_OPTIONS: `--import ${CLOCK_OFFSET}`,
        TEST_CLOCK_OFFSET_MS: '-60000',
      }),
    );
    try {
      assert.ok(apiUrl);
      await rotateCached('rotating-skewed', 1, apiUrl);
      const body = '{"ticket":201,"action":"b"}';
      // Cached by the API with the old secret, which the database expires in a second.
      const inOverlap = await deliver(signed('evt_skew_1', body), body, 'rotating-skewed', apiUrl);
      assert.equal(inOverlap.status, 204);
      await waitFor('the overlap to end by the database', async () => {
        const { rows } = await t.database.db.query<{ ended: boolean }>(
          `select bool_and(expires_at < now()) as ended from source_secret s join source o on o.id = s.source_id
            where o.uid = 'rotating-skewed' and s.expires_at is not null`,
        );
        return rows[0]!.ended === true;
      });
      assert.equal(
        (await deliver(signed('evt_skew_2', body), body, 'rotating-skewed', apiUrl)).status,
        401,
        'the old secret no longer verifies',
      );
    } finally {
      await proc.kill('SIGTERM');
    }
  });

  test('rotations leave at most five secrets overlapping: past that they are refused, and the expired ones go', async () => {
    // Every secret that verifies is tried on a request that verifies with none: unbounded, a key
    // that rotated again and again would make each forged request cost thousands of HMACs.
    await createSource('rotated-often');
    const secret = (n: number) => `whsec_${Buffer.alloc(24, n).toString('base64')}`;
    const rotate = (secrets: string[], overlap = 3600) =>
      t.call('PATCH', '/api/v1/source/rotated-often', { secret: secrets, secretOverlapSeconds: overlap });
    // Five at once, current together: the one from the creation overlaps.
    assert.equal((await rotate([1, 2, 3, 4, 5].map(secret))).status, 200);
    // Those five would overlap beside the first: six.
    const refused = await rotate([secret(6)]);
    assert.equal(refused.status, 400, JSON.stringify(refused.body));
    assert.equal(refused.body.code, 'limit_reached');
    const live = async () =>
      (
        await t.database.db.query<{ n: number }>(
          `select count(*)::int as n from source_secret s join source o on o.id = s.source_id
            where o.uid = 'rotated-often'`,
        )
      ).rows[0]!.n;
    assert.equal(await live(), 6, 'nothing of the refused rotation was kept');
    // With no overlap it goes through (a leaked secret replaced): the others stop verifying at once.
    assert.equal((await rotate([secret(8)], 0)).status, 200);
    const verifying = await t.database.db.query<{ n: number }>(
      `select count(*)::int as n from source_secret s join source o on o.id = s.source_id
        where o.uid = 'rotated-often' and (s.expires_at is null or s.expires_at > now())`,
    );
    assert.equal(verifying.rows[0]!.n, 1, 'only the new secret verifies');
    await t.database.db.query(
      `delete from source_secret s using source o where o.id = s.source_id and o.uid = 'rotated-often' and s.expires_at <= now()`,
    );
    assert.equal((await rotate([1, 2, 3, 4, 5].map(secret))).status, 200);
    assert.equal((await rotate([secret(6)])).status, 400, 'the limit holds again with an overlap');
    // Once the overlaps have ended (here: moved into the past), a rotation goes through, and the
    // expired secrets are deleted, not kept for ever.
    await t.database.db.query(
      `update source_secret s set expires_at = now() - interval '1 second'
         from source o where o.id = s.source_id and o.uid = 'rotated-often' and s.expires_at is not null`,
    );
    assert.equal((await rotate([secret(7)])).status, 200);
    assert.equal(await live(), 6, 'the five current ones overlapping, and the new one');
  });
});

describe('source changes made anywhere', () => {
  // The API caches the source of every request and evicts it when the database announces a change
  // (migration 0006's trigger): a change made behind herald's back — here plain SQL — must take
  // effect on the next receipts, not whenever an entry happens to expire.
  test('an update and a delete in SQL take effect on the next receipts', async () => {
    await createSource('changing', { eventType: 'ticket.before' });
    const moved = await createApp(t, 'tickets-moved');
    const relayedAs = async (deliveryId: string) =>
      (
        await t.database.db.query<{ eventType: string; appId: string; businessKey: string }>(
          `select m.event_type as "eventType", m.app_id as "appId", i.business_key as "businessKey"
             from intake i join message m on m.id = i.message_id where i.delivery_id = $1`,
          [deliveryId],
        )
      ).rows[0];
    const body = '{"ticket":31,"action":"opened"}';
    assert.equal((await deliver(signed('evt_change_1', body), body, 'changing')).status, 204);
    assert.deepEqual(await relayedAs('evt_change_1'), {
      eventType: 'ticket.before',
      appId,
      businessKey: 'evt_change_1',
    });

    // Where receipts go is read from the source row at once; the business key template is compiled
    // from the cached row, so it shows when the announcement evicted that row. No updated_at bump.
    await t.database.db.query(
      `update source set event_type = 'ticket.after', app_id = $1, business_key = '{{body.ticket}}:moved'
        where uid = 'changing'`,
      [moved],
    );
    let n = 1;
    const routed: Array<[string | undefined, string | undefined]> = [];
    await waitFor(
      'receipts to relay under the new business key',
      async () => {
        const id = `evt_change_${++n}`;
        assert.equal((await deliver(signed(id, body), body, 'changing')).status, 204);
        const relayed = await relayedAs(id);
        routed.push([relayed?.eventType, relayed?.appId]);
        return relayed?.businessKey === '31:moved';
      },
      2000, // well within the cache's 5-second age limit: only the announcement can evict in time
    );
    // Every receipt since the update, the first included, went where the live row says.
    assert.deepEqual(
      routed,
      routed.map(() => ['ticket.after', moved]),
      'routed by the live row',
    );

    await t.database.db.query(`delete from source where uid = 'changing'`);
    await waitFor(
      'receipts for the deleted source to be refused',
      async () => (await deliver(signed(`evt_change_${++n}`, body), body, 'changing')).status === 404,
      2000,
    );
  });
});

describe('a source that cannot verify', () => {
  test('a source no verifier can be built for is refused when created or changed, and stays as it was', async () => {
    const malformed = await t.call('POST', '/api/v1/source', {
      uid: 'malformed-secret',
      scheme: 'standard-webhooks',
      secret: 'whsec_not base64!',
      app: 'tickets',
      eventType: 'ticket.changed',
    });
    assert.equal(malformed.status, 422, JSON.stringify(malformed.body));
    assert.deepEqual(malformed.body.detail[0].loc, ['body', 'secret']);

    // AWS signs every topic's messages alike: an SNS source must say which topics it takes.
    const anyTopic = await t.call('POST', '/api/v1/source', {
      uid: 'from-sns',
      scheme: 'aws-sns',
      app: 'tickets',
      eventType: 'ticket.changed',
    });
    assert.equal(anyTopic.status, 422, JSON.stringify(anyTopic.body));
    assert.deepEqual(anyTopic.body.detail[0].loc, ['body', 'settings', 'topicArns']);
    const sns = await t.call('POST', '/api/v1/source', {
      uid: 'from-sns',
      scheme: 'aws-sns',
      settings: { topicArns: ['arn:aws:sns:us-east-1:123456789012:tickets'] },
      app: 'tickets',
      eventType: 'ticket.changed',
    });
    assert.equal(sns.status, 201, JSON.stringify(sns.body));
    // Stripe verifies with a secret, and this source has none.
    const switched = await t.call('PATCH', '/api/v1/source/from-sns', { scheme: 'stripe', settings: {} });
    assert.equal(switched.status, 422, JSON.stringify(switched.body));
    assert.deepEqual(switched.body.detail[0].loc, ['body', 'secret']);
    assert.equal((await t.call('GET', '/api/v1/source/from-sns')).body.scheme, 'aws-sns');
    const withSecret = await t.call('PATCH', '/api/v1/source/from-sns', {
      scheme: 'stripe',
      settings: {},
      secret: 'whsec_stripe',
    });
    assert.equal(withSecret.status, 200, JSON.stringify(withSecret.body));
  });

  test('a source left unable to verify (its secrets gone in SQL) answers 503 and stores nothing', async () => {
    const created = await createSource('secretless');
    await t.database.db.query('delete from source_secret where source_id = $1', [created.body.id]);
    // Any change to the row announces it, and the ingestor builds its verifier again.
    await t.database.db.query('update source set updated_at = now() where id = $1', [created.body.id]);
    const before = await tableCounts();
    const body = '{"ticket":7,"action":"x"}';
    const answer = await waitFor('the change to reach the ingestor', async () => {
      const response = await deliver(signed('evt_secretless', body), body, 'secretless');
      return response.status !== 204 && response;
    });
    assert.equal(answer.status, 503);
    assert.equal(JSON.parse(answer.body).code, 'verification_unavailable');
    assert.deepEqual(await tableCounts(), before);
    // Counted as refused, so that the alert on a source refusing every delivery fires for it.
    const rejected = async () =>
      (
        await t.herald.core.metrics.registry.getSingleMetric('herald_intake_claims_total')?.get()
      )?.values.find((v) => v.labels['source'] === 'secretless' && v.labels['outcome'] === 'rejected')
        ?.value ?? 0;
    const counted = await rejected();
    assert.ok(counted >= 1, `rejected ${counted}`);
    assert.equal((await deliver(signed('evt_secretless_2', body), body, 'secretless')).status, 503);
    assert.equal(await rejected(), counted + 1);
  });
});

describe("the relayed payload's retention", () => {
  test("the source's retention, else its app's, else 90 days", async () => {
    const cases = [
      { uid: 'keep-own', app: { retentionDays: 5 }, source: { retentionDays: 2 }, days: 2 },
      { uid: 'keep-app', app: { retentionDays: 5 }, source: {}, days: 5 },
      { uid: 'keep-default', app: {}, source: {}, days: 90 },
    ];
    for (const c of cases) {
      const app = await t.call('POST', '/api/v1/app', { name: c.uid, uid: c.uid, ...c.app });
      assert.equal(app.status, 201, JSON.stringify(app.body));
      const source = await t.call('POST', '/api/v1/source', {
        uid: c.uid,
        scheme: 'standard-webhooks',
        secret: SOURCE_SECRET,
        app: c.uid,
        eventType: 'ticket.changed',
        ...c.source,
      });
      assert.equal(source.status, 201, JSON.stringify(source.body));
      const body = JSON.stringify({ ticket: c.uid });
      const response = await deliver(signed(`retention-${c.uid}`, body), body, c.uid);
      assert.equal(response.status, 204, response.body);
      const kept = await t.database.db.query<{ days: number }>(
        `select round(extract(epoch from payload_expires_at - created_at) / 86400)::int as days
           from message where app_id = $1`,
        [app.body.id],
      );
      assert.deepEqual(
        kept.rows.map((r) => r.days),
        [c.days],
        c.uid,
      );
    }
  });
});

describe('the command line', () => {
  test('`herald sources create --secret-file` reads the secret from a file, which verifies; an unreadable file is named', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'herald-secret-'));
    const file = join(dir, 'secret');
    await writeFile(file, `${SOURCE_SECRET}\n`, { mode: 0o600 });
    /** `herald sources create` of a standard-webhooks source to the tickets app, with `more`. */
    const create = (eventType: string, ...more: string[]) =>
      runHerald(
        [
          'sources',
          'create',
          '--scheme',
          'standard-webhooks',
          '--app',
          'tickets',
          '--event-type',
          eventType,
          ...more,
        ],
        testEnv(t.database.url),
      );
    const run = await create('ticket.changed', '--uid', 'from-file', '--secret-file', file);
    assert.equal(run.code, 0, `${run.stdout}\n${run.stderr}`);
    assert.match(run.stdout, /\/ingest\/from-file/);
    const body = '{"ticket":"file","action":"opened"}';
    assert.equal((await deliver(signed('evt_from_file', body), body, 'from-file')).status, 204);

    const missing = await create('e', '--secret-file', join(dir, 'nope'));
    assert.notEqual(missing.code, 0);
    assert.match(missing.stderr, /--secret-file .*nope: ENOENT/);
    assert.doesNotMatch(run.stdout + run.stderr + missing.stderr, new RegExp(SOURCE_SECRET.slice(6, 20)));

    // As the API answers them: a uid taken, and settings that are not JSON, each named.
    const taken = await create('e', '--uid', 'from-file', '--secret-file', file);
    assert.equal(taken.code, 1, taken.stderr);
    assert.equal(taken.stderr.trim(), 'herald: a source with this uid exists');
    const badSettings = await create('e', '--secret-file', file, '--settings', '{bad');
    assert.equal(badSettings.code, 1, badSettings.stderr);
    assert.match(badSettings.stderr, /^herald: --settings is not JSON: /);
    // Every issue, each named by its flag as typed, not by the field it becomes.
    const wrong = await create('bad type!', '--secret', 'short', '--uid', 'src_2a');
    assert.equal(wrong.code, 1, wrong.stderr);
    assert.match(wrong.stderr, /^herald: --uid: must not begin with src_, as ids do; /);
    assert.match(wrong.stderr, /; --secret\/--secret-file \(0\): Too small: .+; /);
    assert.match(wrong.stderr, /; --event-type: only letters, digits, - _ and \.\n$/);
  });
});
