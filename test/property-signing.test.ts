// Properties of signing and verification: Standard Webhooks sign/verify round trips for arbitrary
// ids, timestamps, bodies (unicode included) and 1–3 keys, checked by src/signing and by the
// `standardwebhooks` library; and for every inbound scheme that signs the body, a request signed by
// the documented algorithm (or the provider's library) is accepted, while any single-byte change or
// truncation of what is signed — body, id, timestamp — or of the signature is refused.
//
// Deterministic: a fixed seed (PROPERTY_SEED overrides it); PROPERTY_RUNS overrides every numRuns
// for longer local runs. A failure prints the seed and the shrunk counterexample.

import assert from 'node:assert/strict';
import { createHmac, randomBytes } from 'node:crypto';
import { describe, test } from 'node:test';
import { sign as signGitHub, verify as verifyGitHub } from '@octokit/webhooks-methods';
import fc from 'fast-check';
import { Webhook } from 'standardwebhooks';
import Stripe from 'stripe';
import {
  createVerifier,
  type InboundRequest,
  type SchemeConfigInput,
} from '../src/inbound/verifiers/index.ts';
import { decodeEndpointSecret, signPayload, verifySignature } from '../src/signing/standard-webhooks.ts';

const SEED = Number(process.env['PROPERTY_SEED'] ?? 0x51671);
const RUNS = process.env['PROPERTY_RUNS'] === undefined ? undefined : Number(process.env['PROPERTY_RUNS']);
const params = (numRuns: number) => ({ seed: SEED, numRuns: RUNS ?? numRuns });

// ---------------------------------------------------------------------------------------------
// Shared arbitraries.

const loneSurrogate = fc.integer({ min: 0xd800, max: 0xdfff }).map((c) => String.fromCharCode(c));
/** Text of every kind: astral planes, combining marks, and lone surrogates (encoded as U+FFFD). */
const unicode = (maxLength: number) =>
  fc.oneof(
    fc.string({ unit: 'binary', maxLength }),
    fc.string({ unit: 'grapheme', maxLength }),
    fc.string({ unit: fc.oneof(fc.string({ minLength: 1, maxLength: 1 }), loneSurrogate), maxLength }),
  );

const keyBytes = fc.oneof(
  fc.uint8Array({ minLength: 24, maxLength: 64 }),
  fc.uint8Array({ minLength: 1, maxLength: 23 }),
);
/** 1–3 distinct keys: two equal keys would make one signature stand for both. */
const keysArb = fc
  .uniqueArray(keyBytes, { minLength: 1, maxLength: 3, selector: (k) => Buffer.from(k).toString('hex') })
  .map((keys) => keys.map((k) => Buffer.from(k)));

/** What the library can also express (a Date); src/signing takes any safe integer. */
const LIBRARY_MAX_SECONDS = 8_640_000_000_000;
const timestampArb = fc.oneof(
  fc.integer({ min: 1_500_000_000, max: 2_100_000_000 }),
  fc.integer({ min: 0, max: LIBRARY_MAX_SECONDS }),
);

const withDateNow = <T>(ms: number, fn: () => T): T => {
  const real = Date.now;
  Date.now = () => ms;
  try {
    return fn();
  } finally {
    Date.now = real;
  }
};

const libraryAccepts = (key: Buffer, body: string, headers: Record<string, string>, nowMs: number) =>
  withDateNow(nowMs, () => {
    try {
      new Webhook(key.toString('base64')).verify(body, headers, { jsonParse: false });
      return true;
    } catch {
      return false;
    }
  });

