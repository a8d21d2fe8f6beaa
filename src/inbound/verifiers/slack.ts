// Slack (https://api.slack.com/authentication/verifying-requests-from-slack):
// `X-Slack-Signature: v0=<hex>` of HMAC-SHA256 over "v0:<X-Slack-Request-Timestamp>:<body>",
// keyed by the app's signing secret (UTF-8); requests more than five minutes from now are refused.
//
// Slack sends no delivery id header. Events API callbacks carry `event_id` in the JSON body, and
// a retry (X-Slack-Retry-Num) repeats it, so it is the delivery id. The Events API's
// `url_verification` handshake, signed like any request, is accepted under the id
// URL_VERIFICATION: the ingestor answers its challenge and stores nothing; so is the
// `app_rate_limited` notice, which the ingestor acknowledges and logs. Other request kinds
// (slash commands, interactivity) have no id; a source receiving them must name a header its
// proxy or sender adds (`deliveryIdHeader`), else they get a 400.

import { z } from 'zod';
import { anyKeyMatches, decodeHex, hmac, utf8Keys } from './bytes.ts';
import { HEADER_NAME, headerValue } from './headers.ts';
import { DEFAULT_TOLERANCE_SECONDS, isWithinTolerance, parseUnixSeconds } from './timestamps.ts';
import type { Verifier } from './types.ts';
import { accept, field, parseJsonBody, reject } from './verdict.ts';

export const SlackSettings = z.strictObject({
  scheme: z.literal('slack'),
  /** Where to read the delivery id when the body has no `event_id`. */
  deliveryIdHeader: z.string().regex(HEADER_NAME).toLowerCase().optional(),
});
export type SlackSettings = z.output<typeof SlackSettings>;

/** The delivery id of a verified url_verification handshake (never stored: see ingest.ts). */
export const URL_VERIFICATION = 'url_verification';
/**
 * The delivery id of a verified `app_rate_limited` notice: Slack dropping the app's events for a
 * minute. It has no event_id; acknowledged and logged, never stored (see ingest.ts) — an error
 * answer would count towards Slack turning the app's event subscriptions off.
 */
export const APP_RATE_LIMITED = 'app_rate_limited';

const VERSION = 'v0';
const PREFIX = `${VERSION}=`;
const SHA256_BYTES = 32;

export function createSlackVerifier(settings: SlackSettings, secrets: readonly string[]): Verifier {
  const keys = utf8Keys('slack', secrets);
  return {
    async verify(request, now) {
      const header = headerValue(request, 'x-slack-signature');
      if (header === undefined) return reject('missing_signature', 'no X-Slack-Signature header');
      const timestampText = headerValue(request, 'x-slack-request-timestamp');
      if (timestampText === undefined) return reject('malformed', 'no X-Slack-Request-Timestamp header');
      const timestamp = parseUnixSeconds(timestampText);
      if (timestamp === null) return reject('malformed', 'X-Slack-Request-Timestamp is not whole seconds');
      if (!header.startsWith(PREFIX)) return reject('malformed', 'X-Slack-Signature must start with v0=');
      const presented = decodeHex(header.slice(PREFIX.length));
      if (presented === null || presented.length !== SHA256_BYTES) {
        return reject('malformed', 'X-Slack-Signature is not 64 hex digits');
      }

      const baseStringPrefix = `${VERSION}:${timestampText}:`;
      const genuine = anyKeyMatches(keys, [presented], (key) =>
        hmac('sha256', key, [baseStringPrefix, request.rawBody]),
      );
      if (!genuine) return reject('bad_signature', 'the signature matches no live secret');
      if (!isWithinTolerance(timestamp, now, DEFAULT_TOLERANCE_SECONDS)) {
        return reject('stale_timestamp', 'X-Slack-Request-Timestamp is more than 5 minutes from now');
      }

      const payload = parseJsonBody(request.rawBody);
      if (field(payload, 'type') === 'url_verification') {
        if (typeof field(payload, 'challenge') !== 'string') {
          return reject('bad_request', 'a url_verification request without a challenge');
        }
        return accept(URL_VERIFICATION, payload, 'the url_verification handshake');
      }
      if (field(payload, 'type') === 'app_rate_limited') {
        return accept(APP_RATE_LIMITED, payload, 'the app_rate_limited notice');
      }
      const eventId = field(payload, 'event_id');
      if (eventId !== undefined || settings.deliveryIdHeader === undefined) {
        return accept(eventId, payload, 'the event_id of the body');
      }
      return accept(
        headerValue(request, settings.deliveryIdHeader),
        payload,
        `the event_id of the body or the ${settings.deliveryIdHeader} header`,
      );
    },
  };
}
