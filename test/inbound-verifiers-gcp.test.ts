// Pub/Sub push verification against a JWKS served by this test over HTTPS on 127.0.0.1 (a
// self-signed certificate made with the openssl CLI), fetched through the real SSRF-safe
// createSafeFetchText. Tokens are minted with jose from RSA keys generated here.

import assert from 'node:assert/strict';
import { once } from 'node:events';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  type CryptoKey,
  exportJWK,
  generateKeyPair,
  type JWK,
  type JWTPayload,
  SignJWT,
  UnsecuredJWT,
} from 'jose';
import pino from 'pino';
import type { HeraldError } from '../src/errors.ts';
import {
  createSafeFetchText,
  createVerifier,
  type InboundRequest,
  type SafeFetchText,
  type Verdict,
} from '../src/inbound/verifiers/index.ts';
import type { Resolver } from '../src/sender/resolve.ts';
import { selfSignedCertificate } from './support/certificates.ts';
import { createApp } from './support/fixtures.ts';
import { startTestHerald } from './support/herald.ts';
import { withIngestor } from './support/inbound.ts';

const toLoopback: Resolver = async () => [{ address: '127.0.0.1', family: 4 }];
const SERVICE_ACCOUNT = 'push-invoker@herald-test.iam.gserviceaccount.com';
const AUDIENCE = 'https://herald.example.com/ingest/pubsub';
const nowSeconds = Math.floor(Date.now() / 1000);
const now = new Date(nowSeconds * 1000);

interface SigningKey {
  kid: string;
  privateKey: CryptoKey;
  jwk: JWK;
}

async function signingKey(kid: string): Promise<SigningKey> {
  const { privateKey, publicKey } = await generateKeyPair('RS256', { extractable: true });
  return { kid, privateKey, jwk: { ...(await exportJWK(publicKey)), kid, alg: 'RS256', use: 'sig' } };
}

/** The JWKS server: serves whatever `state.jwks` holds and counts what it was asked. */
const state = { jwks: { keys: [] as JWK[] }, hits: new Map<string, number>(), certsDown: false };
let server: https.Server;
let port: number;
let certPem: string;
let dir: string;
let fetcher: SafeFetchText;
let keyA: SigningKey;
let keyB: SigningKey;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'herald-gcp-'));
  const identity = selfSignedCertificate(dir, '/CN=localhost', 'DNS:localhost,IP:127.0.0.1');
  certPem = identity.pem;
  server = https.createServer({ key: readFileSync(identity.keyFile), cert: certPem }, (req, res) => {
    const path = req.url ?? '/';
    state.hits.set(path, (state.hits.get(path) ?? 0) + 1);
    if (path === '/certs' && state.certsDown) {
      res.writeHead(503).end();
    } else if (path === '/certs') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(state.jwks));
    } else if (path === '/broken') {
      res.writeHead(500).end('oops');
    } else if (path === '/not-json') {
      res.writeHead(200).end('<html>');
    } else if (path === '/redirect') {
      res.writeHead(302, { location: '/certs' }).end();
    } else if (path === '/big') {
      res.writeHead(200).end('x'.repeat(200 * 1024));
    } else {
      res.writeHead(404).end();
    }
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  port = (server.address() as AddressInfo).port;
  fetcher = createSafeFetchText({
    allowPrivateNetworks: ['127.0.0.0/8'],
    timeoutMs: 5000,
    resolve: toLoopback,
    extraCaPem: certPem,
  });
  [keyA, keyB] = await Promise.all([signingKey('key-a'), signingKey('key-b')]);
});

after(async () => {
  await fetcher.close();
  server.close();
  rmSync(dir, { recursive: true, force: true });
});

const hits = (path: string) => state.hits.get(path) ?? 0;
const url = (path: string) => `https://localhost:${port}${path}`;

function pubsubVerifier(jwksPath = '/certs', issuer?: string) {
  return createVerifier(
    {
      scheme: 'gcp-pubsub',
      jwksUrl: url(jwksPath),
      audience: AUDIENCE,
      serviceAccountEmail: SERVICE_ACCOUNT,
      ...(issuer === undefined ? {} : { issuer }),
    },
    [],
    { fetchText: fetcher.fetchText },
  );
}