/** A mutation of a byte string: one byte changed (xor with a non-zero value) or a truncation. */
interface ByteMutation {
  kind: 'change' | 'truncate';
  at: number;
  xor: number;
}
const byteMutationArb: fc.Arbitrary<ByteMutation> = fc.record({
  kind: fc.constantFrom<ByteMutation['kind']>('change', 'truncate'),
  at: fc.nat(),
  xor: fc.integer({ min: 1, max: 255 }),
});
function mutateBytes(bytes: Buffer, m: ByteMutation): Buffer {
  if (bytes.length === 0) return Buffer.from([m.xor]);
  const at = m.at % bytes.length;
  if (m.kind === 'truncate') return bytes.subarray(0, at);
  const copy = Buffer.from(bytes);
  copy[at] = copy[at]! ^ m.xor;
  return copy;
}

/** A header value changed in one character (to any other Latin-1 character, as HTTP carries) or cut short. */
interface TextMutation {
  kind: 'change' | 'truncate';
  at: number;
  to: number;
}
const textMutationArb: fc.Arbitrary<TextMutation> = fc.record({
  kind: fc.constantFrom<TextMutation['kind']>('change', 'truncate'),
  at: fc.nat(),
  to: fc.oneof(fc.integer({ min: 0x20, max: 0x7e }), fc.integer({ min: 0, max: 0xff })),
});
const HEX_DIGIT = /^[0-9a-fA-F]$/;
/**
 * null when the mutation does not change the value's meaning. Hex is case-insensitive by design
 * (bytes.ts decodes "AB" and "ab" alike), so flipping the case of a hex letter is no change there.
 */
function mutateText(text: string, m: TextMutation, hex: boolean): string | null {
  if (text.length === 0) return null;
  const at = m.at % text.length;
  if (m.kind === 'truncate') return text.slice(0, at);
  const was = text[at]!;
  const now = String.fromCharCode(m.to);
  if (now === was) return null;
  if (hex && HEX_DIGIT.test(was) && HEX_DIGIT.test(now) && was.toLowerCase() === now.toLowerCase())
    return null;
  return text.slice(0, at) + now + text.slice(at + 1);
}

// ---------------------------------------------------------------------------------------------
// Outbound: src/signing/standard-webhooks.ts against the standardwebhooks library.

