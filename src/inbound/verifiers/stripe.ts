// Stripe (https://docs.stripe.com/webhooks#verify-manually): `Stripe-Signature: t=<ts>,v1=<hex>`
// with HMAC-SHA256 over "<t>.<body>", keyed by the endpoint secret's UTF-8 bytes ("whsec_…"
// included). During a secret roll Stripe sends one v1 per live secret, so any may match; v0 (test
// mode legacy) and unknown schemes are ignored, as Stripe's libraries do. The delivery id is the
// event's `id` (evt_…) from the body, which Stripe keeps across retries of the same event.

import { z } from 'zod';
import { anyKeyMatches, decodeHex, hmac, utf8Keys } from './bytes.ts';
import { headerValue } from './headers.ts';
import { DEFAULT_TOLERANCE_SECONDS, isWithinTolerance, parseUnixSeconds } from './timestamps.ts';
import type { Verifier } from './types.ts';
import { accept, field, parseJsonBody, reject } from './verdict.ts';

export const StripeSettings = z.strictObject({ scheme: z.literal('stripe') });

const SHA256_BYTES = 32;

interface StripeSignatureHeader {
  timestamp: string;
  signatures: Buffer[];
}

/** null when the header has no usable `t` or no `v1` entry at all. */
function parseHeader(header: string): StripeSignatureHeader | null {
  let timestamp: string | undefined;
  let v1Entries = 0;
  const signatures: Buffer[] = [];
  for (const item of header.split(',')) {
    const equals = item.indexOf('=');
    if (equals === -1) continue;
    const key = item.slice(0, equals).trim();
    const value = item.slice(equals + 1).trim();
    if (key === 't') {
      // Two different timestamps leave it unclear which one was signed.
      if (timestamp !== undefined && timestamp !== value) return null;
      timestamp = value;
    } else if (key === 'v1') {
      v1Entries += 1;
      const decoded = decodeHex(value);
      // A v1 of the wrong shape cannot match; it is skipped like an unknown scheme, not fatal.
      if (decoded !== null && decoded.length === SHA256_BYTES) signatures.push(decoded);
    }
  }
  if (timestamp === undefined || parseUnixSeconds(timestamp) === null || v1Entries === 0) return null;
  return { timestamp, signatures };
}

export function createStripeVerifier(secrets: readonly string[]): Verifier {
  const keys = utf8Keys('stripe', secrets);
  return {
    async verify(request, now) {
      const header = headerValue(request, 'stripe-signature');
      if (header === undefined) return reject('missing_signature', 'no Stripe-Signature header');
      const parsed = parseHeader(header);
      if (parsed === null)
        return reject('malformed', 'Stripe-Signature needs one t=<seconds> and a v1=<hex>');

      const signedPrefix = `${parsed.timestamp}.`;
      const genuine = anyKeyMatches(keys, parsed.signatures, (key) =>
        hmac('sha256', key, [signedPrefix, request.rawBody]),
      );
      if (!genuine) return reject('bad_signature', 'no v1 signature matches a live secret');
      if (!isWithinTolerance(Number(parsed.timestamp), now, DEFAULT_TOLERANCE_SECONDS)) {
        return reject('stale_timestamp', 'Stripe-Signature t is more than 300 seconds from now');
      }
      const payload = parseJsonBody(request.rawBody);
      return accept(field(payload, 'id'), payload, 'the event id of the body');
    },
  };
}
