// Inbound verification of the HMAC schemes, signed wherever possible by the providers' own
// libraries (standardwebhooks, svix, stripe, @octokit/webhooks-methods) and otherwise by the
// algorithm each provider documents, written out here independently of src/.
// Every scheme runs the same gauntlet: valid, rotation, one changed body byte, changed
// signature, no signature, stale timestamp, no delivery id, malformed encodings, random garbage.

import assert from 'node:assert/strict';
import { createHmac, randomBytes, randomUUID } from 'node:crypto';
import { describe, test } from 'node:test';
import { sign as signGitHub } from '@octokit/webhooks-methods';
import { Webhook as StandardWebhook } from 'standardwebhooks';
import Stripe from 'stripe';
import { Webhook as SvixWebhook } from 'svix';
import {
  createVerifier,
  type InboundRequest,
  SchemeConfig,
  type SchemeConfigInput,
  URL_VERIFICATION,
  type Verdict,
} from '../src/inbound/verifiers/index.ts';

const nowSeconds = Math.floor(Date.now() / 1000);
const now = new Date(nowSeconds * 1000);

function request(headers: Record<string, string>, body: string | Buffer): InboundRequest {
  const lowered = Object.fromEntries(
    Object.entries(headers).map(([name, value]) => [name.toLowerCase(), value]),
  );
  return { method: 'POST', headers: lowered, rawBody: Buffer.isBuffer(body) ? body : Buffer.from(body) };
}

function whsec(): string {
  return `whsec_${randomBytes(24).toString('base64')}`;
}

const hmacOf = (algorithm: string, secret: string, content: string) =>
  createHmac(algorithm, secret).update(content).digest();

/** Flips the lowest bit of one hex or base64 digit, keeping it a valid digit of the same encoding. */
function alterDigit(text: string, index: number): string {
  const digit = text[index]!;
  const swapped = digit === 'a' ? 'b' : digit === 'A' ? 'B' : digit === '0' ? '1' : 'a';
  return text.slice(0, index) + swapped + text.slice(index + 1);
}

interface Signed {
  headers: Record<string, string>;
  body: string;
}

interface SchemeCase {
  name: string;
  config: SchemeConfigInput;
  secrets: readonly [string, string];
  deliveryId: string;
  /** Lower-case name of the header holding the signature. */
  signatureHeader: string;
  /** A signed request; without `deliveryId` it carries none (body field or header left out). */
  sign(opts: { secret: string; timestamp: number; deliveryId?: string }): Promise<Signed>;
  /** Changes the signature to another well-formed one. */
  alterSignature(value: string): string;
  /** The scheme's replay window in seconds, when it signs a timestamp. */
  toleranceSeconds?: number;
  /** Signature header values that are broken in form (not just wrong). */
  malformed: string[];
}