describe('Standard Webhooks signing (src/signing)', () => {
  const message = fc.record({
    // Non-empty: the library treats an empty webhook-id as a missing header.
    msgId: fc.oneof(
      fc.stringMatching(/^msg_[A-Za-z0-9]{1,40}$/),
      unicode(40).filter((s) => s.length > 0),
    ),
    timestamp: timestampArb,
    body: unicode(400),
    keys: keysArb,
  });

  test('sign → verify round trips with every key, in src/signing and in the standardwebhooks library', () => {
    fc.assert(
      fc.property(message, fc.integer({ min: -300, max: 300 }), ({ msgId, timestamp, body, keys }, skew) => {
        const header = signPayload({ msgId, timestampSeconds: timestamp, body, keys });
        const entries = header.split(' ');
        assert.equal(entries.length, keys.length, 'one signature per key');
        const at = new Date(timestamp * 1000);
        keys.forEach((key, i) => {
          // The stored secret text ("whsec_" + base64) stands for exactly these key bytes.
          assert.deepEqual(decodeEndpointSecret(`whsec_${key.toString('base64')}`), key);
          // The library signs the same bytes to the same signature, entry for entry.
          assert.equal(entries[i], new Webhook(key.toString('base64')).sign(msgId, at, body));
          assert.ok(
            verifySignature({
              msgId,
              timestampSeconds: timestamp,
              body,
              signatureHeader: header,
              keys: [key],
            }),
          );
          assert.ok(
            verifySignature({
              msgId,
              timestampSeconds: timestamp,
              body: Buffer.from(body),
              signatureHeader: header,
              keys: [key],
            }),
            'a Buffer body verifies like its string',
          );
          const headers = {
            'webhook-id': msgId,
            'webhook-timestamp': String(timestamp),
            'webhook-signature': header,
          };
          assert.ok(libraryAccepts(key, body, headers, (timestamp + skew) * 1000), 'the library accepts it');
        });
        assert.ok(
          verifySignature({ msgId, timestampSeconds: timestamp, body, signatureHeader: header, keys }),
        );
        const stranger = randomBytes(32);
        assert.equal(
          verifySignature({
            msgId,
            timestampSeconds: timestamp,
            body,
            signatureHeader: header,
            keys: [stranger],
          }),
          false,
          'an unrelated key verifies nothing',
        );
      }),
      params(300),
    );
  });

  test('timestamps up to the largest safe integer round trip; anything else is refused, not thrown', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }),
        fc.oneof(
          fc.double(),
          fc.integer({ min: -1e9, max: -1 }),
          fc.constantFrom(Number.MAX_SAFE_INTEGER + 1, 0.5),
        ),
        unicode(20),
        keysArb,
        (timestamp, bad, body, keys) => {
          const header = signPayload({ msgId: 'msg_1', timestampSeconds: timestamp, body, keys });
          assert.ok(
            verifySignature({
              msgId: 'msg_1',
              timestampSeconds: timestamp,
              body,
              signatureHeader: header,
              keys,
            }),
          );
          if (!(Number.isSafeInteger(bad) && bad >= 0)) {
            assert.throws(
              () => signPayload({ msgId: 'msg_1', timestampSeconds: bad, body, keys }),
              TypeError,
            );
            assert.equal(
              verifySignature({ msgId: 'msg_1', timestampSeconds: bad, body, signatureHeader: header, keys }),
              false,
            );
          }
        },
      ),
      params(300),
    );
  });

  test('any single-byte change or truncation of body, id or timestamp is refused, here and by the library', () => {
    const field = fc.constantFrom<'body' | 'id' | 'timestamp'>('body', 'id', 'timestamp');
    fc.assert(
      fc.property(
        message,
        field,
        byteMutationArb,
        textMutationArb,
        ({ msgId, timestamp, body, keys }, which, bm, tm) => {
          const header = signPayload({ msgId, timestampSeconds: timestamp, body, keys });
          let id = msgId;
          let ts = String(timestamp);
          let raw: Buffer = Buffer.from(body);
          if (which === 'body') {
            raw = mutateBytes(raw, bm);
          } else if (which === 'id') {
            // Through UTF-8, as the id travels; a change that decodes back to the same bytes is none.
            const changed = mutateBytes(Buffer.from(msgId), bm).toString('utf8');
            fc.pre(!Buffer.from(changed).equals(Buffer.from(msgId)));
            id = changed;
          } else {
            const changed = mutateText(ts, tm, false);
            fc.pre(changed !== null);
            ts = changed;
          }
          const seconds = /^\d+$/.test(ts) ? Number(ts) : Number.NaN;
          for (const key of keys) {
            assert.equal(
              verifySignature({
                msgId: id,
                timestampSeconds: seconds,
                body: raw,
                signatureHeader: header,
                keys: [key],
              }),
              false,
              `${which} changed, yet it verified`,
            );
            if (which !== 'body') {
              const headers = { 'webhook-id': id, 'webhook-timestamp': ts, 'webhook-signature': header };
              assert.equal(
                libraryAccepts(key, body, headers, timestamp * 1000),
                false,
                `library: ${which} changed`,
              );
            }
          }
        },
      ),
      params(600),
    );
  });

  test('a changed or truncated signature fails for its own key and leaves the other keys valid', () => {
    fc.assert(
      fc.property(message, fc.nat(), textMutationArb, ({ msgId, timestamp, body, keys }, pick, m) => {
        const header = signPayload({ msgId, timestampSeconds: timestamp, body, keys });
        const entries = header.split(' ');
        const victim = pick % entries.length;
        const changed = mutateText(entries[victim]!, m, false);
        fc.pre(changed !== null);
        const mutated = [...entries.slice(0, victim), changed, ...entries.slice(victim + 1)].join(' ');
        const verifies = (key: Buffer) =>
          verifySignature({
            msgId,
            timestampSeconds: timestamp,
            body,
            signatureHeader: mutated,
            keys: [key],
          });
        keys.forEach((key, i) => {
          assert.equal(
            verifies(key),
            i !== victim,
            `key ${i} after damaging signature ${victim}: ${mutated}`,
          );
        });
        const headers = {
          'webhook-id': msgId,
          'webhook-timestamp': String(timestamp),
          'webhook-signature': mutated,
        };
        assert.equal(libraryAccepts(keys[victim]!, body, headers, timestamp * 1000), false, 'library');
      }),
      params(600),
    );
    // Truncating the header as a whole keeps exactly the signatures that survive intact.
    fc.assert(
      fc.property(message, fc.nat(), ({ msgId, timestamp, body, keys }, cut) => {
        const header = signPayload({ msgId, timestampSeconds: timestamp, body, keys });
        const short = header.slice(0, cut % header.length);
        const intact = new Set(short.split(' ').filter((entry) => header.split(' ').includes(entry)));
        keys.forEach((key, i) => {
          const own = header.split(' ')[i]!;
          assert.equal(
            verifySignature({
              msgId,
              timestampSeconds: timestamp,
              body,
              signatureHeader: short,
              keys: [key],
            }),
            intact.has(own),
            `key ${i} with header cut to ${short.length} of ${header.length}`,
          );
        });
      }),
      params(300),
    );
  });
});

