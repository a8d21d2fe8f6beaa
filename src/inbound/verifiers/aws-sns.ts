// Amazon SNS HTTP(S) subscriptions
// (https://docs.aws.amazon.com/sns/latest/dg/sns-verify-signature-of-message.html). The body is
// a JSON document whose own fields are signed: SignatureVersion 1 is SHA1withRSA, 2 is
// SHA256withRSA, over "Key\nValue\n" for each signed key in the documented (alphabetical) order,
// skipping keys the message lacks (Subject is optional on a Notification). The public key comes
// from the X.509 certificate at SigningCertURL, which must be https on an SNS host, at SNS's
// certificate path: the trust in the certificate is the trust in the TLS connection to that host,
// so any other URL is refused before anything is fetched. A genuine message proves only that AWS
// sent it: the source lists the topics it takes (`topicArns`), and any other is refused, before
// anything is fetched too.
//
// This is the one scheme that parses JSON before verifying: the signed content lives inside the
// body. Nothing from it is trusted or returned until the signature checks out.
// The delivery id is MessageId. Valid Subscription and Unsubscribe confirmations are returned
// like any message; the caller decides what to do with them (visit SubscribeURL only after
// checking it with isSnsUrl).

import { verify as verifySignatureBytes, X509Certificate } from 'node:crypto';
import { z } from 'zod';
import { decodeBase64 } from './bytes.ts';
import { headerValue } from './headers.ts';
import { createRemoteCache, type RemoteCache } from './remote-cache.ts';
import { DEFAULT_TOLERANCE_SECONDS } from './timestamps.ts';
import type { FetchText, Verifier } from './types.ts';
import { accept, parseJsonBody, reject, unavailable } from './verdict.ts';

export const AwsSnsSettings = z.strictObject({
  scheme: z.literal('aws-sns'),
  /**
   * The topics this source takes messages from. Required: AWS's signature proves that AWS sent a
   * message, not whose topic it came from — anyone can subscribe herald to a topic of their own.
   */
  topicArns: z.array(z.string().min(1)).min(1),
  /** Whether the caller should visit SubscribeURL of a verified SubscriptionConfirmation. */
  confirmSubscriptions: z.boolean().default(false),
});
export type AwsSnsSettings = z.output<typeof AwsSnsSettings>;

const SIGNED_KEYS = {
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
} as const;
type MessageType = keyof typeof SIGNED_KEYS;

const DIGEST_OF_VERSION: Readonly<Record<string, string>> = { '1': 'sha1', '2': 'sha256' };

// sns.<region>.amazonaws.com(.cn), a region being like us-east-1, us-gov-west-1 or cn-north-1: a
// looser label would admit S3's virtual hosts for a bucket named "sns" (sns.s3.amazonaws.com,
// sns.s3-us-west-2.amazonaws.com), where anyone owning that bucket could serve a certificate.
const SNS_HOST = /^sns\.[a-z]{2}(-gov)?-[a-z]+-\d+\.amazonaws\.com(\.cn)?$/;

// Certificates are rotated rarely and each has its own URL, so a day is safe; the bound keeps
// a flood of distinct (still SNS-hosted) URLs from growing memory.
const CERT_TTL_MS = 24 * 60 * 60 * 1000;
const MAX_CACHED_CERTS = 32;
/**
 * Certificates of one region fetched, at most, in a window: SNS signs with one certificate per
 * region, for months, and each is cached a day. Anyone who knows a source's topic can send
 * messages naming certificate URLs that do not exist, one fetch each; past this budget they get a
 * 503 without a fetch, so a flood costs AWS and the shared fetcher (which JWKS refreshes use too)
 * a few requests a window, not one per request. A certificate cached already verifies whatever
 * the budget; a genuine message under one not yet fetched that meets a spent budget gets the 503
 * as well, and SNS delivers it again (for an hour at most): which is why the certificates are
 * kept by the ingestor, for every source and across a source's changes (SnsCertificates), so that
 * only a new process or a new certificate has one to fetch.
 */
const CERT_FETCHES_PER_WINDOW = 10;
const CERT_FETCH_WINDOW_MS = 10 * 60 * 1000;

/**
 * SNS signing certificates by URL, fetched once for every SNS source that uses them: they belong
 * to AWS's regions, not to a source. Kept by whoever builds the verifiers (the ingestor), so that
 * a verifier rebuilt — the source changed, a secret's overlap ended — still has them.
 */
export type SnsCertificates = Pick<RemoteCache<X509Certificate>, 'get'>;

export function createSnsCertificates(fetchText: FetchText): SnsCertificates {
  const fetchedAt = new Map<string, number[]>();
  return createRemoteCache<X509Certificate>({
    load: async (url, now) => {
      const region = regionOf(url);
      const times = fetchedAt.get(region) ?? [];
      fetchedAt.set(region, times);
      const windowStart = now.getTime() - CERT_FETCH_WINDOW_MS;
      while (times.length > 0 && times[0]! <= windowStart) times.shift();
      if (times.length >= CERT_FETCHES_PER_WINDOW)
        throw new Error("this region's budget of signing certificate fetches is spent; retry later");
      times.push(now.getTime());
      return new X509Certificate(await fetchText(url));
    },
    ttlMs: CERT_TTL_MS,
    maxEntries: MAX_CACHED_CERTS,
  });
}