const cases: SchemeCase[] = [
  {
    name: 'standard-webhooks (webhook-* headers, signed by standardwebhooks)',
    config: { scheme: 'standard-webhooks' },
    secrets: [whsec(), whsec()],
    deliveryId: 'msg_2mVhC8sbl4xZ1Bq3Nn9gGg0Yk1',
    signatureHeader: 'webhook-signature',
    async sign({ secret, timestamp, deliveryId }) {
      const body = JSON.stringify({ type: 'invoice.paid', data: { amount: 4200 } });
      const id = deliveryId ?? 'msg_unsent';
      const signature = new StandardWebhook(secret.slice('whsec_'.length)).sign(
        id,
        new Date(timestamp * 1000),
        body,
      );
      const headers: Record<string, string> = {
        'webhook-timestamp': String(timestamp),
        'webhook-signature': signature,
      };
      if (deliveryId !== undefined) headers['webhook-id'] = deliveryId;
      return { headers, body };
    },
    alterSignature: (value) => alterDigit(value, 3),
    toleranceSeconds: 300,
    malformed: [
      'v1,',
      'v1,!!!!',
      'v1,YWJj',
      'v1,YWJjZA',
      'v1',
      ',,,',
      'v2,abc v1a,xyz',
      'v1,\u00e9\u00e9\u00e9\u00e9',
    ],
  },
  {
    name: 'standard-webhooks (svix-* headers, signed by svix)',
    config: { scheme: 'standard-webhooks' },
    secrets: [whsec(), whsec()],
    deliveryId: 'msg_svix_01',
    signatureHeader: 'svix-signature',
    async sign({ secret, timestamp, deliveryId }) {
      const body = JSON.stringify({ type: 'user.created', data: { id: 'u_1' } });
      const id = deliveryId ?? 'msg_unsent';
      const signature = new SvixWebhook(secret).sign(id, new Date(timestamp * 1000), body);
      const headers: Record<string, string> = {
        'svix-timestamp': String(timestamp),
        'svix-signature': signature,
      };
      if (deliveryId !== undefined) headers['svix-id'] = deliveryId;
      return { headers, body };
    },
    alterSignature: (value) => alterDigit(value, 3),
    toleranceSeconds: 300,
    malformed: ['v1,=', 'v1,a b c', 'v1,,', 'garbage'],
  },
  {
    name: 'stripe (signed by stripe)',
    config: { scheme: 'stripe' },
    secrets: [whsec(), whsec()],
    deliveryId: 'evt_1NfFmJ2eZvKYlo2C0000abcd',
    signatureHeader: 'stripe-signature',
    async sign({ secret, timestamp, deliveryId }) {
      const event = {
        object: 'event',
        type: 'invoice.paid',
        data: { object: { id: 'in_1', amount_due: 4200 } },
      };
      const body = JSON.stringify(deliveryId === undefined ? event : { id: deliveryId, ...event });
      const header = Stripe.webhooks.generateTestHeaderString({ payload: body, secret, timestamp });
      return { headers: { 'Stripe-Signature': header }, body };
    },
    alterSignature: (value) => alterDigit(value, value.indexOf('v1=') + 3),
    toleranceSeconds: 300,
    malformed: [
      'garbage',
      't=',
      't=abc,v1=00',
      `t=${nowSeconds}`,
      `v1=${'0'.repeat(64)}`,
      `t=${nowSeconds},v1=zz`,
      `t=${nowSeconds},v1=${'a'.repeat(63)}`,
      `t=${nowSeconds},v1=${'a'.repeat(62)}`,
      `t=${nowSeconds},t=${nowSeconds - 1},v1=${'a'.repeat(64)}`,
      `t=-1,v1=${'a'.repeat(64)}`,
      `t=1e9,v1=${'a'.repeat(64)}`,
      '=,=,=',
    ],
  },
  {
    name: 'github (signed by @octokit/webhooks-methods)',
    config: { scheme: 'github' },
    secrets: ['gh-secret-one', 'gh-secret-two'],
    deliveryId: randomUUID(),
    signatureHeader: 'x-hub-signature-256',
    async sign({ secret, deliveryId }) {
      const body = JSON.stringify({ action: 'opened', number: 7, repository: { full_name: 'o/r' } });
      const headers: Record<string, string> = {
        'X-Hub-Signature-256': await signGitHub(secret, body),
        'X-GitHub-Event': 'pull_request',
      };
      if (deliveryId !== undefined) headers['X-GitHub-Delivery'] = deliveryId;
      return { headers, body };
    },
    alterSignature: (value) => alterDigit(value, 'sha256='.length),
    malformed: [
      'sha256=',
      'sha256=abc',
      `sha256=${'g'.repeat(64)}`,
      `sha1=${'a'.repeat(40)}`,
      `SHA256=${'a'.repeat(64)}`,
      `sha256=${'a'.repeat(66)}`,
      'garbage',
    ],
  },
  {
    name: 'slack (documented algorithm)',
    config: { scheme: 'slack' },
    secrets: ['8f742231b10e8888abcd99yyyzzz85a5', 'second-signing-secret'],
    deliveryId: 'Ev08MFMKH6',
    signatureHeader: 'x-slack-signature',
    async sign({ secret, timestamp, deliveryId }) {
      const callback = { type: 'event_callback', team_id: 'T1', event: { type: 'app_mention', text: 'hi' } };
      const body = JSON.stringify(
        deliveryId === undefined ? callback : { ...callback, event_id: deliveryId },
      );
      const signature = `v0=${hmacOf('sha256', secret, `v0:${timestamp}:${body}`).toString('hex')}`;
      return {
        headers: { 'X-Slack-Signature': signature, 'X-Slack-Request-Timestamp': String(timestamp) },
        body,
      };
    },
    alterSignature: (value) => alterDigit(value, 'v0='.length),
    toleranceSeconds: 300,
    malformed: ['v0=', 'v0=12345', `v1=${'a'.repeat(64)}`, `v0=${'x'.repeat(64)}`, 'garbage'],
  },
  {
    name: 'shopify (documented algorithm)',
    config: { scheme: 'shopify' },
    secrets: ['shpss_client_secret_one', 'shpss_client_secret_two'],
    deliveryId: 'b54557e4-bdd9-4b37-8a5f-bf7d70bcd043',
    signatureHeader: 'x-shopify-hmac-sha256',
    async sign({ secret, deliveryId }) {
      const body = JSON.stringify({ id: 820982911946154500, email: 'jon@example.com' });
      const headers: Record<string, string> = {
        'X-Shopify-Hmac-SHA256': hmacOf('sha256', secret, body).toString('base64'),
        'X-Shopify-Topic': 'orders/create',
      };
      if (deliveryId !== undefined) headers['X-Shopify-Webhook-Id'] = deliveryId;
      return { headers, body };
    },
    alterSignature: (value) => alterDigit(value, 0),
    malformed: [
      '!!!!',
      'YWJj',
      'YWJjZA',
      'YWJjZA==',
      `${'A'.repeat(43)}`,
      `${'A'.repeat(42)}==`,
      `${'A'.repeat(43)}B`,
      `${'A'.repeat(44)}====`,
      '-_-_',
    ],
  },
  {
    name: 'hmac (sha256, hex, "sha256=" prefix, no timestamp)',
    config: {
      scheme: 'hmac',
      header: 'X-Signature',
      algorithm: 'sha256',
      encoding: 'hex',
      prefix: 'sha256=',
      deliveryIdHeader: 'X-Delivery-Id',
    },
    secrets: ['generic-one', 'generic-two'],
    deliveryId: 'dlv_0001',
    signatureHeader: 'x-signature',
    async sign({ secret, deliveryId }) {
      const body = JSON.stringify({ kind: 'thing.happened', n: 1 });
      const headers: Record<string, string> = {
        'X-Signature': `sha256=${hmacOf('sha256', secret, body).toString('hex')}`,
      };
      if (deliveryId !== undefined) headers['X-Delivery-Id'] = deliveryId;
      return { headers, body };
    },
    alterSignature: (value) => alterDigit(value, 'sha256='.length),
    malformed: [
      'sha256=',
      `${'a'.repeat(64)}`,
      `sha256=${'a'.repeat(63)}`,
      `sha256=${'a'.repeat(128)}`,
      'sha256=+/==',
    ],
  },
  {
    name: 'hmac (sha512, base64, signed timestamp, 60 s tolerance)',
    config: {
      scheme: 'hmac',
      header: 'x-sig',
      algorithm: 'sha512',
      encoding: 'base64',
      timestampHeader: 'X-Timestamp',
      toleranceSeconds: 60,
      deliveryIdHeader: 'x-event-id',
    },
    secrets: ['generic-512-one', 'generic-512-two'],
    deliveryId: 'evt-512',
    signatureHeader: 'x-sig',
    async sign({ secret, timestamp, deliveryId }) {
      const body = JSON.stringify({ kind: 'thing.happened', n: 2 });
      const headers: Record<string, string> = {
        'x-sig': hmacOf('sha512', secret, `${timestamp}.${body}`).toString('base64'),
        'X-Timestamp': String(timestamp),
      };
      if (deliveryId !== undefined) headers['x-event-id'] = deliveryId;
      return { headers, body };
    },
    alterSignature: (value) => alterDigit(value, 0),
    toleranceSeconds: 60,
    malformed: [
      '',
      'A',
      `${'A'.repeat(86)}==`.slice(1),
      hmacOf('sha256', 'x', 'y').toString('base64'),
      '%%%%',
    ],
  },
];

