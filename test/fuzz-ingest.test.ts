// Fuzzing POST /ingest/{source}: random requests (bytes for bodies; garbage, huge, unicode and empty
// header values; any method and content type; odd source names) and valid signed requests mutated
// byte by byte, sent as raw HTTP so nothing in a client library tidies them up. Properties: never a
// 5xx, the server keeps answering, and nothing is written (intake, observation, message) for any
// request that did not get a 2xx — while each 2xx records exactly one observation. The signature
// header parsers are fuzzed directly too: no verifier's verify() ever throws.
//
// Deterministic: a fixed seed (PROPERTY_SEED overrides it); PROPERTY_RUNS overrides every numRuns
// for longer local runs. A failure prints the seed and the shrunk counterexample.

import assert from 'node:assert/strict';
import { createHash, createHmac } from 'node:crypto';
import net from 'node:net';
import { after, before, describe, test } from 'node:test';
import fc from 'fast-check';
import { BusinessKeyTemplateError, compileBusinessKey } from '../src/inbound/business-key.ts';
import { createVerifier, type SchemeConfigInput } from '../src/inbound/verifiers/index.ts';
import { createApp } from './support/fixtures.ts';
import { startTestHerald, type TestHerald } from './support/herald.ts';

const SEED = Number(process.env['PROPERTY_SEED'] ?? 0xf022);
const RUNS = process.env['PROPERTY_RUNS'] === undefined ? undefined : Number(process.env['PROPERTY_RUNS']);
const params = (numRuns: number) => ({ seed: SEED, numRuns: RUNS ?? numRuns });

// ---------------------------------------------------------------------------------------------
// The sources: one per scheme that verifies without the network, each with a signer written from
// the provider's documentation.

interface Signed {
  headers: [string, string][];
}
interface SourceDef {
  uid: string;
  create: Record<string, unknown>;
  sign(body: Buffer, deliveryId: string, nowSeconds: number): Signed;
}

/** A body as the ingest path hands it to a business-key template: its bytes and their digest. */
const bodyOf = (text: string) => {
  const rawBody = Buffer.from(text);
  return { rawBody, bodySha256: createHash('sha256').update(rawBody).digest() };
};

const hmac = (algorithm: string, key: string | Buffer, ...parts: (string | Buffer)[]) => {
  const mac = createHmac(algorithm, key);
  for (const part of parts) mac.update(part);
  return mac.digest();
};

const SW_KEY = Buffer.alloc(32, 9);
const SOURCES: SourceDef[] = [
  {
    uid: 'fz-standard',
    create: { scheme: 'standard-webhooks', secret: `whsec_${SW_KEY.toString('base64')}` },
    sign: (body, id, ts) => ({
      headers: [
        ['webhook-id', id],
        ['webhook-timestamp', String(ts)],
        ['webhook-signature', `v1,${hmac('sha256', SW_KEY, `${id}.${ts}.`, body).toString('base64')}`],
      ],
    }),
  },
  {
    // The delivery id is the event id in the body: the body builder puts `id` there.
    uid: 'fz-stripe',
    create: { scheme: 'stripe', secret: 'whsec_fuzz_stripe_secret' },
    sign: (body, _id, ts) => ({
      headers: [
        [
          'stripe-signature',
          `t=${ts},v1=${hmac('sha256', 'whsec_fuzz_stripe_secret', `${ts}.`, body).toString('hex')}`,
        ],
      ],
    }),
  },
  {
    uid: 'fz-github',
    create: { scheme: 'github', secret: 'fuzz-github-secret' },
    sign: (body, id) => ({
      headers: [
        ['x-hub-signature-256', `sha256=${hmac('sha256', 'fuzz-github-secret', body).toString('hex')}`],
        ['x-github-delivery', id],
        ['x-github-event', 'push'],
      ],
    }),
  },
  {
    uid: 'fz-slack',
    create: { scheme: 'slack', secret: 'fuzz-slack-secret', settings: { deliveryIdHeader: 'x-request-id' } },
    sign: (body, id, ts) => ({
      headers: [
        ['x-slack-signature', `v0=${hmac('sha256', 'fuzz-slack-secret', `v0:${ts}:`, body).toString('hex')}`],
        ['x-slack-request-timestamp', String(ts)],
        ['x-request-id', id],
      ],
    }),
  },
  {
    // A business key from a header as well as the id.
    uid: 'fz-shopify',
    create: {
      scheme: 'shopify',
      secret: 'fuzz-shopify-secret',
      businessKey: '{{header.x-shopify-shop-domain}}:{{delivery_id}}',
    },
    sign: (body, id) => ({
      headers: [
        ['x-shopify-hmac-sha256', hmac('sha256', 'fuzz-shopify-secret', body).toString('base64')],
        ['x-shopify-webhook-id', id],
        ['x-shopify-shop-domain', 'shop.example'],
      ],
    }),
  },
  {
    uid: 'fz-hmac-hex',
    create: {
      scheme: 'hmac',
      secret: 'fuzz-hmac-hex-secret',
      settings: {
        header: 'X-Signature',
        algorithm: 'sha256',
        encoding: 'hex',
        prefix: 'sha256=',
        timestampHeader: 'x-timestamp',
        deliveryIdHeader: 'x-delivery-id',
      },
    },
    sign: (body, id, ts) => ({
      headers: [
        ['x-signature', `sha256=${hmac('sha256', 'fuzz-hmac-hex-secret', `${ts}.`, body).toString('hex')}`],
        ['x-timestamp', String(ts)],
        ['x-delivery-id', id],
      ],
    }),
  },
  {
    // A business key read from the body.
    uid: 'fz-hmac-b64',
    create: {
      scheme: 'hmac',
      secret: 'fuzz-hmac-b64-secret',
      settings: {
        header: 'x-sig',
        algorithm: 'sha512',
        encoding: 'base64',
        deliveryIdHeader: 'x-delivery-id',
      },
      businessKey: '{{body.ticket}}',
    },
    sign: (body, id) => ({
      headers: [
        ['x-sig', hmac('sha512', 'fuzz-hmac-b64-secret', body).toString('base64')],
        ['x-delivery-id', id],
      ],
    }),
  },
];

