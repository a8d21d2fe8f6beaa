// Amazon SNS verification. A throwaway CA and RSA signing certificates are made with the openssl
// CLI in a temporary directory; messages are signed here with node:crypto over the string to sign
// as AWS documents it; fetchText is a stub that serves the PEMs and records every URL asked for.

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomUUID, sign } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { HeraldError } from '../src/errors.ts';
import {
  createSnsCertificates,
  createVerifier,
  type InboundRequest,
  isSnsUrl,
  type SchemeConfigInput,
  type Verdict,
} from '../src/inbound/verifiers/index.ts';
import { testEnv } from './support/herald.ts';
import { withIngestor } from './support/inbound.ts';
import { runHerald } from './support/processes.ts';

const TOPIC = 'arn:aws:sns:us-east-1:123456789012:orders';
const CERT_URL =
  'https://sns.us-east-1.amazonaws.com/SimpleNotificationService-01d088a6f77103d0fe307c0069e40ed6.pem';
const NEXT_CERT_URL =
  'https://sns.us-east-1.amazonaws.com/SimpleNotificationService-9c6465fa7f48f5cacd23014631ec1136.pem';
// Set once the certificates exist: their validity starts at the second they were made.
let now: Date;

interface Pki {
  dir: string;
  key: string;
  cert: string;
  nextKey: string;
  nextCert: string;
  /** A key no served certificate belongs to. */
  strangerKey: string;
}

function makePki(): Pki {
  const dir = mkdtempSync(join(tmpdir(), 'herald-sns-'));
  const openssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  openssl(
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-keyout',
    'ca.key',
    '-out',
    'ca.pem',
    '-subj',
    '/CN=herald test SNS CA',
    '-days',
    '2',
  );
  const issue = (name: string) => {
    openssl(
      'req',
      '-new',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      `${name}.key`,
      '-out',
      `${name}.csr`,
      '-subj',
      '/CN=sns.amazonaws.com',
    );
    openssl(
      'x509',
      '-req',
      '-in',
      `${name}.csr`,
      '-CA',
      'ca.pem',
      '-CAkey',
      'ca.key',
      '-CAcreateserial',
      '-out',
      `${name}.pem`,
      '-days',
      '2',
    );
    return {
      key: readFileSync(join(dir, `${name}.key`), 'utf8'),
      cert: readFileSync(join(dir, `${name}.pem`), 'utf8'),
    };
  };
  const current = issue('signing');
  const next = issue('next');
  const stranger = issue('stranger');
  return {
    dir,
    key: current.key,
    cert: current.cert,
    nextKey: next.key,
    nextCert: next.cert,
    strangerKey: stranger.key,
  };
}

let pki: Pki;
const fetched: string[] = [];
let failFetches = false;

const SUBSCRIBE_URL_PREFIX = 'https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription';

async function fetchText(url: string): Promise<string> {
  fetched.push(url);
  if (failFetches) throw new Error('connection refused');
  if (url.startsWith(SUBSCRIBE_URL_PREFIX)) return '<ConfirmSubscriptionResponse/>';
  const pem = { [CERT_URL]: pki.cert, [NEXT_CERT_URL]: pki.nextCert }[url];
  if (pem === undefined) throw new Error('404');
  return pem;
}

before(() => {
  pki = makePki();
  now = new Date();
});

after(() => {
  rmSync(pki.dir, { recursive: true, force: true });
});

type SnsMessage = Record<string, unknown>;

// The keys AWS signs, in the order it documents, for each message type.
const SIGNED = {
  Notification: ['Message', 'MessageId', 'Subject', 'Timestamp', 'TopicArn', 'Type'],
  SubscriptionConfirmation: [
    'Message',
    'MessageId',
    'SubscribeURL',
    'Timestamp',
    'Token',
    'TopicArn',
    'Type',
  ],
  UnsubscribeConfirmation: ['Message', 'MessageId', 'SubscribeURL', 'Timestamp', 'Token', 'TopicArn', 'Type'],
} as Record<string, string[]>;

/** "Key\nValue\n" for each signed key the message has (Subject is optional on a Notification). */
function stringToSign(message: SnsMessage): string {
  return SIGNED[message['Type'] as string]!.filter((key) => message[key] !== undefined)
    .map((key) => `${key}\n${message[key]}\n`)
    .join('');
}

function signed(message: SnsMessage, key = pki.key): SnsMessage {
  const digest = message['SignatureVersion'] === '1' ? 'sha1' : 'sha256';
  return { ...message, Signature: sign(digest, Buffer.from(stringToSign(message)), key).toString('base64') };
}

