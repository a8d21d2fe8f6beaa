// A generic HMAC scheme for senders that document their own variant: one header carrying the
// digest of the body (or of "<timestamp>.<body>" when a timestamp header is configured), in hex
// or base64, optionally behind a prefix such as "sha256=". Secrets are used as UTF-8 bytes.

import { z } from 'zod';
import {
  anyKeyMatches,
  DIGEST_BYTES,
  type DigestAlgorithm,
  decodeSignature,
  hmac,
  utf8Keys,
} from './bytes.ts';
import { HEADER_NAME, headerValue } from './headers.ts';
import { DEFAULT_TOLERANCE_SECONDS, isWithinTolerance, parseUnixSeconds } from './timestamps.ts';
import type { Verifier } from './types.ts';
import { accept, parseJsonBody, reject } from './verdict.ts';

const headerName = z.string().regex(HEADER_NAME).toLowerCase();

export const HmacSettings = z
  .strictObject({
    scheme: z.literal('hmac'),
    header: headerName,
    algorithm: z.enum(['sha256', 'sha512']),
    encoding: z.enum(['hex', 'base64']),
    /** Text before the digest in the header, e.g. "sha256="; compared exactly. */
    // Printable ASCII with no leading space: header values arrive trimmed, so a prefix that
    // starts with whitespace could never match.
    prefix: z
      .string()
      .regex(
        /^[\x21-\x7e][\x20-\x7e]{0,63}$/,
        'printable ASCII, not starting with a space, at most 64 characters',
      )
      .optional(),
    /** Whole seconds since the epoch; when set, the signed content is "<timestamp>.<body>". */
    timestampHeader: headerName.optional(),
    toleranceSeconds: z.int().min(1).max(86_400).optional(),
    deliveryIdHeader: headerName,
  })
  .refine((settings) => settings.toleranceSeconds === undefined || settings.timestampHeader !== undefined, {
    message: 'toleranceSeconds needs timestampHeader: without a signed timestamp there is nothing to bound',
    path: ['toleranceSeconds'],
  });
export type HmacSettings = z.output<typeof HmacSettings>;

export function createHmacVerifier(settings: HmacSettings, secrets: readonly string[]): Verifier {
  const keys = utf8Keys('hmac', secrets);
  const algorithm: DigestAlgorithm = settings.algorithm;
  const prefix = settings.prefix ?? '';
  const toleranceSeconds = settings.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS;

  return {
    async verify(request, now) {
      const header = headerValue(request, settings.header);
      if (header === undefined) return reject('missing_signature', `no ${settings.header} header`);
      if (!header.startsWith(prefix))
        return reject('malformed', `${settings.header} must start with ${prefix}`);
      const presented = decodeSignature(header.slice(prefix.length), settings.encoding);
      if (presented === null || presented.length !== DIGEST_BYTES[algorithm]) {
        return reject('malformed', `${settings.header} is not a ${settings.encoding} ${algorithm} digest`);
      }

      let signedPrefix = '';
      let timestamp: number | null = null;
      if (settings.timestampHeader !== undefined) {
        const timestampText = headerValue(request, settings.timestampHeader);
        if (timestampText === undefined) return reject('malformed', `no ${settings.timestampHeader} header`);
        timestamp = parseUnixSeconds(timestampText);
        if (timestamp === null)
          return reject('malformed', `${settings.timestampHeader} is not whole seconds`);
        signedPrefix = `${timestampText}.`;
      }

      const genuine = anyKeyMatches(keys, [presented], (key) =>
        hmac(algorithm, key, [signedPrefix, request.rawBody]),
      );
      if (!genuine) return reject('bad_signature', 'the signature matches no live secret');
      if (timestamp !== null && !isWithinTolerance(timestamp, now, toleranceSeconds)) {
        return reject(
          'stale_timestamp',
          `${settings.timestampHeader} is more than ${toleranceSeconds} s from now`,
        );
      }
      return accept(
        headerValue(request, settings.deliveryIdHeader),
        parseJsonBody(request.rawBody),
        `the ${settings.deliveryIdHeader} header`,
      );
    },
  };
}