interface TokenOptions {
  key?: SigningKey;
  kid?: string;
  claims?: JWTPayload;
  issuer?: string;
  audience?: string;
  issuedAt?: number;
  expiresAt?: number;
}

/** A token shaped like the ones Pub/Sub push sends (claims per Google's documentation). */
function token(options: TokenOptions = {}): Promise<string> {
  const key = options.key ?? keyA;
  const issuedAt = options.issuedAt ?? nowSeconds - 10;
  return new SignJWT({ email: SERVICE_ACCOUNT, email_verified: true, azp: '1234567890', ...options.claims })
    .setProtectedHeader({ alg: 'RS256', kid: options.kid ?? key.kid, typ: 'JWT' })
    .setIssuer(options.issuer ?? 'https://accounts.google.com')
    .setAudience(options.audience ?? AUDIENCE)
    .setSubject('113774264463038321964')
    .setIssuedAt(issuedAt)
    .setExpirationTime(options.expiresAt ?? issuedAt + 3600)
    .sign(key.privateKey);
}

const pushBody = (
  message: Record<string, unknown> = { messageId: '2070443601311540', message_id: '2070443601311540' },
) =>
  JSON.stringify({
    message: {
      attributes: { origin: 'test' },
      data: Buffer.from('{"order":42}').toString('base64'),
      publishTime: new Date(now).toISOString(),
      ...message,
    },
    subscription: 'projects/herald-test/subscriptions/push-sub',
  });

function push(authorization: string | undefined, body = pushBody()): InboundRequest {
  return {
    method: 'POST',
    headers: { authorization, 'content-type': 'application/json' },
    rawBody: Buffer.from(body),
  };
}

function assertRejected(verdict: Verdict, status: number, code?: string): void {
  assert.equal(verdict.ok, false, `expected a rejection, got ${JSON.stringify(verdict)}`);
  if (verdict.ok) return;
  assert.equal(verdict.status, status, verdict.reason);
  if (code !== undefined) assert.equal(verdict.code, code, verdict.reason);
}