function notification(fields: SnsMessage = {}): SnsMessage {
  const message: SnsMessage = {
    Type: 'Notification',
    MessageId: randomUUID(),
    TopicArn: TOPIC,
    Subject: 'Order placed',
    Message: '{"order":42,"note":"line one\\nline two"}',
    Timestamp: now.toISOString(),
    SignatureVersion: '2',
    SigningCertURL: CERT_URL,
    UnsubscribeURL: `https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe&SubscriptionArn=${TOPIC}:1`,
    ...fields,
  };
  for (const key of Object.keys(message)) if (message[key] === undefined) delete message[key];
  return message;
}

function confirmation(type: 'SubscriptionConfirmation' | 'UnsubscribeConfirmation'): SnsMessage {
  return {
    Type: type,
    MessageId: randomUUID(),
    Token: '2336412f37fb687f5d51e6e2425f004aed6b5b5c64e7a9e2ff5e4ac5c4f1ea6b',
    TopicArn: TOPIC,
    Message: `You have chosen to subscribe to the topic ${TOPIC}.`,
    SubscribeURL: `${SUBSCRIBE_URL_PREFIX}&TopicArn=${TOPIC}&Token=2336412f`,
    Timestamp: now.toISOString(),
    SignatureVersion: '1',
    SigningCertURL: CERT_URL,
  };
}

function post(body: string | SnsMessage, headers: Record<string, string> = {}): InboundRequest {
  const text = typeof body === 'string' ? body : JSON.stringify(body);
  const type = typeof body === 'string' ? undefined : (body['Type'] as string | undefined);
  return {
    method: 'POST',
    headers: {
      'content-type': 'text/plain; charset=UTF-8',
      ...(type === undefined ? {} : { 'x-amz-sns-message-type': type }),
      ...headers,
    },
    rawBody: Buffer.from(text),
  };
}

type SnsSettings = Omit<Extract<SchemeConfigInput, { scheme: 'aws-sns' }>, 'scheme'>;

/** A verifier for the source that takes TOPIC, unless told otherwise. */
function snsVerifier(settings: Partial<SnsSettings> = {}) {
  return createVerifier({ scheme: 'aws-sns', topicArns: [TOPIC], ...settings }, [], { fetchText });
}

function assertRejected(verdict: Verdict, status: number, code?: string): void {
  assert.equal(verdict.ok, false, `expected a rejection, got ${JSON.stringify(verdict)}`);
  if (verdict.ok) return;
  assert.equal(verdict.status, status, verdict.reason);
  if (code !== undefined) assert.equal(verdict.code, code, verdict.reason);
}

