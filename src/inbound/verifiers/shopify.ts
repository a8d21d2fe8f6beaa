// Shopify (https://shopify.dev/docs/apps/build/webhooks/subscribe/https#step-5-verify-the-webhook):
// `X-Shopify-Hmac-SHA256: <base64>` of HMAC-SHA256 over the body, keyed by the app's client
// secret (UTF-8). No signed timestamp; duplicates of one webhook share `X-Shopify-Webhook-Id`,
// which Shopify documents as the key for deduplication.

import { z } from 'zod';
import { anyKeyMatches, decodeBase64, hmac, utf8Keys } from './bytes.ts';
import { headerValue } from './headers.ts';
import type { Verifier } from './types.ts';
import { accept, parseJsonBody, reject } from './verdict.ts';

export const ShopifySettings = z.strictObject({ scheme: z.literal('shopify') });

const SHA256_BYTES = 32;

export function createShopifyVerifier(secrets: readonly string[]): Verifier {
  const keys = utf8Keys('shopify', secrets);
  return {
    async verify(request) {
      const header = headerValue(request, 'x-shopify-hmac-sha256');
      if (header === undefined) return reject('missing_signature', 'no X-Shopify-Hmac-SHA256 header');
      const presented = decodeBase64(header);
      if (presented === null || presented.length !== SHA256_BYTES) {
        return reject('malformed', 'X-Shopify-Hmac-SHA256 is not the base64 of 32 bytes');
      }
      if (!anyKeyMatches(keys, [presented], (key) => hmac('sha256', key, [request.rawBody]))) {
        return reject('bad_signature', 'the signature matches no live secret');
      }
      return accept(
        headerValue(request, 'x-shopify-webhook-id'),
        parseJsonBody(request.rawBody),
        'the X-Shopify-Webhook-Id header',
      );
    },
  };
}