// ---------------------------------------------------------------------------------------------
// Inbound verifiers: one description per scheme, one pair of properties for all.

interface Body {
  bytes: Buffer;
  /** The text the bytes encode, when they were made from text (libraries sign text). */
  text: string | null;
}

const textBody = (text: string): Body => ({ bytes: Buffer.from(text, 'utf8'), text });
const anyBody: fc.Arbitrary<Body> = fc.oneof(
  unicode(300).map(textBody),
  fc.uint8Array({ maxLength: 300 }).map((b) => ({ bytes: Buffer.from(b), text: null })),
  fc.jsonValue({ maxDepth: 3 }).map((v) => textBody(JSON.stringify(v))),
);
const visibleId = fc.stringMatching(/^[\x21-\x7e]{1,64}$/);
const utf8Secret = fc.oneof(
  fc.string({ minLength: 1, maxLength: 40 }),
  unicode(40).filter((s) => s.length > 0),
);
const utf8Secrets = fc.uniqueArray(utf8Secret, {
  minLength: 1,
  maxLength: 3,
  selector: (s) => Buffer.from(s).toString('hex'),
});

/** A JSON object body carrying `field: id`, in some layout, with unicode around it. */
const objectBodyWith = (field: string, id: string) =>
  fc
    .tuple(
      fc.dictionary(fc.string({ maxLength: 8 }), fc.jsonValue({ maxDepth: 2 }), { maxKeys: 4 }),
      unicode(60),
      fc.constantFrom<number | string>(0, 2, '\t'),
    )
    .map(([extra, note, indent]) => textBody(JSON.stringify({ ...extra, note, [field]: id }, null, indent)));

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });
function expectedPayload(bytes: Buffer): unknown {
  try {
    return JSON.parse(strictUtf8.decode(bytes));
  } catch {
    return null;
  }
}
const isJsonObject = (v: unknown) => typeof v === 'object' && v !== null && !Array.isArray(v);

/** One signed request, as a sender following the scheme's documentation would build it. */
interface SignedCase {
  config: SchemeConfigInput;
  secrets: string[];
  headers: Record<string, string>;
  body: Body;
  timestamp: number | null;
  deliveryId: string;
  /** Header names whose values are the signature or are signed; each must break the request when changed. */
  signed: string[];
  /** Signature headers in hex, where a case flip is no change. */
  hexHeaders: string[];
  tolerance: number;
  /** The provider library's own verdict on the request (text bodies only), when one exists. */
  libraryAccepts?: ((now: Date) => Promise<boolean>) | undefined;
}