describe('aws-sns', () => {
  test('Notifications signed with SignatureVersion 1 (SHA1) and 2 (SHA256), with or without Subject, are accepted', async () => {
    const verifier = snsVerifier();
    for (const version of ['1', '2']) {
      for (const subject of ['Order placed', undefined]) {
        const message = signed(notification({ SignatureVersion: version, Subject: subject }));
        const verdict = await verifier.verify(post(message), now);
        assert.deepEqual(
          verdict,
          { ok: true, deliveryId: message['MessageId'], payload: message },
          `v${version}`,
        );
      }
    }
  });

  test('Subscription and unsubscribe confirmations are returned verified; SubscribeURL is not visited', async () => {
    const verifier = snsVerifier({ confirmSubscriptions: true });
    for (const type of ['SubscriptionConfirmation', 'UnsubscribeConfirmation'] as const) {
      const message = signed(confirmation(type));
      fetched.length = 0;
      const verdict = await verifier.verify(post(message), now);
      assert.deepEqual(verdict, { ok: true, deliveryId: message['MessageId'], payload: message });
      assert.ok(
        fetched.every((url) => url === CERT_URL),
        fetched.join(', '),
      );
      assert.ok(isSnsUrl(message['SubscribeURL'] as string));
    }
  });

  test('a changed byte in any signed field is a 401', async () => {
    const verifier = snsVerifier();
    const message = signed(notification());
    const text = JSON.stringify(message);
    for (const [from, to] of [
      [':42,', ':43,'],
      ['Order placed', 'Order placeD'],
      [':orders"', ':orderz"'],
      [
        message['MessageId'] as string,
        (message['MessageId'] as string).replace(/^./, (c) => (c === 'a' ? 'b' : 'a')),
      ],
    ] as const) {
      const changed = text.replace(from, to);
      assert.notEqual(changed, text);
      assertRejected(await verifier.verify(post(changed), now), 401, 'bad_signature');
    }
    // A changed byte that breaks the JSON itself.
    assertRejected(await verifier.verify(post(text.replace('{', '[')), now), 401, 'malformed');
  });

  test('a changed signature is a 401', async () => {
    const message = signed(notification());
    const signature = message['Signature'] as string;
    const altered = { ...message, Signature: (signature[0] === 'A' ? 'B' : 'A') + signature.slice(1) };
    assertRejected(await snsVerifier().verify(post(altered), now), 401, 'bad_signature');
  });

  test('a message signed by a key other than the certificate’s is a 401', async () => {
    const forged = signed(notification(), pki.strangerKey);
    assertRejected(await snsVerifier().verify(post(forged), now), 401, 'bad_signature');
  });

  test('a missing signature is a 401', async () => {
    const { Signature: _dropped, ...unsigned } = signed(notification());
    assertRejected(await snsVerifier().verify(post(unsigned), now), 401, 'missing_signature');
  });

  test('a genuine message without MessageId is a 400', async () => {
    const message = signed(notification({ MessageId: undefined }));
    assertRejected(await snsVerifier().verify(post(message), now), 400, 'missing_delivery_id');
  });

  test('malformed messages and encodings give a 401 verdict, never an exception', async () => {
    const verifier = snsVerifier();
    const good = signed(notification());
    const bodies: (string | SnsMessage)[] = [
      'not json',
      '[]',
      'null',
      '"Notification"',
      Buffer.from([0xff, 0xfe]).toString('latin1'),
      { ...good, Signature: 'not base64!' },
      { ...good, Signature: '' },
      { ...good, Signature: 'QUJD' },
      { ...good, Signature: (good['Signature'] as string).slice(0, -4) },
      { ...good, Signature: 42 },
      { ...good, SignatureVersion: '3' },
      { ...good, SignatureVersion: 2 },
      { ...good, Type: 'Weird' },
      { ...good, Type: undefined },
      { ...good, Message: { nested: true } },
      { ...good, SigningCertURL: 42 },
      { ...good, SigningCertURL: 'not a url' },
      { ...good, SigningCertURL: undefined },
    ];
    for (const body of bodies) {
      const verdict = await verifier.verify(post(body), now);
      assert.equal(verdict.ok, false, JSON.stringify(body).slice(0, 80));
      if (!verdict.ok) assert.equal(verdict.status, 401, verdict.reason);
    }
  });

  test('a SigningCertURL that is not an SNS signing certificate is refused without any fetch', async () => {
    const verifier = snsVerifier();
    fetched.length = 0;
    for (const certUrl of [
      'https://evil.example.com/SimpleNotificationService.pem',
      'http://sns.us-east-1.amazonaws.com/SimpleNotificationService.pem',
      'https://sns.us-east-1.amazonaws.com.evil.example/cert.pem',
      'https://sns.us-east-1.amazonaws.com:8443/cert.pem',
      'https://user@sns.us-east-1.amazonaws.com/cert.pem',
      'https://s3.us-east-1.amazonaws.com/cert.pem',
      'https://sns.amazonaws.com/cert.pem',
      // S3's virtual hosts for a bucket named "sns": anyone owning it could serve a certificate.
      'https://sns.s3.amazonaws.com/SimpleNotificationService-0123abcd.pem',
      'https://sns.s3-accelerate.amazonaws.com/SimpleNotificationService-0123abcd.pem',
      'https://sns.s3-us-west-2.amazonaws.com/SimpleNotificationService-0123abcd.pem',
      'https://sns.s3.us-west-2.amazonaws.com/SimpleNotificationService-0123abcd.pem',
      'https://127.0.0.1/cert.pem',
      'file:///etc/passwd',
      // On an SNS host, but not where SNS keeps its signing certificates.
      'https://sns.us-east-1.amazonaws.com/cert.pem',
      'https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription&Token=x',
      `${CERT_URL}?x=1`,
      'https://sns.us-east-1.amazonaws.com/SimpleNotificationService-../x.pem',
      // A signing certificate, but of another region than the topic's.
      'https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-01d088a6f77103d0fe307c0069e40ed6.pem',
    ]) {
      const message = signed(notification({ SigningCertURL: certUrl }));
      assertRejected(await verifier.verify(post(message), now), 401, 'bad_signature');
    }
    assert.deepEqual(fetched, []);
  });

  test('isSnsUrl accepts the SNS hosts of every partition', () => {
    for (const url of [
      CERT_URL,
      'https://sns.cn-north-1.amazonaws.com.cn/x.pem',
      'https://SNS.EU-WEST-1.AMAZONAWS.COM/x.pem',
      'https://sns.us-gov-west-1.amazonaws.com/x.pem',
      'https://sns.ap-southeast-5.amazonaws.com/x.pem',
    ]) {
      assert.ok(isSnsUrl(url), url);
    }
  });

  test('certificates are fetched once per URL and cached', async () => {
    const verifier = snsVerifier();
    fetched.length = 0;
    for (let i = 0; i < 3; i += 1) {
      assert.equal((await verifier.verify(post(signed(notification())), now)).ok, true);
    }
    assert.deepEqual(fetched, [CERT_URL]);
  });

  test('rotation: messages signed under either of two certificates verify', async () => {
    const verifier = snsVerifier();
    const current = signed(notification());
    const next = signed(notification({ SigningCertURL: NEXT_CERT_URL }), pki.nextKey);
    assert.equal((await verifier.verify(post(current), now)).ok, true);
    assert.equal((await verifier.verify(post(next), now)).ok, true);
    // And each certificate only vouches for its own key.
    const crossed = signed(notification({ SigningCertURL: NEXT_CERT_URL }), pki.key);
    assertRejected(await verifier.verify(post(crossed), now), 401, 'bad_signature');
  });

  test('a certificate fetch that fails is a 503 and is tried again next time', async () => {
    const verifier = snsVerifier();
    const message = signed(notification());
    fetched.length = 0;
    failFetches = true;
    try {
      assertRejected(await verifier.verify(post(message), now), 503, 'verification_unavailable');
      assertRejected(await verifier.verify(post(message), now), 503, 'verification_unavailable');
    } finally {
      failFetches = false;
    }
    assert.equal((await verifier.verify(post(message), now)).ok, true);
    assert.equal(fetched.length, 3);
  });

  test('messages naming certificates that do not exist cost a budget of fetches, not one each', async () => {
    const verifier = snsVerifier();
    const genuine = signed(notification());
    assert.equal((await verifier.verify(post(genuine), now)).ok, true);
    fetched.length = 0;
    // Anyone who knows the topic can name certificate URLs on the topic's SNS host.
    const forged = (n: number) =>
      post({
        ...genuine,
        SigningCertURL: CERT_URL.replace(/[^/]+\.pem$/, `SimpleNotificationService-${n}.pem`),
      });
    for (let n = 0; n < 25; n++) {
      assertRejected(await verifier.verify(forged(n), now), 503, 'verification_unavailable');
    }
    assert.equal(fetched.length, 9, 'the budget of 10 a window, one spent on the genuine certificate');
    // The certificate in the cache still verifies; a later window has a budget again.
    assert.equal((await verifier.verify(post(genuine), now)).ok, true);
    const later = new Date(now.getTime() + 11 * 60 * 1000);
    assertRejected(await verifier.verify(forged(99), later), 503, 'verification_unavailable');
    assert.equal(fetched.length, 10);
  });

  test("certificates kept by the ingestor serve every verifier built with them: a rebuilt source's verifier fetches nothing again", async () => {
    const certificates = createSnsCertificates(fetchText);
    const build = () =>
      createVerifier({ scheme: 'aws-sns', topicArns: [TOPIC] }, [], {
        fetchText,
        snsCertificates: certificates,
      });
    fetched.length = 0;
    assert.equal((await build().verify(post(signed(notification())), now)).ok, true);
    assert.deepEqual(fetched, [CERT_URL]);
    // The source changed (a new verifier), or another source of the same region: no fetch.
    assert.equal((await build().verify(post(signed(notification())), now)).ok, true);
    assert.deepEqual(fetched, [CERT_URL]);
    // Forged certificate URLs spend the region's budget once, whichever verifier they reach, and a
    // certificate kept still verifies after it is spent.
    const forged = (n: number) =>
      post({
        ...signed(notification()),
        SigningCertURL: CERT_URL.replace(/[^/]+\.pem$/, `SimpleNotificationService-f${n}.pem`),
      });
    for (let n = 0; n < 20; n++) {
      assertRejected(await build().verify(forged(n), now), 503, 'verification_unavailable');
    }
    assert.equal(fetched.length, 10, 'the budget of 10 a window, one spent on the genuine certificate');
    assert.equal((await build().verify(post(signed(notification())), now)).ok, true);
    assert.equal(fetched.length, 10);
  });

  test('a certificate outside its validity period is refused', async () => {
    const message = signed(notification());
    const inTenYears = new Date(now.getTime() + 10 * 365 * 24 * 3600 * 1000);
    assertRejected(await snsVerifier().verify(post(message), inTenYears), 401, 'bad_signature');
  });

  test('topicArns: a genuine message from an unlisted topic is refused, before any fetch', async () => {
    const message = signed(notification());
    assert.equal((await snsVerifier({ topicArns: [TOPIC] }).verify(post(message), now)).ok, true);
    // AWS signs every topic's messages: another account's topic must not reach the source.
    const other = snsVerifier({ topicArns: ['arn:aws:sns:us-east-1:123456789012:other'] });
    fetched.length = 0;
    assertRejected(await other.verify(post(message), now), 401, 'bad_signature');
    const { TopicArn: _dropped, ...noTopic } = notification();
    assertRejected(await snsVerifier({ topicArns: [TOPIC] }).verify(post(signed(noTopic)), now), 401);
    assert.deepEqual(fetched, [], 'nothing fetched for a topic the source does not take');
  });

  test('a source without topicArns cannot be configured', () => {
    assert.throws(() => createVerifier({ scheme: 'aws-sns' } as SchemeConfigInput, [], { fetchText }));
    assert.throws(() => createVerifier({ scheme: 'aws-sns', topicArns: [] }, [], { fetchText }));
  });

  test('an x-amz-sns-message-type header that contradicts Type is malformed', async () => {
    const message = signed(notification());
    const verdict = await snsVerifier().verify(
      post(message, { 'x-amz-sns-message-type': 'SubscriptionConfirmation' }),
      now,
    );
    assertRejected(verdict, 401, 'malformed');
  });

  test("a message signed more than 2 hours ago, or over 5 minutes ahead, is refused as stale: SNS's retries end within an hour", async () => {
    // A genuine notification captured and posted again after history retention pruned its claim
    // would otherwise be relayed again as a new message.
    const verifier = snsVerifier();
    const at = (offsetSeconds: number) =>
      signed(notification({ Timestamp: new Date(now.getTime() + offsetSeconds * 1000).toISOString() }));
    for (const offset of [-2 * 3600, -3600, 299]) {
      const verdict = await verifier.verify(post(at(offset)), now);
      assert.equal(verdict.ok, true, `${offset} s: ${JSON.stringify(verdict)}`);
    }
    for (const offset of [-2 * 3600 - 1, -6 * 3600, 301]) {
      assertRejected(await verifier.verify(post(at(offset)), now), 401, 'stale_timestamp');
    }
    assertRejected(
      await verifier.verify(post(signed(notification({ Timestamp: undefined }))), now),
      401,
      'stale_timestamp',
    );
    // The window is checked after the signature: a forged old message is a bad signature.
    assertRejected(
      await verifier.verify(post({ ...at(-6 * 3600), Message: 'forged' }), now),
      401,
      'bad_signature',
    );
  });

  test('random garbage in the signed fields gives a verdict, never an exception', async () => {
    const verifier = snsVerifier();
    const good = signed(notification());
    const alphabet = 'AZaz09+/=.:-_ \n{}[]"\\\u00e9\u2603';
    const garbage = () =>
      Array.from(
        { length: Math.floor(Math.random() * 80) },
        () => alphabet[Math.floor(Math.random() * alphabet.length)],
      ).join('');
    for (let round = 0; round < 200; round += 1) {
      const field = ['Signature', 'SignatureVersion', 'Type', 'SigningCertURL', 'Message', 'MessageId'][
        round % 6
      ]!;
      const verdict = await verifier.verify(post({ ...good, [field]: garbage() }), now);
      assert.equal(verdict.ok, false);
    }
  });
});