function assertRejected(verdict: Verdict, status: number, code?: string): void {
  assert.equal(verdict.ok, false, `expected a rejection, got ${JSON.stringify(verdict)}`);
  if (verdict.ok) return;
  assert.equal(verdict.status, status, verdict.reason);
  if (code !== undefined) assert.equal(verdict.code, code, verdict.reason);
}

/** Random header values: printable ASCII, separators the schemes split on, and non-ASCII. */
function garbage(): string {
  const alphabet = 'abcdefABCDEF0123456789+/=,.;: _-tv1v0sha256\u00e9\u2603';
  const length = Math.floor(Math.random() * 120);
  return Array.from({ length }, () => alphabet[Math.floor(Math.random() * alphabet.length)]).join('');
}

for (const scheme of cases) {
  describe(scheme.name, () => {
    const [first, second] = scheme.secrets;
    const verifier = createVerifier(scheme.config, [first], {});
    const signedNow = (secret = first) =>
      scheme.sign({ secret, timestamp: nowSeconds, deliveryId: scheme.deliveryId });

    test('a valid request is accepted with its delivery id and parsed payload', async () => {
      const { headers, body } = await signedNow();
      const verdict = await verifier.verify(request(headers, body), now);
      assert.deepEqual(verdict, { ok: true, deliveryId: scheme.deliveryId, payload: JSON.parse(body) });
    });

    test('rotation: with two live secrets, a request signed by either is accepted', async () => {
      const rotating = createVerifier(scheme.config, [first, second], {});
      for (const secret of [first, second]) {
        const { headers, body } = await signedNow(secret);
        const verdict = await rotating.verify(request(headers, body), now);
        assert.equal(verdict.ok, true, JSON.stringify(verdict));
      }
      const { headers, body } = await signedNow(second);
      assertRejected(await verifier.verify(request(headers, body), now), 401, 'bad_signature');
    });

    test('one changed byte anywhere in the body is a 401', async () => {
      const { headers, body } = await signedNow();
      const bytes = Buffer.from(body);
      for (const index of [0, Math.floor(bytes.length / 2), bytes.length - 1]) {
        const changed = Buffer.from(bytes);
        changed[index]! ^= 0x01;
        assertRejected(await verifier.verify(request(headers, changed), now), 401, 'bad_signature');
      }
      const appended = Buffer.concat([bytes, Buffer.from(' ')]);
      assertRejected(await verifier.verify(request(headers, appended), now), 401, 'bad_signature');
    });

    test('a changed signature is a 401', async () => {
      const { headers, body } = await signedNow();
      const header = Object.keys(headers).find((name) => name.toLowerCase() === scheme.signatureHeader)!;
      const altered = { ...headers, [header]: scheme.alterSignature(headers[header]!) };
      assert.notEqual(altered[header], headers[header]);
      assertRejected(await verifier.verify(request(altered, body), now), 401, 'bad_signature');
    });

    test('a missing signature is a 401', async () => {
      const { headers, body } = await signedNow();
      const unsigned = Object.fromEntries(
        Object.entries(headers).filter(([name]) => name.toLowerCase() !== scheme.signatureHeader),
      );
      assertRejected(await verifier.verify(request(unsigned, body), now), 401, 'missing_signature');
      const blank = request({ ...unsigned, [scheme.signatureHeader]: '   ' }, body);
      assertRejected(await verifier.verify(blank, now), 401, 'missing_signature');
    });

    const tolerance = scheme.toleranceSeconds;
    if (tolerance !== undefined) {
      test(`a timestamp more than ${tolerance} s from now, either way, is a 401`, async () => {
        for (const offset of [-tolerance - 1, tolerance + 1, -86_400]) {
          const { headers, body } = await scheme.sign({
            secret: first,
            timestamp: nowSeconds + offset,
            deliveryId: scheme.deliveryId,
          });
          assertRejected(await verifier.verify(request(headers, body), now), 401, 'stale_timestamp');
        }
        for (const offset of [-tolerance, tolerance - 1]) {
          const { headers, body } = await scheme.sign({
            secret: first,
            timestamp: nowSeconds + offset,
            deliveryId: scheme.deliveryId,
          });
          const verdict = await verifier.verify(request(headers, body), now);
          assert.equal(verdict.ok, true, `offset ${offset}: ${JSON.stringify(verdict)}`);
        }
      });
    }

    test('a genuine request without a delivery id is a 400', async () => {
      const { headers, body } = await scheme.sign({ secret: first, timestamp: nowSeconds });
      assertRejected(await verifier.verify(request(headers, body), now), 400, 'missing_delivery_id');
    });

    test('malformed signature encodings give a 401 verdict, never an exception', async () => {
      const { headers, body } = await signedNow();
      for (const value of scheme.malformed) {
        const verdict = await verifier.verify(
          request({ ...headers, [scheme.signatureHeader]: value }, body),
          now,
        );
        assert.equal(verdict.ok, false, JSON.stringify(value));
        if (!verdict.ok) assert.equal(verdict.status, 401, `${JSON.stringify(value)}: ${verdict.reason}`);
      }
    });

    test('random garbage in every header gives a verdict, never an exception', async () => {
      const { headers, body } = await signedNow();
      for (let round = 0; round < 200; round += 1) {
        const scrambled = Object.fromEntries(Object.keys(headers).map((name) => [name, garbage()]));
        const verdict = await verifier.verify(request(scrambled, body), now);
        assert.equal(verdict.ok, false);
      }
    });
  });
}