interface SchemeDef {
  name: string;
  /** `oneSigner`: sign with a single secret (mutations must then break every signature). */
  build(oneSigner: boolean): fc.Arbitrary<Promise<SignedCase>>;
}

const hmacOf = (algorithm: string, key: string | Buffer, ...parts: (string | Buffer)[]) => {
  const mac = createHmac(algorithm, key);
  for (const part of parts) mac.update(part);
  return mac.digest();
};
const whsec = (key: Buffer) => `whsec_${key.toString('base64')}`;
const timestampish = fc.integer({ min: 1, max: 99_999_999_999 });
const pickSigners = (count: number, oneSigner: boolean) =>
  oneSigner
    ? fc.nat({ max: count - 1 }).map((i) => [i])
    : fc.uniqueArray(fc.nat({ max: count - 1 }), { minLength: 1, maxLength: count });

const SCHEMES: SchemeDef[] = [
  {
    name: 'standard-webhooks',
    build: (oneSigner) =>
      fc
        .tuple(keysArb, visibleId, timestampish, anyBody, fc.constantFrom('webhook', 'svix'), fc.boolean())
        .chain(([keys, id, ts, body, brand, useLibrary]) =>
          pickSigners(keys.length, oneSigner).map(async (signers) => {
            const signature = signers
              .map((i) =>
                useLibrary && body.text !== null
                  ? new Webhook(keys[i]!.toString('base64')).sign(id, new Date(ts * 1000), body.text)
                  : `v1,${hmacOf('sha256', keys[i]!, `${id}.${ts}.`, body.bytes).toString('base64')}`,
              )
              .join(' ');
            const headers = {
              [`${brand}-id`]: id,
              [`${brand}-timestamp`]: String(ts),
              [`${brand}-signature`]: signature,
            };
            const text = body.text;
            return {
              config: { scheme: 'standard-webhooks' },
              secrets: keys.map(whsec),
              headers,
              body,
              timestamp: ts,
              deliveryId: id,
              signed: Object.keys(headers),
              hexHeaders: [],
              tolerance: 300,
              libraryAccepts:
                text === null
                  ? undefined
                  : async (now: Date) =>
                      signers.every((i) =>
                        libraryAccepts(
                          keys[i]!,
                          text,
                          {
                            'webhook-id': id,
                            'webhook-timestamp': String(ts),
                            'webhook-signature': signature,
                          },
                          now.getTime(),
                        ),
                      ),
            } satisfies SignedCase;
          }),
        ),
  },
  {
    name: 'stripe',
    build: (oneSigner) =>
      fc.tuple(utf8Secrets, visibleId, timestampish, fc.boolean()).chain(([secrets, id, ts, useLibrary]) =>
        fc
          .tuple(pickSigners(secrets.length, oneSigner), objectBodyWith('id', id))
          .map(async ([signers, body]) => {
            // Stripe's own header builder signs one secret; during a roll Stripe sends one v1 per secret.
            const header =
              useLibrary && signers.length === 1 && body.text !== null && body.text !== ''
                ? Stripe.webhooks.generateTestHeaderString({
                    payload: body.text,
                    secret: secrets[signers[0]!]!,
                    timestamp: ts,
                  })
                : `t=${ts},${signers.map((i) => `v1=${hmacOf('sha256', secrets[i]!, `${ts}.`, body.bytes).toString('hex')}`).join(',')}`;
            const text = body.text;
            return {
              config: { scheme: 'stripe' },
              secrets,
              headers: { 'stripe-signature': header },
              body,
              timestamp: ts,
              deliveryId: id,
              signed: ['stripe-signature'],
              hexHeaders: ['stripe-signature'],
              tolerance: 300,
              // Stripe's library refuses blank secrets outright, whatever they signed.
              libraryAccepts:
                text === null || text === '' || signers.some((i) => /^\s*$/.test(secrets[i]!))
                  ? undefined
                  : async (now: Date) =>
                      signers.every((i) => {
                        try {
                          return Stripe.webhooks.signature!.verifyHeader(
                            text,
                            header,
                            secrets[i]!,
                            300,
                            undefined,
                            now.getTime(),
                          );
                        } catch {
                          return false;
                        }
                      }),
            } satisfies SignedCase;
          }),
      ),
  },
  {
    name: 'github',
    build: () =>
      fc
        .tuple(utf8Secrets, visibleId, anyBody, fc.boolean(), fc.nat())
        .map(async ([secrets, id, body, useLibrary, pick]) => {
          // GitHub sends one signature; the verifier may hold several secrets (rotation).
          const secret = secrets[pick % secrets.length]!;
          const signature =
            useLibrary && body.text !== null && body.text !== ''
              ? await signGitHub(secret, body.text)
              : `sha256=${hmacOf('sha256', secret, body.bytes).toString('hex')}`;
          const text = body.text;
          return {
            config: { scheme: 'github' },
            secrets,
            headers: { 'x-hub-signature-256': signature, 'x-github-delivery': id, 'x-github-event': 'push' },
            body,
            timestamp: null,
            deliveryId: id,
            signed: ['x-hub-signature-256'],
            hexHeaders: ['x-hub-signature-256'],
            tolerance: 0,
            libraryAccepts:
              text === null || text === '' ? undefined : async () => verifyGitHub(secret, text, signature),
          } satisfies SignedCase;
        }),
  },
  {
    name: 'slack',
    build: () =>
      fc
        .tuple(utf8Secrets, visibleId, timestampish, fc.nat(), fc.boolean())
        .chain(([secrets, id, ts, pick, inBody]) =>
          // The Events API carries event_id in the body; other requests name a header in the settings.
          (inBody ? objectBodyWith('event_id', id) : anyBody).map(async (body) => {
            const secret = secrets[pick % secrets.length]!;
            const signature = `v0=${hmacOf('sha256', secret, `v0:${ts}:`, body.bytes).toString('hex')}`;
            return {
              config: { scheme: 'slack', deliveryIdHeader: 'X-Request-Id' },
              secrets,
              headers: {
                'x-slack-signature': signature,
                'x-slack-request-timestamp': String(ts),
                'x-request-id': id,
              },
              body,
              timestamp: ts,
              deliveryId: id,
              signed: ['x-slack-signature', 'x-slack-request-timestamp'],
              hexHeaders: ['x-slack-signature'],
              tolerance: 300,
            } satisfies SignedCase;
          }),
        ),
  },
  {
    name: 'shopify',
    build: () =>
      fc.tuple(utf8Secrets, visibleId, anyBody, fc.nat()).map(async ([secrets, id, body, pick]) => {
        const secret = secrets[pick % secrets.length]!;
        return {
          config: { scheme: 'shopify' },
          secrets,
          headers: {
            'x-shopify-hmac-sha256': hmacOf('sha256', secret, body.bytes).toString('base64'),
            'x-shopify-webhook-id': id,
            'x-shopify-topic': 'orders/create',
          },
          body,
          timestamp: null,
          deliveryId: id,
          signed: ['x-shopify-hmac-sha256'],
          hexHeaders: [],
          tolerance: 0,
        } satisfies SignedCase;
      }),
  },
  {
    name: 'hmac (every algorithm, encoding, prefix and timestamp setting)',
    build: () =>
      fc
        .record({
          secrets: utf8Secrets,
          id: visibleId,
          ts: timestampish,
          body: anyBody,
          pick: fc.nat(),
          algorithm: fc.constantFrom<'sha256' | 'sha512'>('sha256', 'sha512'),
          encoding: fc.constantFrom<'hex' | 'base64'>('hex', 'base64'),
          // Printable ASCII, as a header can carry it, not starting with whitespace (the settings
          // refuse that: header values arrive trimmed).
          prefix: fc.option(fc.stringMatching(/^[\x21-\x7e][\x20-\x7e]{0,63}$/), { nil: undefined }),
          signHeader: fc.stringMatching(/^X-Sig[A-Za-z0-9-]{0,12}$/),
          timestampHeader: fc.option(fc.stringMatching(/^x-ts[a-z0-9-]{0,12}$/), { nil: undefined }),
          tolerance: fc.option(fc.integer({ min: 1, max: 86_400 }), { nil: undefined }),
        })
        .map(async (c) => {
          const secret = c.secrets[c.pick % c.secrets.length]!;
          const tolerance = c.timestampHeader === undefined ? undefined : c.tolerance;
          const digest = hmacOf(
            c.algorithm,
            secret,
            c.timestampHeader === undefined ? '' : `${c.ts}.`,
            c.body.bytes,
          );
          const signatureHeader = c.signHeader.toLowerCase();
          const headers: Record<string, string> = {
            [signatureHeader]: (c.prefix ?? '') + digest.toString(c.encoding),
            'x-delivery': c.id,
          };
          if (c.timestampHeader !== undefined) headers[c.timestampHeader] = String(c.ts);
          return {
            config: {
              scheme: 'hmac',
              header: c.signHeader,
              algorithm: c.algorithm,
              encoding: c.encoding,
              ...(c.prefix === undefined ? {} : { prefix: c.prefix }),
              ...(c.timestampHeader === undefined ? {} : { timestampHeader: c.timestampHeader }),
              ...(tolerance === undefined ? {} : { toleranceSeconds: tolerance }),
              deliveryIdHeader: 'X-Delivery',
            },
            secrets: c.secrets,
            headers,
            body: c.body,
            timestamp: c.timestampHeader === undefined ? null : c.ts,
            deliveryId: c.id,
            signed:
              c.timestampHeader === undefined ? [signatureHeader] : [signatureHeader, c.timestampHeader],
            hexHeaders: c.encoding === 'hex' ? [signatureHeader] : [],
            tolerance: tolerance ?? 300,
          } satisfies SignedCase;
        }),
  },
];