/** Every header name any scheme reads: the interesting ones to fill with garbage. */
const SCHEME_HEADERS = [
  ...new Set([
    ...SOURCES.flatMap((s) => s.sign(Buffer.alloc(0), 'x', 1).headers.map(([name]) => name)),
    'svix-id',
    'svix-timestamp',
    'svix-signature',
    'x-amz-sns-message-type',
    'authorization',
  ]),
];

let t: TestHerald;
let port: number;

before(async () => {
  t = await startTestHerald('fuzz_ingest', { worker: false });
  port = Number(new URL(t.url).port);
  await createApp(t, 'fuzz');
  for (const source of SOURCES) {
    const created = await t.call('POST', '/api/v1/source', {
      uid: source.uid,
      app: 'fuzz',
      eventType: 'fuzz.event',
      ...source.create,
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
  }
});
after(async () => {
  await t.close();
});

// ---------------------------------------------------------------------------------------------
// Raw HTTP/1.1: any method, any header bytes, exactly the body given.

interface RawRequest {
  method: string;
  path: string;
  headers: [string, Buffer | string][];
  body: Buffer;
}

function describeRequest(r: RawRequest): string {
  const show = (v: Buffer | string) =>
    JSON.stringify(Buffer.isBuffer(v) ? v.toString('latin1') : v).slice(0, 200);
  return `${r.method} ${r.path} ${r.headers.map(([n, v]) => `${n}: ${show(v)}`).join(' | ')} body(${r.body.length}) ${show(r.body.subarray(0, 120))}`;
}

function send(r: RawRequest): Promise<{ status: number; text: string }> {
  const head = [
    Buffer.from(
      `${r.method} ${r.path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: ${r.body.length}\r\n`,
      'latin1',
    ),
    ...r.headers.map(([name, value]) =>
      Buffer.concat([Buffer.from(`${name}: `, 'latin1'), Buffer.from(value), Buffer.from('\r\n')]),
    ),
    Buffer.from('\r\n'),
  ];
  return new Promise((resolve, reject) => {
    const socket = net.connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    socket.setTimeout(20_000, () =>
      socket.destroy(new Error(`no answer within 20 s to ${describeRequest(r)}`)),
    );
    socket.on('data', (chunk) => chunks.push(chunk));
    // The server closes after its answer (Connection: close); a half-close from this side
    // first would make node drop the request unanswered.
    socket.on('end', () => socket.end());
    socket.on('error', reject);
    socket.on('close', () => {
      const text = Buffer.concat(chunks).toString('latin1');
      const status = /^HTTP\/1\.[01] (\d{3})/.exec(text);
      if (status === null)
        reject(new Error(`no HTTP answer (${JSON.stringify(text.slice(0, 80))}) to ${describeRequest(r)}`));
      else resolve({ status: Number(status[1]), text });
    });
    socket.write(Buffer.concat([...head, r.body]));
  });
}

interface Counts {
  intake: number;
  observation: number;
  message: number;
}
const counts = async (): Promise<Counts> =>
  (
    await t.database.db.query<Counts>(
      `select (select count(*) from intake)::int as intake,
              (select count(*) from intake_observation)::int as observation,
              (select count(*) from message)::int as message`,
    )
  ).rows[0]!;

/** Sends one request and checks the properties that hold for every request. */
async function sendAndCheck(r: RawRequest): Promise<number> {
  const before = await counts();
  const { status, text } = await send(r);
  const afterwards = await counts();
  const what = `${status} for ${describeRequest(r)}\n${text.slice(0, 400)}`;
  assert.ok(status < 500, `a 5xx: ${what}`);
  if (status >= 200 && status < 300) {
    assert.equal(
      afterwards.observation,
      before.observation + 1,
      `a 2xx records exactly one observation: ${what}`,
    );
  } else {
    assert.deepEqual(afterwards, before, `rows written for a refused request: ${what}`);
  }
  return status;
}

// ---------------------------------------------------------------------------------------------
// Generators.

const loneSurrogate = fc.integer({ min: 0xd800, max: 0xdfff }).map((c) => String.fromCharCode(c));
const unicode = (maxLength: number) =>
  fc.oneof(
    fc.string({ unit: 'binary', maxLength }),
    fc.string({ unit: fc.oneof(fc.string({ minLength: 1, maxLength: 1 }), loneSurrogate), maxLength }),
  );

/** Header bytes that HTTP can carry in a value (no CR or LF, which would end the line). */
const headerBytes = (maxLength: number) =>
  fc.uint8Array({ maxLength }).map((b) => Buffer.from(b.filter((x) => x !== 0x0d && x !== 0x0a)));

const headerValue: fc.Arbitrary<Buffer | string> = fc.oneof(
  fc.constant(''),
  fc.constantFrom(
    ' ',
    '\t',
    'v1,',
    'v1, v1,',
    't=,v1=',
    'sha256=',
    'v0=',
    '=',
    ',,,',
    'Bearer ',
    'null',
    '0',
    '-1',
  ),
  fc.stringMatching(/^[\x20-\x7e]{0,80}$/),
  unicode(40).map((s) => Buffer.from(s.replace(/[\r\n]/g, ''), 'utf8')),
  headerBytes(64),
  // Huge: around and past node's 16 KiB header limit.
  fc.integer({ min: 1_000, max: 20_000 }).map((n) => 'A'.repeat(n)),
  fc
    .tuple(fc.stringMatching(/^[A-Za-z0-9+/=]{0,90}$/), fc.nat({ max: 3 }))
    .map(([b64, n]) => `v1,${b64}${' v1,x'.repeat(n)}`),
  fc
    .tuple(fc.integer({ min: -5, max: 99_999_999_999 }), fc.stringMatching(/^[0-9a-fA-F]{0,70}$/))
    .map(([ts, hex]) => `t=${ts},v1=${hex},v0=${hex}`),
  fc.stringMatching(/^[0-9a-fA-F]{0,130}$/).map((hex) => `sha256=${hex}`),
);
const headerName = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom(...SCHEME_HEADERS) },
  fc.constantFrom(...SCHEME_HEADERS).map((n) => n.toUpperCase()),
  fc
    .stringMatching(/^[a-z][a-z0-9-]{0,20}$/)
    .filter(
      (n) => !['content-length', 'transfer-encoding', 'host', 'connection', 'expect', 'upgrade'].includes(n),
    ),
);
const contentType = fc.option(
  fc.oneof(
    fc.constantFrom(
      'application/json',
      'application/json; charset=utf-8',
      'application/json; charset=utf-16',
      'text/plain',
      'application/x-www-form-urlencoded',
      'multipart/form-data; boundary=x',
      'application/octet-stream',
      '*/*',
      '',
      'application/json; charset=',
      ';;;',
    ),
    fc.stringMatching(/^[\x20-\x7e]{0,60}$/),
  ),
  { nil: undefined },
);
const method = fc.oneof(
  { weight: 8, arbitrary: fc.constant('POST') },
  fc.constantFrom('GET', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS'),
  fc.stringMatching(/^[A-Z]{1,10}$/).filter((m) => m !== 'CONNECT'),
);
const sourceUid = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom(...SOURCES.map((s) => s.uid)) },
  fc.stringMatching(/^[A-Za-z0-9._~-]{0,40}$/),
  // Percent-encoded bytes: NUL, invalid UTF-8, slashes, dots.
  fc
    .uint8Array({ minLength: 1, maxLength: 12 })
    .map((b) => [...b].map((x) => `%${x.toString(16).padStart(2, '0')}`).join('')),
  fc.constantFrom('..', '%2e%2e', '%zz', 'fz-github%2F..', '%C0%AF', '%FF%FE', '%01', 'fz-github%20'),
);
const bodyArb = fc.oneof(
  fc.uint8Array({ maxLength: 2048 }).map((b) => Buffer.from(b)),
  unicode(300).map((s) => Buffer.from(s, 'utf8')),
  fc.jsonValue({ maxDepth: 3 }).map((v) => Buffer.from(JSON.stringify(v))),
  fc.constant(Buffer.alloc(0)),
);