describe('aws-sns through the ingestor', () => {
  test('a Notification is relayed; subscription and unsubscribe confirmations relay nothing', () =>
    withIngestor('sns_ingest', fetchText, async ({ database, ingestor, addSource }) => {
      await addSource('orders-topic', 'aws-sns', { topicArns: [TOPIC] });
      const stored = async () =>
        (
          await database.db.query<{ intake: number; message: number }>(
            'select (select count(*)::int from intake) as intake, (select count(*)::int from message) as message',
          )
        ).rows[0]!;

      const relayed = await ingestor.ingest('orders-topic', post(signed(notification())));
      assert.equal(relayed.kind, 'accepted');
      assert.deepEqual(await stored(), { intake: 1, message: 1 });

      // A genuine notification with a second Message put before the signed one: a parser that
      // keeps the first would read "evil". The relayed envelope holds Message once, the verified one.
      const genuine = signed(notification());
      const doubled = `{"Message":"evil",${JSON.stringify(genuine).slice(1)}`;
      const answer = await ingestor.ingest(
        'orders-topic',
        post(doubled, { 'x-amz-sns-message-type': 'Notification' }),
      );
      assert.equal(answer.kind, 'accepted');
      const payload = await database.db.query<{ payload: string }>(
        'select payload::text from message where id = $1',
        [(answer as { messageId: string }).messageId],
      );
      const text = payload.rows[0]!.payload;
      assert.equal(text.match(/"Message"/g)?.length, 1, text);
      assert.equal(JSON.parse(text).Message, genuine['Message']);
      await database.db.query('delete from intake where delivery_id = $1', [genuine['MessageId']]);
      await database.db.query('delete from message where id = $1', [
        (answer as { messageId: string }).messageId,
      ]);

      // Neither is an event of the topic: SNS telling herald about its subscription.
      for (const type of ['SubscriptionConfirmation', 'UnsubscribeConfirmation'] as const) {
        const answer = await ingestor.ingest('orders-topic', post(signed(confirmation(type))));
        assert.deepEqual(answer, { kind: 'subscription', confirmed: false }, type);
      }
      assert.deepEqual(await stored(), { intake: 1, message: 1 }, 'nothing relayed for a confirmation');

      // Not confirmed by herald (confirmSubscriptions off): kept, sealed, for the operator, whose
      // `aws sns confirm-subscription` needs its token — SNS does not send it again once answered.
      const sealed = await database.db.query<{ sealed: Uint8Array }>(
        'select sealed from source_subscription_token',
      );
      const token = String(confirmation('SubscriptionConfirmation')['Token']);
      assert.equal(sealed.rows.length, 1);
      assert.ok(!Buffer.from(sealed.rows[0]!.sealed).includes(token), 'sealed, not in the clear');
      const cli = await runHerald(['sources', 'confirmations', 'orders-topic'], testEnv(database.url));
      assert.equal(cli.code, 0, cli.stderr);
      assert.match(
        cli.stdout,
        new RegExp(
          `^aws sns confirm-subscription --region us-east-1 --topic-arn ${TOPIC} --token ${token} --authenticate-on-unsubscribe true$`,
          'm',
        ),
      );
      const none = await runHerald(['sources', 'confirmations', 'confirming-topic'], testEnv(database.url));
      assert.notEqual(none.code, 0, 'a source that does not exist (yet) is named as not found');
      assert.match(none.stderr, /source/);

      // A source that confirms its subscriptions visits the SubscribeURL; when it does not answer,
      // a 503 that says so asks SNS to send the confirmation again (not a store failure).
      await addSource('confirming-topic', 'aws-sns', { topicArns: [TOPIC], confirmSubscriptions: true });
      const subscribing = signed(confirmation('SubscriptionConfirmation'));
      assert.deepEqual(await ingestor.ingest('confirming-topic', post(subscribing)), {
        kind: 'subscription',
        confirmed: true,
      });
      assert.ok(fetched.includes(subscribing['SubscribeURL'] as string), 'the SubscribeURL was visited');
      failFetches = true;
      try {
        await assert.rejects(ingestor.ingest('confirming-topic', post(subscribing)), (error: HeraldError) => {
          assert.equal(error.code, 'verification_unavailable');
          assert.match(error.message, /could not be confirmed/);
          return true;
        });
      } finally {
        failFetches = false;
      }
      assert.deepEqual(await stored(), { intake: 1, message: 1 });
    }));

  test('two SNS sources of one ingestor fetch a certificate once: it is kept for every source', () =>
    withIngestor('sns_ingest_shared', fetchText, async ({ ingestor, addSource }) => {
      for (const uid of ['first-topic', 'second-topic'])
        await addSource(uid, 'aws-sns', { topicArns: [TOPIC] });
      fetched.length = 0;
      for (const uid of ['first-topic', 'second-topic']) {
        assert.equal((await ingestor.ingest(uid, post(signed(notification())))).kind, 'accepted', uid);
      }
      assert.deepEqual(fetched, [CERT_URL]);
    }));
});