const inbound = (headers: Record<string, string>, body: Buffer): InboundRequest => ({
  method: 'POST',
  headers,
  rawBody: body,
});

describe('inbound verifiers', () => {
  for (const scheme of SCHEMES) {
    test(`${scheme.name}: a signed request is accepted inside the window and stale outside it`, async () => {
      await fc.assert(
        fc.asyncProperty(
          scheme.build(false),
          fc.integer({ min: -1000, max: 1000 }),
          async (built, skewPick) => {
            const c = await built;
            const verifier = createVerifier(c.config, c.secrets, {});
            // Skew within ±2 × the window, with both edges of the window hit exactly now and then.
            const skew =
              c.timestamp === null
                ? skewPick
                : skewPick % 7 === 0
                  ? Math.sign(skewPick) * c.tolerance
                  : Math.round((skewPick / 1000) * 2 * c.tolerance);
            const now = new Date(((c.timestamp ?? 1_700_000_000) + skew) * 1000);
            const verdict = await verifier.verify(inbound(c.headers, c.body.bytes), now);
            const payload = expectedPayload(c.body.bytes);
            // Stripe's id is the body's event id; Slack's is the body's event_id when there is one
            // (else the configured header); the others' is a header.
            const bodyField = { stripe: 'id', slack: 'event_id' }[c.config.scheme as string];
            const fromBody =
              bodyField !== undefined && isJsonObject(payload) && Object.hasOwn(payload as object, bodyField);
            const expectedId = fromBody
              ? (payload as Record<string, unknown>)[bodyField!]
              : c.config.scheme === 'stripe'
                ? undefined
                : c.deliveryId;
            const inWindow = c.timestamp === null || Math.abs(skew) <= c.tolerance;
            if (!inWindow) {
              assert.equal(!verdict.ok && verdict.code, 'stale_timestamp', JSON.stringify(verdict));
            } else if (typeof expectedId !== 'string' || !/^[\x21-\x7e]{1,255}$/.test(expectedId)) {
              assert.equal(!verdict.ok && verdict.code, 'missing_delivery_id', JSON.stringify(verdict));
            } else {
              assert.ok(verdict.ok, `refused: ${JSON.stringify(verdict)}`);
              assert.equal(verdict.deliveryId, expectedId);
              assert.deepEqual(verdict.payload, payload);
            }
            if (c.libraryAccepts !== undefined && inWindow) {
              assert.ok(await c.libraryAccepts(now), 'the provider library accepts the same request');
            }
          },
        ),
        params(100),
      );
    });

    test(`${scheme.name}: any single-byte change or truncation of the body, a signed header or the signature is refused`, async () => {
      await fc.assert(
        fc.asyncProperty(
          scheme.build(true),
          fc.nat(),
          byteMutationArb,
          textMutationArb,
          async (built, target, bodyMutation, textMutation) => {
            const c = await built;
            const verifier = createVerifier(c.config, c.secrets, {});
            const now = new Date((c.timestamp ?? 1_700_000_000) * 1000);
            const genuine = await verifier.verify(inbound(c.headers, c.body.bytes), now);
            // Not vacuous: the request as signed is accepted (unless a random body happens to carry
            // an unusable id field, which says nothing about signatures).
            fc.pre(genuine.ok || genuine.code !== 'missing_delivery_id');
            assert.ok(genuine.ok, `the genuine request was refused: ${JSON.stringify(genuine)}`);
            const targets = ['(body)', ...c.signed];
            const which = targets[target % targets.length]!;
            const headers = { ...c.headers };
            let body = c.body.bytes;
            if (which === '(body)') {
              // Appending a byte changes the body as surely as changing one.
              body =
                bodyMutation.xor % 5 === 0
                  ? Buffer.concat([body, Buffer.from([bodyMutation.xor])])
                  : mutateBytes(body, bodyMutation);
            } else {
              const changed = mutateText(headers[which]!, textMutation, c.hexHeaders.includes(which));
              fc.pre(changed !== null);
              headers[which] = changed;
            }
            const verdict = await verifier.verify(inbound(headers, body), now);
            assert.equal(
              verdict.ok,
              false,
              `${which} changed (${JSON.stringify(headers[which] ?? '')}), yet accepted`,
            );
          },
        ),
        params(200),
      );
    });
  }
});