describe('random requests', () => {
  test('never a 5xx, and nothing stored without a 2xx', async () => {
    const request = fc.record({
      method,
      source: sourceUid,
      query: fc.option(fc.stringMatching(/^[A-Za-z0-9=&%._-]{0,30}$/), { nil: undefined }),
      contentType,
      headers: fc.array(fc.tuple(headerName, headerValue), { maxLength: 8 }),
      body: bodyArb,
    });
    await fc.assert(
      fc.asyncProperty(request, async (q) => {
        const headers: [string, Buffer | string][] = [...q.headers];
        if (q.contentType !== undefined) headers.push(['content-type', q.contentType]);
        const status = await sendAndCheck({
          method: q.method,
          path: `/ingest/${q.source}${q.query === undefined ? '' : `?${q.query}`}`,
          headers,
          body: q.body,
        });
        // None of these carries a valid signature.
        assert.ok(status < 200 || status >= 300, `a random request was accepted (${status})`);
      }),
      params(200),
    );
  });
});

// ---------------------------------------------------------------------------------------------
// Valid signed requests, mutated.

let serial = 0;
const nextId = () => `fz_${process.pid}_${++serial}`;

/** A body that every source can accept: a JSON object with `id` (Stripe) and a `ticket` (business key). */
const validBody = fc
  .record({
    ticket: fc.oneof(
      { weight: 4, arbitrary: fc.stringMatching(/^[A-Za-z0-9-]{1,20}$/) },
      fc.integer(),
      unicode(20).filter((s) => s.length > 0),
    ),
    note: unicode(80),
    extra: fc.jsonValue({ maxDepth: 2 }),
  })
  .map((fields) => (id: string) => Buffer.from(JSON.stringify({ id, ...fields }), 'utf8'));