describe('scheme specifics', () => {
  test('standard-webhooks: one header with a signature per live secret verifies with either secret', async () => {
    const [a, b] = [whsec(), whsec()];
    const body = '{"type":"ping"}';
    const at = new Date(nowSeconds * 1000);
    const signature = `${new StandardWebhook(a.slice(6)).sign('msg_1', at, body)} ${new StandardWebhook(b.slice(6)).sign('msg_1', at, body)}`;
    const headers = {
      'webhook-id': 'msg_1',
      'webhook-timestamp': String(nowSeconds),
      'webhook-signature': signature,
    };
    for (const secret of [a, b]) {
      const verdict = await createVerifier({ scheme: 'standard-webhooks' }, [secret], {}).verify(
        request(headers, body),
        now,
      );
      assert.equal(verdict.ok, true);
    }
  });

  test('standard-webhooks: a timestamp that is not whole seconds is malformed', async () => {
    const secret = whsec();
    const verifier = createVerifier({ scheme: 'standard-webhooks' }, [secret], {});
    for (const timestamp of ['1.5', '-1', 'now', `${nowSeconds}0000000000`]) {
      const headers = {
        'webhook-id': 'msg_1',
        'webhook-timestamp': timestamp,
        'webhook-signature': 'v1,AAAA',
      };
      assertRejected(await verifier.verify(request(headers, '{}'), now), 401, 'malformed');
    }
  });

  test('stripe: during a secret roll Stripe sends one v1 per secret; any of them may match', async () => {
    const [previous, current] = [whsec(), whsec()];
    const body = JSON.stringify({ id: 'evt_roll', object: 'event' });
    const signatureBy = (secret: string) =>
      Stripe.webhooks
        .generateTestHeaderString({ payload: body, secret, timestamp: nowSeconds })
        .split(',')[1]!;
    const header = `t=${nowSeconds},${signatureBy(previous)},${signatureBy(current)},v0=${'0'.repeat(64)}`;
    const verdict = await createVerifier({ scheme: 'stripe' }, [current], {}).verify(
      request({ 'stripe-signature': header }, body),
      now,
    );
    assert.equal(verdict.ok && verdict.deliveryId, 'evt_roll');
  });

  test('stripe: the delivery id is the event id and must be a string', async () => {
    const secret = whsec();
    const verifier = createVerifier({ scheme: 'stripe' }, [secret], {});
    for (const body of ['{"id":42}', '{"id":"evt with spaces"}', '[]', 'not json', '{"id":""}']) {
      const header = Stripe.webhooks.generateTestHeaderString({
        payload: body,
        secret,
        timestamp: nowSeconds,
      });
      assertRejected(
        await verifier.verify(request({ 'stripe-signature': header }, body), now),
        400,
        'missing_delivery_id',
      );
    }
  });

  test('github: the signature covers the raw bytes; a body that is not UTF-8 JSON verifies with payload null', async () => {
    const secret = 'gh-secret';
    const body = Buffer.from([0xff, 0xfe, 0x00, 0x7b]);
    const signature = `sha256=${createHmac('sha256', secret).update(body).digest('hex')}`;
    const verdict = await createVerifier({ scheme: 'github' }, [secret], {}).verify(
      request({ 'x-hub-signature-256': signature, 'x-github-delivery': 'd-1' }, body),
      now,
    );
    assert.deepEqual(verdict, { ok: true, deliveryId: 'd-1', payload: null });
  });

  test('github: upper-case hex verifies too (compared as decoded bytes)', async () => {
    const secret = 'gh-secret';
    const body = '{"zen":"Keep it logically awesome."}';
    const hex = (await signGitHub(secret, body)).slice('sha256='.length);
    const signature = `sha256=${hex.toUpperCase()}`;
    assert.notEqual(hex, hex.toUpperCase());
    const verdict = await createVerifier({ scheme: 'github' }, [secret], {}).verify(
      request({ 'x-hub-signature-256': signature, 'x-github-delivery': 'd-2' }, body),
      now,
    );
    assert.equal(verdict.ok, true);
  });

  test('slack: without event_id the configured header gives the delivery id (slash commands)', async () => {
    const secret = 'slack-secret';
    const body =
      'token=x&team_id=T1&command=%2Fdeploy&text=prod&trigger_id=13345224609.738474920.8088930838d88f008e0';
    const headers = {
      'x-slack-signature': `v0=${hmacOf('sha256', secret, `v0:${nowSeconds}:${body}`).toString('hex')}`,
      'x-slack-request-timestamp': String(nowSeconds),
      'x-request-id': 'req-77',
    };
    const withHeader = createVerifier({ scheme: 'slack', deliveryIdHeader: 'X-Request-Id' }, [secret], {});
    assert.deepEqual(await withHeader.verify(request(headers, body), now), {
      ok: true,
      deliveryId: 'req-77',
      payload: null,
    });
    const withoutHeader = createVerifier({ scheme: 'slack' }, [secret], {});
    assertRejected(await withoutHeader.verify(request(headers, body), now), 400, 'missing_delivery_id');
  });

  test('slack: a signed url_verification handshake is accepted as one, and only with its challenge', async () => {
    const secret = 'slack-secret';
    const signedAs = (body: string, key = secret) => ({
      'x-slack-signature': `v0=${hmacOf('sha256', key, `v0:${nowSeconds}:${body}`).toString('hex')}`,
      'x-slack-request-timestamp': String(nowSeconds),
    });
    const verifier = createVerifier({ scheme: 'slack' }, [secret], {});
    const body =
      '{"token":"t","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}';
    assert.deepEqual(await verifier.verify(request(signedAs(body), body), now), {
      ok: true,
      deliveryId: URL_VERIFICATION,
      payload: JSON.parse(body),
    });
    assertRejected(
      await verifier.verify(request(signedAs(body, 'another'), body), now),
      401,
      'bad_signature',
    );
    const noChallenge = '{"token":"t","type":"url_verification"}';
    assertRejected(
      await verifier.verify(request(signedAs(noChallenge), noChallenge), now),
      400,
      'bad_request',
    );
  });

  test('slack: a missing or non-numeric timestamp header is a 401', async () => {
    const verifier = createVerifier({ scheme: 'slack' }, ['s'], {});
    const signature = `v0=${'a'.repeat(64)}`;
    assertRejected(
      await verifier.verify(request({ 'x-slack-signature': signature }, '{}'), now),
      401,
      'malformed',
    );
    const headers = { 'x-slack-signature': signature, 'x-slack-request-timestamp': 'yesterday' };
    assertRejected(await verifier.verify(request(headers, '{}'), now), 401, 'malformed');
  });

  test('hmac: a missing timestamp header is a 401 when the scheme signs one', async () => {
    const config = cases.at(-1)!.config;
    const verifier = createVerifier(config, ['generic-512-one'], {});
    const { headers, body } = await cases
      .at(-1)!
      .sign({ secret: 'generic-512-one', timestamp: nowSeconds, deliveryId: 'x' });
    const { 'X-Timestamp': _dropped, ...withoutTimestamp } = headers;
    assertRejected(await verifier.verify(request(withoutTimestamp, body), now), 401, 'malformed');
  });
});

