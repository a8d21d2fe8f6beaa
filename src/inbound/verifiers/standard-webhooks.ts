// Standard Webhooks (https://www.standardwebhooks.com), which is also what Svix-signed senders
// use: `webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64> [v1,<base64> …]` over
// "<id>.<timestamp>.<body>". Svix spells the headers `svix-*`; both are accepted, as the svix
// library does. The delivery id is the signed `webhook-id`.

import { z } from 'zod';
import { decodeEndpointSecret, verifySignature } from '../../signing/standard-webhooks.ts';
import { headerValue } from './headers.ts';
import { DEFAULT_TOLERANCE_SECONDS, isWithinTolerance, parseUnixSeconds } from './timestamps.ts';
import type { Verifier } from './types.ts';
import { accept, parseJsonBody, reject } from './verdict.ts';

export const StandardWebhooksSettings = z.strictObject({ scheme: z.literal('standard-webhooks') });

export function createStandardWebhooksVerifier(secrets: readonly string[]): Verifier {
  if (secrets.length === 0) throw new Error('standard-webhooks verification needs at least one secret');
  const keys = secrets.map((secret, index) => {
    try {
      return decodeEndpointSecret(secret);
    } catch {
      // The secret itself stays out of the message: it may end up in a log.
      throw new Error(`standard-webhooks secret #${index + 1} is not "whsec_" followed by base64`);
    }
  });

  return {
    async verify(request, now) {
      const signatureHeader = headerValue(request, 'webhook-signature', 'svix-signature');
      if (signatureHeader === undefined) return reject('missing_signature', 'no webhook-signature header');
      // The id is part of the signed content: without it there is nothing to verify against.
      const msgId = headerValue(request, 'webhook-id', 'svix-id');
      if (msgId === undefined) return reject('missing_delivery_id', 'no webhook-id header');
      const timestampText = headerValue(request, 'webhook-timestamp', 'svix-timestamp');
      if (timestampText === undefined) return reject('malformed', 'no webhook-timestamp header');
      const timestampSeconds = parseUnixSeconds(timestampText);
      if (timestampSeconds === null) return reject('malformed', 'webhook-timestamp is not whole seconds');

      if (!verifySignature({ msgId, timestampSeconds, body: request.rawBody, signatureHeader, keys })) {
        return reject('bad_signature', 'no v1 signature matches a live secret');
      }
      // Checked after the signature, so "stale" is only ever said of a request we know is genuine.
      if (!isWithinTolerance(timestampSeconds, now, DEFAULT_TOLERANCE_SECONDS)) {
        return reject('stale_timestamp', 'webhook-timestamp is more than 5 minutes from now');
      }
      return accept(msgId, parseJsonBody(request.rawBody), 'the webhook-id header');
    },
  };
}