type Mutation =
  | { kind: 'none' }
  | { kind: 'body-byte'; at: number; xor: number }
  | { kind: 'body-truncate'; at: number }
  | { kind: 'body-append'; byte: number }
  | { kind: 'header-byte'; header: number; at: number; to: number }
  | { kind: 'header-truncate'; header: number; at: number }
  | { kind: 'header-drop'; header: number }
  | { kind: 'header-duplicate'; header: number }
  | { kind: 'header-replace'; header: number; value: Buffer | string }
  | { kind: 'method'; method: string }
  | { kind: 'content-type'; value: Buffer | string };

const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  fc.constant({ kind: 'none' as const }),
  fc.record({ kind: fc.constant('body-byte' as const), at: fc.nat(), xor: fc.integer({ min: 1, max: 255 }) }),
  fc.record({ kind: fc.constant('body-truncate' as const), at: fc.nat() }),
  fc.record({ kind: fc.constant('body-append' as const), byte: fc.integer({ min: 0, max: 255 }) }),
  fc.record({
    kind: fc.constant('header-byte' as const),
    header: fc.nat(),
    at: fc.nat(),
    to: fc.integer({ min: 0, max: 255 }),
  }),
  fc.record({ kind: fc.constant('header-truncate' as const), header: fc.nat(), at: fc.nat() }),
  fc.record({ kind: fc.constant('header-drop' as const), header: fc.nat() }),
  fc.record({ kind: fc.constant('header-duplicate' as const), header: fc.nat() }),
  fc.record({ kind: fc.constant('header-replace' as const), header: fc.nat(), value: headerValue }),
  fc.record({ kind: fc.constant('method' as const), method }),
  fc.record({ kind: fc.constant('content-type' as const), value: headerValue }),
);