describe('gcp-pubsub', () => {
  before(() => {
    state.jwks = { keys: [keyA.jwk] };
  });

  test('a valid push is accepted; the delivery id is message.messageId', async () => {
    const body = pushBody();
    const verdict = await pubsubVerifier().verify(push(`Bearer ${await token()}`, body), now);
    assert.deepEqual(verdict, { ok: true, deliveryId: '2070443601311540', payload: JSON.parse(body) });
  });

  test('message.message_id is read when messageId is absent', async () => {
    const verdict = await pubsubVerifier().verify(
      push(`Bearer ${await token()}`, pushBody({ message_id: '99' })),
      now,
    );
    assert.equal(verdict.ok && verdict.deliveryId, '99');
  });

  test('both spellings of the Google issuer are accepted by default; a configured issuer is exact', async () => {
    for (const issuer of ['https://accounts.google.com', 'accounts.google.com']) {
      const verdict = await pubsubVerifier().verify(push(`Bearer ${await token({ issuer })}`), now);
      assert.equal(verdict.ok, true, issuer);
    }
    const custom = pubsubVerifier('/certs', 'https://issuer.example.com');
    assert.equal(
      (await custom.verify(push(`Bearer ${await token({ issuer: 'https://issuer.example.com' })}`), now)).ok,
      true,
    );
    assertRejected(await custom.verify(push(`Bearer ${await token()}`), now), 401, 'bad_signature');
  });

  test('rejected tokens: audience, issuer, email, email_verified, other keys, other algorithms', async () => {
    const stranger = await signingKey('key-a');
    const unknownKid = await signingKey('key-unpublished');
    const hs256 = await new SignJWT({ email: SERVICE_ACCOUNT, email_verified: true })
      .setProtectedHeader({ alg: 'HS256', kid: 'key-a' })
      .setIssuer('https://accounts.google.com')
      .setAudience(AUDIENCE)
      .setIssuedAt(nowSeconds)
      .setExpirationTime(nowSeconds + 3600)
      .sign(new TextEncoder().encode('a-shared-secret-that-is-long-enough'));
    const unsecured = new UnsecuredJWT({ email: SERVICE_ACCOUNT, email_verified: true })
      .setIssuer('https://accounts.google.com')
      .setAudience(AUDIENCE)
      .setIssuedAt(nowSeconds)
      .setExpirationTime(nowSeconds + 3600)
      .encode();
    // [token, code]: a token that names nothing valid is malformed, everything else a bad signature.
    const rejected: Record<string, [string, string]> = {
      'wrong audience': [await token({ audience: 'https://elsewhere.example.com/push' }), 'bad_signature'],
      'wrong issuer': [await token({ issuer: 'https://evil.example.com' }), 'bad_signature'],
      'wrong email': [
        await token({ claims: { email: 'someone-else@herald-test.iam.gserviceaccount.com' } }),
        'bad_signature',
      ],
      'email_verified false': [await token({ claims: { email_verified: false } }), 'bad_signature'],
      'email_verified "true" (a string)': [
        await token({ claims: { email_verified: 'true' } }),
        'bad_signature',
      ],
      'no email': [await token({ claims: { email: undefined } }), 'bad_signature'],
      'signed by another key under the published kid': [await token({ key: stranger }), 'bad_signature'],
      'signed by an unpublished key': [await token({ key: unknownKid }), 'bad_signature'],
      'HS256 with a shared secret': [hs256, 'bad_signature'],
      'alg none (no signature at all)': [unsecured, 'malformed'],
    };
    const verifier = pubsubVerifier();
    for (const [what, [jwt, code]] of Object.entries(rejected)) {
      const verdict = await verifier.verify(push(`Bearer ${jwt}`), now);
      assert.equal(verdict.ok, false, what);
      if (!verdict.ok)
        assert.deepEqual([verdict.status, verdict.code], [401, code], `${what}: ${verdict.reason}`);
    }
  });

  test('an expired token, or one issued in the future beyond the clock skew, is stale', async () => {
    const verifier = pubsubVerifier();
    const expired = await token({ issuedAt: nowSeconds - 3700, expiresAt: nowSeconds - 100 });
    assertRejected(await verifier.verify(push(`Bearer ${expired}`), now), 401, 'stale_timestamp');
    const future = await token({ issuedAt: nowSeconds + 600 });
    assertRejected(await verifier.verify(push(`Bearer ${future}`), now), 401, 'stale_timestamp');
    // Within the skew both ways: a token just expired, or just issued by a fast clock, passes.
    const justExpired = await token({ issuedAt: nowSeconds - 3610, expiresAt: nowSeconds - 10 });
    assert.equal((await verifier.verify(push(`Bearer ${justExpired}`), now)).ok, true);
    const slightlyAhead = await token({ issuedAt: nowSeconds + 20 });
    assert.equal((await verifier.verify(push(`Bearer ${slightlyAhead}`), now)).ok, true);
  });

  test('a changed byte of the token signature is a 401', async () => {
    const jwt = await token();
    const at = jwt.lastIndexOf('.') + 5;
    const altered = jwt.slice(0, at) + (jwt[at] === 'A' ? 'B' : 'A') + jwt.slice(at + 1);
    assertRejected(await pubsubVerifier().verify(push(`Bearer ${altered}`), now), 401, 'bad_signature');
  });

  test('the token authenticates the sender, not the body: a changed body byte still verifies', async () => {
    // Documented limitation of Pub/Sub push (no body digest in the token); TLS protects the body.
    const body = pushBody().replace('"origin":"test"', '"origin":"tesT"');
    const verdict = await pubsubVerifier().verify(push(`Bearer ${await token()}`, body), now);
    assert.equal(verdict.ok, true);
  });

  test('no Authorization is a 401 and fetches nothing', async () => {
    const before = hits('/certs');
    assertRejected(await pubsubVerifier().verify(push(undefined), now), 401, 'missing_signature');
    assert.equal(hits('/certs'), before);
  });

  test('malformed Authorization values give a 401 verdict, never an exception', async () => {
    const jwt = await token();
    const verifier = pubsubVerifier();
    for (const value of [
      'Basic dXNlcjpwYXNz',
      'Bearer',
      'Bearer not-a-jwt',
      'Bearer a.b.c',
      'Bearer ...',
      `Bearer ${jwt.slice(0, -10)}`,
      `Bearer ${jwt}.extra`,
      `Bearer ${jwt.split('.').slice(0, 2).join('.')}`,
      `Bearer ${Buffer.from('{"alg":"RS256"}').toString('base64url')}.e30.AAAA`,
      `Bearer ${jwt.replace(/^[^.]+/, Buffer.from('{"alg":"RS256","crit":["x"]}').toString('base64url'))}`,
      `Bearer ${jwt}\u00e9`,
    ]) {
      const verdict = await verifier.verify(push(value), now);
      assert.equal(verdict.ok, false, value);
      if (!verdict.ok) assert.equal(verdict.status, 401, `${value}: ${verdict.reason}`);
    }
  });

  test('an unwrapped push (the body is the data) takes its id from x-goog-pubsub-message-id', async () => {
    const body = '{"order":42}';
    const request = push(`Bearer ${await token()}`, body);
    const verdict = await pubsubVerifier().verify(
      { ...request, headers: { ...request.headers, 'x-goog-pubsub-message-id': '2070443601311541' } },
      now,
    );
    assert.deepEqual(verdict, { ok: true, deliveryId: '2070443601311541', payload: { order: 42 } });
    // Without metadata written, nothing tells one delivery from another: refused, saying what to enable.
    const without = await pubsubVerifier().verify(request, now);
    assertRejected(without, 400, 'missing_delivery_id');
    assert.match(without.ok ? '' : without.reason, /write metadata/);
  });

  test("an unwrapped body's own message.messageId is the publisher's data, not the delivery's id", async () => {
    const jwt = await token();
    const verifier = pubsubVerifier();
    // A chat update relayed through Pub/Sub: a `message` with an id of its own, numeric or not.
    for (const body of ['{"message":{"message_id":17,"text":"hi"}}', '{"message":{"messageId":"chat-1"}}']) {
      const request = push(`Bearer ${jwt}`, body);
      const verdict = await verifier.verify(
        { ...request, headers: { ...request.headers, 'x-goog-pubsub-message-id': '2070443601311542' } },
        now,
      );
      assert.deepEqual(
        verdict,
        { ok: true, deliveryId: '2070443601311542', payload: JSON.parse(body) },
        body,
      );
      // Without the header, no envelope and no id: refused, not taken for the delivery's id.
      assertRejected(await verifier.verify(request, now), 400, 'missing_delivery_id');
    }
  });

  test('a genuine push without a message id is a 400', async () => {
    const jwt = await token();
    const verifier = pubsubVerifier();
    for (const body of [
      pushBody({ messageId: undefined, message_id: undefined }),
      '{"subscription":"s"}',
      'not json',
    ]) {
      assertRejected(await verifier.verify(push(`Bearer ${jwt}`, body), now), 400, 'missing_delivery_id');
    }
  });

  test('rotation: with two keys published, a token signed by either verifies', async () => {
    state.jwks = { keys: [keyA.jwk, keyB.jwk] };
    try {
      const verifier = pubsubVerifier();
      for (const key of [keyA, keyB]) {
        assert.equal((await verifier.verify(push(`Bearer ${await token({ key })}`), now)).ok, true, key.kid);
      }
    } finally {
      state.jwks = { keys: [keyA.jwk] };
    }
  });

  test('the JWKS is cached for an hour, then fetched again', async () => {
    const verifier = pubsubVerifier();
    const before = hits('/certs');
    for (let i = 0; i < 3; i += 1) {
      assert.equal((await verifier.verify(push(`Bearer ${await token()}`), now)).ok, true);
    }
    assert.equal(hits('/certs'), before + 1);
    const later = new Date(now.getTime() + 61 * 60 * 1000);
    const laterToken = await token({ issuedAt: nowSeconds + 61 * 60 });
    assert.equal((await verifier.verify(push(`Bearer ${laterToken}`), later)).ok, true);
    assert.equal(hits('/certs'), before + 2);
  });

  test('a key published after the last fetch is found by a refetch, at most once a minute', async () => {
    const verifier = pubsubVerifier();
    const before = hits('/certs');
    assert.equal((await verifier.verify(push(`Bearer ${await token()}`), now)).ok, true);
    state.jwks = { keys: [keyA.jwk, keyB.jwk] };
    try {
      // Right after a fetch, an unknown kid does not trigger another one (forged kids cost nothing).
      const byB = await token({ key: keyB });
      assertRejected(await verifier.verify(push(`Bearer ${byB}`), now), 401, 'bad_signature');
      assert.equal(hits('/certs'), before + 1);
      const minuteLater = new Date(now.getTime() + 61_000);
      assert.equal((await verifier.verify(push(`Bearer ${byB}`), minuteLater)).ok, true);
      assert.equal(hits('/certs'), before + 2);
    } finally {
      state.jwks = { keys: [keyA.jwk] };
    }
  });

  test('a refetch that fails keeps the key set that verifies: forced by an unknown kid, or at the end of the hour', async () => {
    const verifier = pubsubVerifier();
    const before = hits('/certs');
    assert.equal((await verifier.verify(push(`Bearer ${await token()}`), now)).ok, true);
    state.certsDown = true;
    try {
      // An unknown kid a minute later forces a refetch, which fails: that token cannot be judged
      // (503, the sender tries again), while keyA's tokens still verify.
      const minuteLater = new Date(now.getTime() + 61_000);
      const unknownKid = await token({ key: keyB });
      assertRejected(
        await verifier.verify(push(`Bearer ${unknownKid}`), minuteLater),
        503,
        'verification_unavailable',
      );
      assert.equal(hits('/certs'), before + 2);
      // Its retry within the minute fetches nothing, and still cannot be judged.
      assertRejected(
        await verifier.verify(push(`Bearer ${unknownKid}`), minuteLater),
        503,
        'verification_unavailable',
      );
      assert.equal(hits('/certs'), before + 2);
      const genuine = await token({ issuedAt: nowSeconds + 61 });
      assert.equal((await verifier.verify(push(`Bearer ${genuine}`), minuteLater)).ok, true);
      // Past the hour, the refetch fails too: still the set before, and no fetch at every request.
      const later = new Date(now.getTime() + 62 * 60 * 1000);
      const laterToken = await token({ issuedAt: nowSeconds + 62 * 60 });
      for (let i = 0; i < 3; i++)
        assert.equal((await verifier.verify(push(`Bearer ${laterToken}`), later)).ok, true);
      assert.equal(hits('/certs'), before + 3);
    } finally {
      state.certsDown = false;
    }
  });

  test('an unreachable or broken JWKS is a 503, and the failure is not cached', async () => {
    const jwt = await token();
    const certsBefore = hits('/certs');
    for (const path of ['/broken', '/not-json', '/redirect', '/missing']) {
      const verifier = pubsubVerifier(path);
      const before = hits(path);
      assertRejected(await verifier.verify(push(`Bearer ${jwt}`), now), 503, 'verification_unavailable');
      assertRejected(await verifier.verify(push(`Bearer ${jwt}`), now), 503, 'verification_unavailable');
      assert.equal(hits(path), before + 2, path);
    }
    // The redirect to /certs was not followed.
    assert.equal(hits('/certs'), certsBefore);
  });
});

