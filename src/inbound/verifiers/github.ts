// GitHub (https://docs.github.com/webhooks/using-webhooks/validating-webhook-deliveries):
// `X-Hub-Signature-256: sha256=<hex>` of HMAC-SHA256 over the body, keyed by the secret's UTF-8
// bytes. The legacy SHA-1 `X-Hub-Signature` is not accepted. GitHub signs no timestamp, and not
// the delivery id (`X-GitHub-Delivery`, the same on a redelivery): a redelivery is a duplicate by
// its id, but a captured request sent again under a new id is one only by a business key read
// from the signed body (`{{body.…}}`; see the README).

import { z } from 'zod';
import { anyKeyMatches, decodeHex, hmac, utf8Keys } from './bytes.ts';
import { headerValue } from './headers.ts';
import type { Verifier } from './types.ts';
import { accept, parseJsonBody, reject } from './verdict.ts';

export const GitHubSettings = z.strictObject({ scheme: z.literal('github') });

const PREFIX = 'sha256=';
const SHA256_BYTES = 32;

export function createGitHubVerifier(secrets: readonly string[]): Verifier {
  const keys = utf8Keys('github', secrets);
  return {
    async verify(request) {
      const header = headerValue(request, 'x-hub-signature-256');
      if (header === undefined) return reject('missing_signature', 'no X-Hub-Signature-256 header');
      if (!header.startsWith(PREFIX))
        return reject('malformed', 'X-Hub-Signature-256 must start with sha256=');
      const presented = decodeHex(header.slice(PREFIX.length));
      if (presented === null || presented.length !== SHA256_BYTES) {
        return reject('malformed', 'X-Hub-Signature-256 is not 64 hex digits');
      }
      if (!anyKeyMatches(keys, [presented], (key) => hmac('sha256', key, [request.rawBody]))) {
        return reject('bad_signature', 'the signature matches no live secret');
      }
      return accept(
        headerValue(request, 'x-github-delivery'),
        parseJsonBody(request.rawBody),
        'the X-GitHub-Delivery header',
      );
    },
  };
}