function mutate(r: RawRequest, m: Mutation): RawRequest {
  const headers = [...r.headers];
  const pick = (n: number) => n % headers.length;
  switch (m.kind) {
    case 'none':
      return r;
    case 'body-byte': {
      if (r.body.length === 0) return r;
      const body = Buffer.from(r.body);
      body[m.at % body.length]! ^= m.xor;
      return { ...r, body };
    }
    case 'body-truncate':
      return { ...r, body: r.body.subarray(0, m.at % (r.body.length + 1)) };
    case 'body-append':
      return { ...r, body: Buffer.concat([r.body, Buffer.from([m.byte])]) };
    case 'header-byte': {
      const [name, value] = headers[pick(m.header)]!;
      const bytes = Buffer.from(value);
      if (bytes.length === 0) return r;
      // Never CR or LF: those would end the header line (a different request, not a mutation).
      bytes[m.at % bytes.length] = m.to === 0x0d || m.to === 0x0a ? 0x20 : m.to;
      headers[pick(m.header)] = [name, bytes];
      return { ...r, headers };
    }
    case 'header-truncate': {
      const [name, value] = headers[pick(m.header)]!;
      const bytes = Buffer.from(value);
      headers[pick(m.header)] = [name, bytes.subarray(0, m.at % (bytes.length + 1))];
      return { ...r, headers };
    }
    case 'header-drop':
      headers.splice(pick(m.header), 1);
      return { ...r, headers };
    case 'header-duplicate':
      headers.push(headers[pick(m.header)]!);
      return { ...r, headers };
    case 'header-replace':
      headers[pick(m.header)] = [headers[pick(m.header)]![0], m.value];
      return { ...r, headers };
    case 'method':
      return { ...r, method: m.method };
    case 'content-type':
      return { ...r, headers: [...headers.filter(([n]) => n !== 'content-type'), ['content-type', m.value]] };
  }
}

describe('valid signed requests, mutated', () => {
  test('a signed request is accepted; a mutated one never causes a 5xx nor stores anything unless accepted', async () => {
    await fc.assert(
      fc.asyncProperty(fc.constantFrom(...SOURCES), validBody, mutation, async (source, body, m) => {
        const id = nextId();
        const raw = body(id);
        const signed = source.sign(raw, id, Math.floor(Date.now() / 1000));
        const request: RawRequest = {
          method: 'POST',
          path: `/ingest/${source.uid}`,
          headers: [['content-type', 'application/json'], ...signed.headers],
          body: raw,
        };
        const status = await sendAndCheck(mutate(request, m));
        if (m.kind === 'none') assert.equal(status, 204, `the signed request itself was refused (${status})`);
      }),
      params(250),
    );
  });
});

// ---------------------------------------------------------------------------------------------
// The verifiers themselves, with random headers: they never throw.

describe('verify() never throws', () => {
  const SNS_TOPIC = 'arn:aws:sns:us-east-1:123456789012:orders';
  const fetchText = fc.func(
    fc.oneof(fc.constant('not a certificate'), fc.json(), fc.constant('{"keys":[]}')),
  );
  const CONFIGS: { config: SchemeConfigInput; secrets: string[]; headers: string[] }[] = [
    {
      config: { scheme: 'standard-webhooks' },
      secrets: [`whsec_${SW_KEY.toString('base64')}`],
      headers: [
        'webhook-id',
        'webhook-timestamp',
        'webhook-signature',
        'svix-id',
        'svix-timestamp',
        'svix-signature',
      ],
    },
    { config: { scheme: 'stripe' }, secrets: ['s1', 's2'], headers: ['stripe-signature'] },
    { config: { scheme: 'github' }, secrets: ['s1'], headers: ['x-hub-signature-256', 'x-github-delivery'] },
    {
      config: { scheme: 'slack' },
      secrets: ['s1'],
      headers: ['x-slack-signature', 'x-slack-request-timestamp'],
    },
    {
      config: { scheme: 'slack', deliveryIdHeader: 'x-id' },
      secrets: ['s1'],
      headers: ['x-slack-signature', 'x-slack-request-timestamp', 'x-id'],
    },
    {
      config: { scheme: 'shopify' },
      secrets: ['s1'],
      headers: ['x-shopify-hmac-sha256', 'x-shopify-webhook-id'],
    },
    ...(['sha256', 'sha512'] as const).flatMap((algorithm) =>
      (['hex', 'base64'] as const).map((encoding) => ({
        config: {
          scheme: 'hmac' as const,
          header: 'x-sig',
          algorithm,
          encoding,
          prefix: 'p=',
          timestampHeader: 'x-ts',
          deliveryIdHeader: 'x-id',
        },
        secrets: ['s1'],
        headers: ['x-sig', 'x-ts', 'x-id'],
      })),
    ),
    {
      config: {
        scheme: 'gcp-pubsub',
        audience: 'https://herald.example/ingest/x',
        serviceAccountEmail: 'a@b.c',
      },
      secrets: [],
      headers: ['authorization'],
    },
    {
      config: { scheme: 'aws-sns', topicArns: [SNS_TOPIC] },
      secrets: [],
      headers: ['x-amz-sns-message-type'],
    },
  ];

  const stringValue = fc.oneof(
    fc.constant(''),
    fc.string({ maxLength: 100 }),
    unicode(60),
    headerValue.map((v) => (Buffer.isBuffer(v) ? v.toString('latin1') : v)),
    fc
      .tuple(
        fc.constantFrom('Bearer ', 'bearer  '),
        fc.stringMatching(/^[A-Za-z0-9_-]{0,40}\.[A-Za-z0-9_-]{0,60}\.[A-Za-z0-9_-]{0,40}$/),
      )
      .map(([a, b]) => a + b),
  );
  const snsBody = fc
    .record(
      {
        Type: fc.constantFrom('Notification', 'SubscriptionConfirmation', 'UnsubscribeConfirmation', 'x'),
        MessageId: fc.string(),
        Message: fc.string(),
        Timestamp: fc.string(),
        TopicArn: fc.oneof(fc.constant(SNS_TOPIC), fc.string()),
        SignatureVersion: fc.constantFrom('1', '2', '3', 1),
        Signature: fc.oneof(fc.base64String(), fc.string()),
        SigningCertURL: fc.oneof(
          fc.constantFrom(
            'https://sns.us-east-1.amazonaws.com/SimpleNotificationService-01d088a6f77103d0.pem',
            'https://sns.us-east-1.amazonaws.com/cert.pem',
            'http://sns.us-east-1.amazonaws.com/c.pem',
          ),
          fc.webUrl(),
        ),
        SubscribeURL: fc.webUrl(),
        Token: fc.string(),
      },
      { requiredKeys: [] },
    )
    .map((o) => Buffer.from(JSON.stringify(o)));

  for (const { config, secrets, headers } of CONFIGS) {
    test(`${config.scheme} ${JSON.stringify(config).slice(0, 60)}`, async () => {
      await fc.assert(
        fc.asyncProperty(
          fc.dictionary(
            fc.oneof(fc.constantFrom(...headers), fc.stringMatching(/^[a-z-]{1,12}$/)),
            fc.option(stringValue, { nil: undefined }),
          ),
          fc.oneof(bodyArb, snsBody),
          fetchText,
          fc.boolean(),
          async (hdrs, body, answer, failFetch) => {
            const verifier = createVerifier(config, secrets, {
              fetchText: async (url) => {
                if (failFetch) throw new Error('unreachable');
                return answer(url);
              },
            });
            let verdict: Awaited<ReturnType<typeof verifier.verify>>;
            try {
              verdict = await verifier.verify({ method: 'POST', headers: hdrs, rawBody: body }, new Date());
            } catch (error) {
              assert.fail(`verify threw ${(error as Error).stack}`);
            }
            if (verdict.ok) assert.match(verdict.deliveryId, /^[\x21-\x7e]{1,255}$/);
            else assert.ok([400, 401, 503].includes(verdict.status), JSON.stringify(verdict));
          },
        ),
        params(150),
      );
    });
  }
});