describe('createSafeFetchText', () => {
  test('fetches over HTTPS through the pinned, checked connection', async () => {
    state.jwks = { keys: [keyA.jwk] };
    assert.deepEqual(JSON.parse(await fetcher.fetchText(url('/certs'))), state.jwks);
  });

  test('refuses plain http, credentials and non-URLs without connecting', async () => {
    const before = hits('/certs');
    for (const target of [
      `http://localhost:${port}/certs`,
      `https://u:p@localhost:${port}/certs`,
      'not a url',
      'file:///etc/passwd',
    ]) {
      await assert.rejects(fetcher.fetchText(target), target);
    }
    assert.equal(hits('/certs'), before);
  });

  test('refuses loopback addresses unless an operator allowed them', async () => {
    const strict = createSafeFetchText({
      allowPrivateNetworks: [],
      timeoutMs: 5000,
      resolve: toLoopback,
      extraCaPem: certPem,
    });
    try {
      const before = hits('/certs');
      await assert.rejects(strict.fetchText(url('/certs')), /private or reserved/);
      await assert.rejects(strict.fetchText(`https://127.0.0.1:${port}/certs`), /private or reserved/);
      assert.equal(hits('/certs'), before);
    } finally {
      await strict.close();
    }
  });

  test('refuses non-200 answers, redirects (not followed) and oversized bodies', async () => {
    const certsBefore = hits('/certs');
    await assert.rejects(fetcher.fetchText(url('/broken')), /answered 500/);
    await assert.rejects(fetcher.fetchText(url('/redirect')), /answered 302/);
    assert.equal(hits('/certs'), certsBefore);
    await assert.rejects(fetcher.fetchText(url('/big')), /more than 65536 bytes/);
  });

  test('refuses a server whose certificate is not trusted', async () => {
    const untrusting = createSafeFetchText({
      allowPrivateNetworks: ['127.0.0.0/8'],
      timeoutMs: 5000,
      resolve: toLoopback,
    });
    try {
      await assert.rejects(untrusting.fetchText(url('/certs')));
    } finally {
      await untrusting.close();
    }
  });
});