describe('found by these properties, and fixed', () => {
  // A prefix starting with whitespace could never match (header values arrive trimmed): the
  // settings now refuse it, which this property accepts as the fix.
  test('hmac: every prefix the settings accept can verify a signed request', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.stringMatching(/^[ \t]{1,3}[\x21-\x7e]{0,10}$/),
        utf8Secret,
        anyBody,
        async (prefix, secret, body) => {
          const config: SchemeConfigInput = {
            scheme: 'hmac',
            header: 'x-sig',
            algorithm: 'sha256',
            encoding: 'hex',
            prefix,
            deliveryIdHeader: 'x-id',
          };
          let verifier: ReturnType<typeof createVerifier>;
          try {
            verifier = createVerifier(config, [secret], {});
          } catch {
            return; // Refused as configuration: that is a fix too.
          }
          const signature = prefix + hmacOf('sha256', secret, body.bytes).toString('hex');
          const verdict = await verifier.verify(
            inbound({ 'x-sig': signature, 'x-id': 'd1' }, body.bytes),
            new Date(),
          );
          assert.ok(
            verdict.ok,
            `prefix ${JSON.stringify(prefix)} accepted by the settings, yet: ${JSON.stringify(verdict)}`,
          );
        },
      ),
      params(20),
    );
  });
});