// ---------------------------------------------------------------------------------------------
// Business-key templates, rendered on whatever a verified request carries.

describe('business keys', () => {
  const name = fc.stringMatching(/^[a-z0-9-]{1,12}$/);
  type Part = { literal: string } | { field: 'delivery_id' } | { header: string } | { body: string[] };
  const part: fc.Arbitrary<Part> = fc.oneof(
    fc
      .string({ minLength: 1, maxLength: 12 })
      .filter((l) => !/[{}]/.test(l))
      .map((literal) => ({ literal })),
    fc.constant({ field: 'delivery_id' as const }),
    name.map((header) => ({ header })),
    fc
      .array(fc.stringMatching(/^[A-Za-z0-9_-]{1,8}$/), { minLength: 1, maxLength: 3 })
      .map((body) => ({ body })),
  );
  const headerValue = fc.oneof(fc.string({ maxLength: 40 }), fc.constant(''));

  test('a template renders its parts, and a missing header, an empty one or a key over 512 characters makes it null', () => {
    fc.assert(
      fc.property(
        fc
          .array(part, { minLength: 1, maxLength: 5 })
          .filter((parts) => parts.some((p) => !('literal' in p))),
        fc.constantFrom('', ' ', '  '),
        fc.stringMatching(/^[\x21-\x7e]{1,255}$/),
        fc.dictionary(name, headerValue, { maxKeys: 4 }),
        fc.jsonValue({ maxDepth: 4 }),
        (parts, pad, deliveryId, headers, payload) => {
          const template = parts
            .map((p) =>
              'literal' in p
                ? p.literal
                : 'field' in p
                  ? `{{${pad}delivery_id${pad}}}`
                  : 'header' in p
                    ? `{{${pad}header.${p.header}${pad}}}`
                    : `{{${pad}body.${p.body.join('.')}${pad}}}`,
            )
            .join('');
          const { key } = compileBusinessKey(template).render({
            deliveryId,
            headers,
            payload,
            ...bodyOf(JSON.stringify(payload)),
          });
          const headerOf = (h: string) => (Object.hasOwn(headers, h) ? headers[h] : undefined);
          if (parts.some((p) => 'header' in p && !headerOf(p.header))) {
            assert.equal(key, null, `${template} with headers ${JSON.stringify(headers)}`);
          } else if (
            !parts.some((p) => 'body' in p) &&
            // With two fields or more, a value holding a literal's character or `%` is encoded
            // (the test below): the rest render as they are.
            (parts.filter((p) => !('literal' in p)).length < 2 ||
              (!parts.some((p) => 'header' in p && separatorIn(headerOf(p.header)!, parts)) &&
                !(parts.some((p) => 'field' in p) && separatorIn(deliveryId, parts))))
          ) {
            const expected = parts
              .map((p) =>
                'literal' in p
                  ? p.literal
                  : 'field' in p
                    ? deliveryId
                    : headerOf((p as { header: string }).header),
              )
              .join('');
            assert.equal(key, expected.length <= 512 ? expected : null, template);
          } else if (key !== null) {
            assert.ok(key.length >= 1 && key.length <= 512, `${key.length} characters`);
          }
        },
      ),
      params(2000),
    );
  });

  test('any text compiles or is refused as a template, and rendering never throws', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.string({ maxLength: 40 }),
          fc.stringMatching(
            /^(\{\{ ?(delivery_id|header\.[a-z-]{0,6}|body(\.[a-z_]{0,4}){0,3}|[a-z.]{0,8}) ?\}\}|[{}a-z. ]){1,6}$/,
          ),
        ),
        fc.jsonValue({ maxDepth: 3 }),
        fc.dictionary(fc.string({ maxLength: 8 }), fc.string({ maxLength: 8 })),
        (template, payload, headers) => {
          let compiled: ReturnType<typeof compileBusinessKey>;
          try {
            compiled = compileBusinessKey(template);
          } catch (error) {
            assert.ok(error instanceof BusinessKeyTemplateError, `compile threw ${(error as Error).stack}`);
            return;
          }
          const { key } = compiled.render({
            deliveryId: 'd1',
            headers,
            payload,
            ...bodyOf(JSON.stringify(payload)),
          });
          assert.ok(key === null || (typeof key === 'string' && key.length >= 1 && key.length <= 512));
        },
      ),
      params(2000),
    );
  });
});