describe('gcp-pubsub through the ingestor', () => {
  before(() => {
    state.jwks = { keys: [keyA.jwk] };
  });

  test('pushes that arrive together for a source not yet cached build its verifier once: one JWKS fetch', () =>
    withIngestor('gcp_ingest', fetcher.fetchText, async ({ ingestor, addSource }) => {
      await addSource('pubsub', 'gcp-pubsub', {
        jwksUrl: url('/certs'),
        audience: AUDIENCE,
        serviceAccountEmail: SERVICE_ACCOUNT,
      });
      const source = await ingestor.find('pubsub');
      assert.ok(source);
      const authorization = `Bearer ${await token()}`;
      const before = hits('/certs');
      const answers = await Promise.all(
        Array.from({ length: 8 }, (_, n) =>
          ingestor.ingest('pubsub', push(authorization, pushBody({ messageId: `concurrent-${n}` })), source),
        ),
      );
      for (const answer of answers) assert.equal(answer.kind, 'accepted');
      assert.equal(hits('/certs') - before, 1, 'one verifier built, one JWKS fetched');
    }));

  test("a JWKS that cannot be fetched: the sender is told 503 and no more, the operator's log says why", async () => {
    const untrusting = createSafeFetchText({ allowPrivateNetworks: ['127.0.0.0/8'], timeoutMs: 5000 });
    const lines: { msg: string; err?: string; sourceId?: string }[] = [];
    const log = pino({ level: 'info' }, { write: (line: string) => void lines.push(JSON.parse(line)) });
    try {
      await withIngestor(
        'gcp_ingest_untrusted',
        untrusting.fetchText,
        async ({ ingestor, addSource }) => {
          await addSource('pubsub', 'gcp-pubsub', {
            jwksUrl: url('/certs'),
            audience: AUDIENCE,
            serviceAccountEmail: SERVICE_ACCOUNT,
          });
          const refused = await ingestor.ingest('pubsub', push(`Bearer ${await token()}`)).then(
            () => assert.fail('accepted a push whose keys could not be fetched'),
            (error: HeraldError) => error,
          );
          assert.equal(refused.status, 503);
          assert.equal(refused.code, 'verification_unavailable');
          assert.equal(refused.message, 'the JWKS could not be fetched');
          const told = lines.find((line) => line.msg === 'ingest: the JWKS could not be fetched');
          assert.ok(told, `no log line of the failed fetch in ${JSON.stringify(lines)}`);
          assert.match(told.err ?? '', /^TLS handshake failed \((DEPTH_ZERO_)?SELF_SIGNED_CERT/);
          assert.match(told.sourceId ?? '', /^src_/);
        },
        log,
      );
    } finally {
      await untrusting.close();
    }
  });
});

describe('gcp-pubsub through the server', () => {
  before(() => {
    state.jwks = { keys: [keyA.jwk] };
  });

  test('HERALD_EXTRA_CA_FILE is trusted by the JWKS fetch as by deliveries: a push verifies against a JWKS host it issued', async () => {
    const t = await startTestHerald('gcp_extra_ca', { env: { HERALD_EXTRA_CA_FILE: join(dir, 'cert.pem') } });
    try {
      await createApp(t, 'orders');
      const created = await t.call('POST', '/api/v1/source', {
        uid: 'pubsub',
        scheme: 'gcp-pubsub',
        app: 'orders',
        eventType: 'order.placed',
        settings: { jwksUrl: url('/certs'), audience: AUDIENCE, serviceAccountEmail: SERVICE_ACCOUNT },
      });
      assert.equal(created.status, 201, JSON.stringify(created.body));
      const pushed = await fetch(`${t.url}/ingest/pubsub`, {
        method: 'POST',
        headers: { authorization: `Bearer ${await token()}`, 'content-type': 'application/json' },
        body: pushBody(),
      });
      assert.equal(pushed.status, 204, await pushed.text());
    } finally {
      await t.close();
    }
  });
});