describe('SchemeConfig and createVerifier', () => {
  test('header names in settings are validated and lower-cased', () => {
    const parsed = SchemeConfig.parse({
      scheme: 'hmac',
      header: 'X-Signature',
      algorithm: 'sha256',
      encoding: 'hex',
      deliveryIdHeader: 'X-Id',
    });
    assert.equal(parsed.scheme === 'hmac' && parsed.header, 'x-signature');
    assert.equal(
      SchemeConfig.safeParse({
        scheme: 'hmac',
        header: 'bad header',
        algorithm: 'sha256',
        encoding: 'hex',
        deliveryIdHeader: 'x',
      }).success,
      false,
    );
  });

  test('unknown schemes, unknown keys and half-configured timestamps are refused', () => {
    for (const config of [
      { scheme: 'paypal' },
      { scheme: 'stripe', tolerance: 10 },
      { scheme: 'hmac', header: 'x', algorithm: 'md5', encoding: 'hex', deliveryIdHeader: 'y' },
      {
        scheme: 'hmac',
        header: 'x',
        algorithm: 'sha256',
        encoding: 'hex',
        deliveryIdHeader: 'y',
        toleranceSeconds: 5,
      },
      {
        scheme: 'gcp-pubsub',
        audience: 'a',
        serviceAccountEmail: 'sa@p.iam.gserviceaccount.com',
        jwksUrl: 'http://x/',
      },
    ]) {
      assert.equal(SchemeConfig.safeParse(config).success, false, JSON.stringify(config));
    }
  });

  test('defaults are filled in for gcp-pubsub and aws-sns', () => {
    assert.deepEqual(
      SchemeConfig.parse({ scheme: 'gcp-pubsub', audience: 'aud', serviceAccountEmail: 'sa@x' }),
      {
        scheme: 'gcp-pubsub',
        jwksUrl: 'https://www.googleapis.com/oauth2/v3/certs',
        audience: 'aud',
        issuer: 'https://accounts.google.com',
        serviceAccountEmail: 'sa@x',
      },
    );
    assert.deepEqual(SchemeConfig.parse({ scheme: 'aws-sns', topicArns: ['arn:aws:sns:eu-west-1:1:t'] }), {
      scheme: 'aws-sns',
      topicArns: ['arn:aws:sns:eu-west-1:1:t'],
      confirmSubscriptions: false,
    });
  });

  test('a secret scheme without secrets, or with an unusable one, fails at build time without echoing it', () => {
    for (const scheme of ['standard-webhooks', 'stripe', 'github', 'slack', 'shopify'] as const) {
      assert.throws(() => createVerifier({ scheme }, [], {}), /at least one secret/);
    }
    const secret = 'whsec_not*base64*at*all';
    assert.throws(
      () => createVerifier({ scheme: 'standard-webhooks' }, [secret], {}),
      (error: Error) => !error.message.includes(secret) && /secret #1/.test(error.message),
    );
    assert.throws(() => createVerifier({ scheme: 'github' }, ['ok', ''], {}), /secret #2 is empty/);
  });

  test('schemes that fetch keys need fetchText', () => {
    assert.throws(() => createVerifier({ scheme: 'aws-sns', topicArns: ['arn:t'] }, [], {}), /fetchText/);
    assert.throws(
      () => createVerifier({ scheme: 'gcp-pubsub', audience: 'a', serviceAccountEmail: 'sa@x' }, [], {}),
      /fetchText/,
    );
  });

  test('rejections never carry a secret', async () => {
    const secret = 'very-secret-value';
    const verifier = createVerifier({ scheme: 'github' }, [secret], {});
    const verdict = await verifier.verify(
      request({ 'x-hub-signature-256': `sha256=${'0'.repeat(64)}` }, '{}'),
      now,
    );
    assert.ok(!JSON.stringify(verdict).includes(secret));
  });
});