// Found by the properties above, and fixed; kept as regression tests.
describe('found by fuzzing, and fixed', () => {
  test('a source name with U+0000 is refused with a 4xx, not a 503', async () => {
    for (const path of ['/ingest/%00', '/ingest/fz-github%00']) {
      await sendAndCheck({ method: 'POST', path, headers: [], body: Buffer.from('{}') });
    }
  });

  test('a business key with U+0000 is refused with a 4xx, not a 503', async () => {
    const source = SOURCES.find((s) => s.uid === 'fz-hmac-b64')!;
    const id = nextId();
    const body = Buffer.from(JSON.stringify({ id, ticket: 'a\u0000b' }));
    await sendAndCheck({
      method: 'POST',
      path: `/ingest/${source.uid}`,
      headers: [
        ['content-type', 'application/json'],
        ...source.sign(body, id, Math.floor(Date.now() / 1000)).headers,
      ],
      body,
    });
  });

  test('a business key naming an absent header is unusable, whatever the header is called', () => {
    const rendered = compileBusinessKey('{{header.constructor}}').render({
      deliveryId: 'd1',
      headers: {},
      payload: {},
      ...bodyOf('{}'),
    });
    assert.deepEqual(rendered, {
      key: null,
      why: '{{header.constructor}} is missing, empty, or not a string, number or boolean',
    });
  });
});

// Found in review, and fixed.
/** Whether `value` holds `%` or a character of the template's literals between two fields. */
function separatorIn(value: string, parts: readonly ({ literal: string } | object)[]): boolean {
  const fieldAt = parts.flatMap((p, i) => ('literal' in p ? [] : [i]));
  const between = parts.filter(
    (p, i): p is { literal: string } => 'literal' in p && i > fieldAt[0]! && i < fieldAt.at(-1)!,
  );
  const literals = between.map((p) => p.literal).join('');
  return [...value].some((c) => c === '%' || literals.includes(c));
}