/** The region of an SNS URL (isSnsUrl): `sns.<region>.amazonaws.com`. */
const regionOf = (url: string): string => new URL(url).hostname.split('.')[1]!;

/**
 * How old a message's signed `Timestamp` may be. SNS gives up on an HTTP(S) delivery within 3,600
 * s of retries (a hard limit of its delivery policies), so a message older than that plus an hour
 * is not SNS's: it is a genuine message captured and posted again. Its claim stops a replay only
 * as long as history retention keeps it (a day at least), so without this window a notification
 * held past that would be relayed again as a new message.
 */
const MAX_AGE_SECONDS = 2 * 3600;
/** How far ahead of herald's clock a `Timestamp` may be: the other schemes' skew. */
const MAX_AHEAD_SECONDS = DEFAULT_TOLERANCE_SECONDS;

/** https on an SNS host, default port, no credentials: for SigningCertURL and SubscribeURL alike. */
export function isSnsUrl(raw: string): boolean {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return false;
  }
  return (
    url.protocol === 'https:' &&
    url.port === '' &&
    url.username === '' &&
    url.password === '' &&
    SNS_HOST.test(url.hostname)
  );
}

/** Where SNS keeps its signing certificates: `/SimpleNotificationService-<hex>.pem`, no query. */
const SIGNING_CERT_PATH = /^\/SimpleNotificationService-[0-9a-f]+\.pem$/;

function isSigningCertUrl(raw: unknown): raw is string {
  if (typeof raw !== 'string' || !isSnsUrl(raw)) return false;
  const url = new URL(raw);
  return url.search === '' && url.hash === '' && SIGNING_CERT_PATH.test(url.pathname);
}

function isMessageType(value: unknown): value is MessageType {
  return typeof value === 'string' && Object.hasOwn(SIGNED_KEYS, value);
}

/** The documented string to sign, or null when a signed key holds something other than text. */
function stringToSign(message: Record<string, unknown>, type: MessageType): string | null {
  let text = '';
  for (const key of SIGNED_KEYS[type]) {
    const value = message[key];
    if (value === undefined) continue;
    if (typeof value !== 'string') return null;
    text += `${key}\n${value}\n`;
  }
  return text;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

export function createAwsSnsVerifier(settings: AwsSnsSettings, certificates: SnsCertificates): Verifier {
  return {
    async verify(request, now) {
      const message = parseJsonBody(request.rawBody);
      if (!isObject(message)) return reject('malformed', 'the body is not an SNS message (JSON object)');
      if (message['Signature'] === undefined)
        return reject('missing_signature', 'the message has no Signature');
      const { Type: type, SignatureVersion: version, SigningCertURL: certUrl } = message;
      if (!isMessageType(type)) return reject('malformed', 'Type is not an SNS message type');
      const typeHeader = headerValue(request, 'x-amz-sns-message-type');
      if (typeHeader !== undefined && typeHeader !== type) {
        return reject('malformed', 'x-amz-sns-message-type does not match Type');
      }
      const digest = typeof version === 'string' ? DIGEST_OF_VERSION[version] : undefined;
      if (digest === undefined) return reject('malformed', 'SignatureVersion must be "1" or "2"');
      const signature = typeof message['Signature'] === 'string' ? decodeBase64(message['Signature']) : null;
      if (signature === null) return reject('malformed', 'Signature is not base64');
      const signed = stringToSign(message, type);
      if (signed === null) return reject('malformed', 'a signed field is not a string');
      // Both checked before anything is fetched: a sender's request makes herald fetch nothing
      // but an SNS signing certificate, and only for a topic this source takes.
      if (!settings.topicArns.includes(String(message['TopicArn']))) {
        return reject('bad_signature', 'TopicArn is not one this source accepts');
      }
      if (!isSigningCertUrl(certUrl)) {
        return reject('bad_signature', 'SigningCertURL is not an SNS signing certificate (https, SNS host)');
      }
      // SNS signs with a certificate of the topic's own region: one of another region is not
      // fetched (nor can a forger make herald fetch, and cache, certificates of every region).
      if (regionOf(certUrl) !== String(message['TopicArn']).split(':')[3]) {
        return reject('bad_signature', "SigningCertURL is not in the topic's region");
      }

      let certificate: X509Certificate;
      try {
        certificate = await certificates.get(new URL(certUrl).href, now);
      } catch (error) {
        return unavailable('the signing certificate could not be fetched', error);
      }
      if (now < new Date(certificate.validFrom) || now > new Date(certificate.validTo)) {
        return reject('bad_signature', 'the signing certificate is not valid now');
      }
      let genuine = false;
      try {
        genuine =
          certificate.publicKey.asymmetricKeyType === 'rsa' &&
          verifySignatureBytes(digest, Buffer.from(signed, 'utf8'), certificate.publicKey, signature);
      } catch {
        // A signature of the wrong length for the key, say: not genuine, and not our failure.
      }
      if (!genuine) return reject('bad_signature', 'the signature does not match the signing certificate');
      const ageSeconds = (now.getTime() - Date.parse(String(message['Timestamp']))) / 1000;
      if (!(ageSeconds <= MAX_AGE_SECONDS && ageSeconds >= -MAX_AHEAD_SECONDS)) {
        return reject('stale_timestamp', 'Timestamp is more than 2 hours old or 5 minutes ahead of now');
      }
      return accept(message['MessageId'], message, 'MessageId of the message');
    },
  };
}