describe('business keys with two fields or more', () => {
  const render = (template: string, payload: unknown) =>
    compileBusinessKey(template).render({
      deliveryId: 'd1',
      headers: {},
      payload,
      ...bodyOf(JSON.stringify(payload)),
    }).key;

  test('two events whose values split the same text apart render two keys: a value’s separators are encoded', () => {
    const template = '{{body.a}}:{{body.b}}';
    assert.equal(render(template, { a: 'x:y', b: 'z' }), 'x%3Ay:z');
    assert.equal(render(template, { a: 'x', b: 'y:z' }), 'x:y%3Az');
    // And `%` itself, so that an encoded value never reads like one sent as it is.
    assert.equal(render(template, { a: 'x%3Ay', b: 'z' }), 'x%253Ay:z');
    // Letters and other characters that URLs keep as they are, when a literal holds them.
    assert.equal(render('{{body.a}}-v{{body.b}}', { a: 'a-v1', b: '2' }), 'a%2D%761-v2');
    assert.equal(render('{{body.a}}✓{{body.b}}', { a: 'ok✓', b: 'é' }), 'ok%E2%9C%93✓é');
  });

  test('a leading or trailing literal is fixed text: the characters of values it holds stay as they are', () => {
    const template = 'gh:{{body.id}}:{{body.event}}.v1';
    assert.equal(render(template, { id: '12', event: 'push' }), 'gh:12:push.v1');
    assert.equal(render(template, { id: 'a:b', event: 'v1.x' }), 'gh:a%3Ab:v1.x.v1');
  });

  test('a key reads back to the one tuple of values it was rendered from, whatever the literals', () => {
    // Values may hold `%`; literals do not here (one reading `%` would read into the escapes).
    const text = (minLength: number, units = ['a', 'g', ':', '-', '3', 'A']) =>
      fc.string({ unit: fc.constantFrom(...units), minLength, maxLength: 4 });
    const value = text(1, ['a', 'g', ':', '-', '%', '3', 'A']);
    fc.assert(
      fc.property(
        fc
          .integer({ min: 2, max: 3 })
          .chain((fields) =>
            fc.tuple(
              fc.array(text(1), { minLength: fields - 1, maxLength: fields - 1 }),
              text(0),
              text(0),
              fc.array(value, { minLength: fields, maxLength: fields }),
            ),
          ),
        ([between, leading, trailing, values]) => {
          // A literal between each two fields, as assertFieldsSeparated requires.
          const template =
            leading + values.map((_, i) => `{{body.f${i}}}${between[i] ?? ''}`).join('') + trailing;
          const key = render(template, Object.fromEntries(values.map((v, i) => [`f${i}`, v])));
          assert.ok(key, template);
          // Read back: the fixed text off both ends, then each value up to where the next
          // literal begins outside an escape (a value holds no character of it as it is).
          let rest = key.slice(leading.length, key.length - trailing.length);
          const read = between.map((literal) => {
            let end = 0;
            while (end < rest.length && !rest.startsWith(literal, end)) end += rest[end] === '%' ? 3 : 1;
            const value = rest.slice(0, end);
            rest = rest.slice(end + literal.length);
            return decodeURIComponent(value);
          });
          read.push(decodeURIComponent(rest));
          assert.deepEqual(read, values, `${template} rendered ${key}`);
        },
      ),
      params(3000),
    );
  });

  test('a template of one field renders its value as it is, as it always has', () => {
    assert.equal(render('gh:{{body.id}}', { id: 'a:b%c' }), 'gh:a:b%c');
    assert.equal(render('{{body.id}}', { id: 'x:y%' }), 'x:y%');
  });
});

describe('business keys read from the body as the provider wrote it', () => {
  const render = (template: string, body: string) =>
    compileBusinessKey(template).render({
      deliveryId: 'd1',
      headers: {},
      payload: JSON.parse(body),
      ...bodyOf(body),
    }).key;

  test('a number is its text: ids past 2^53 stay apart, and so do 1 and 1.0', () => {
    assert.equal(render('{{body.id}}', '{"id":1234567890123456789}'), '1234567890123456789');
    assert.equal(render('{{body.id}}', '{"id":1234567890123456790}'), '1234567890123456790');
    assert.equal(render('{{body.a.n}}/{{body.b}}', '{"a":{"n":1.0},"b":-2e3}'), '1.0/-2e3');
    assert.equal(render('{{body.id}}', '{"id":1}'), '1');
  });

  test('a key with a lone surrogate is unusable: stored, it would read as U+FFFD like another', () => {
    assert.equal(render('{{body.id}}', '{"id":"a\\ud800"}'), null);
    assert.equal(render('{{body.id}}', '{"id":"a\\ud83d\\ude00"}'), 'a\u{1F600}');
  });
});

test('the server still answers after all of it', async () => {
  const health = await fetch(`${t.url}/api/v1/health`);
  assert.equal(health.status, 204);
  const listed = await t.call('GET', '/api/v1/source');
  assert.equal(listed.status, 200);
  assert.equal(listed.body.data.length, SOURCES.length);
});
