// Google Cloud Pub/Sub push (https://cloud.google.com/pubsub/docs/authenticate-push-subscriptions):
// `Authorization: Bearer <OIDC ID token>`, RS256, signed by Google for the subscription's service
// account. Checked: signature against the JWKS, `aud`, `iss`, `email`, `email_verified`, `exp`
// and `iat` (with a small clock skew).
//
// The token authenticates the SENDER, not the body: it carries no digest of the payload, so a
// changed body still verifies. Integrity of the body rests on TLS between Google and herald.
// The delivery id is `message.messageId` from the body (Google's envelope), the same on every
// redelivery; with payload unwrapping (the body is the message's data) the
// `x-goog-pubsub-message-id` header, which Google sends when the subscription writes metadata.
// Source secrets are unused: Google's public keys are the only key material.

import { createLocalJWKSet, errors, type JSONWebKeySet, type JWTPayload, jwtVerify } from 'jose';
import { z } from 'zod';
import { headerValue } from './headers.ts';
import { createRemoteCache } from './remote-cache.ts';
import type { FetchText, Verdict, Verifier } from './types.ts';
import { accept, field, parseJsonBody, reject, unavailable } from './verdict.ts';

const GOOGLE_ISSUERS = ['https://accounts.google.com', 'accounts.google.com'];

export const GcpPubSubSettings = z.strictObject({
  scheme: z.literal('gcp-pubsub'),
  jwksUrl: z.url({ protocol: /^https$/ }).default('https://www.googleapis.com/oauth2/v3/certs'),
  /** The audience configured on the push subscription (by default its push endpoint URL). */
  audience: z.string().min(1),
  issuer: z.string().min(1).default('https://accounts.google.com'),
  /** The service account the subscription pushes as; compared exactly with the `email` claim. */
  serviceAccountEmail: z.string().min(3),
});
export type GcpPubSubSettings = z.output<typeof GcpPubSubSettings>;

// Google rotates its signing keys over days; an hour keeps fetches rare and new keys close.
const JWKS_TTL_MS = 60 * 60 * 1000;
// A token naming an unknown key id triggers a refetch at most this often.
const JWKS_REFRESH_FLOOR_MS = 60 * 1000;
const CLOCK_SKEW_SECONDS = 60;
// Google ID tokens live one hour; requiring `iat` through maxTokenAge also refuses future ones.
const MAX_TOKEN_AGE_SECONDS = 60 * 60;

const BEARER = /^Bearer +([A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+)$/i;

type KeySet = ReturnType<typeof createLocalJWKSet>;

async function loadKeySet(fetchText: FetchText, url: string): Promise<KeySet> {
  const text = await fetchText(url);
  // createLocalJWKSet refuses anything that is not { keys: [...] }; a bad document is a fetch
  // failure like any other, reported as "unavailable" rather than as the requester's fault.
  return createLocalJWKSet(JSON.parse(text) as JSONWebKeySet);
}

function rejectionFor(error: unknown): Verdict {
  if (error instanceof errors.JWTExpired)
    return reject('stale_timestamp', `token ${error.claim} check failed`);
  if (error instanceof errors.JWTClaimValidationFailed) {
    if ((error.claim === 'iat' || error.claim === 'nbf') && error.reason === 'check_failed') {
      return reject('stale_timestamp', `token ${error.claim} is in the future`);
    }
    return reject(
      'bad_signature',
      `token claim ${error.claim} is ${error.reason === 'missing' ? 'missing' : 'not accepted'}`,
    );
  }
  if (
    error instanceof errors.JWSSignatureVerificationFailed ||
    error instanceof errors.JWKSNoMatchingKey ||
    error instanceof errors.JWKSMultipleMatchingKeys ||
    error instanceof errors.JOSEAlgNotAllowed
  ) {
    return reject('bad_signature', 'the token is not signed by a key of the JWKS');
  }
  // JWSInvalid, JWTInvalid, JOSENotSupported and anything unforeseen: the token is not usable.
  return reject('malformed', 'the bearer token is not a valid JWT');
}

export function createGcpPubSubVerifier(settings: GcpPubSubSettings, fetchText: FetchText): Verifier {
  const keySets = createRemoteCache<KeySet>({
    load: (url) => loadKeySet(fetchText, url),
    ttlMs: JWKS_TTL_MS,
    maxEntries: 1,
  });
  const issuers = GOOGLE_ISSUERS.includes(settings.issuer) ? GOOGLE_ISSUERS : [settings.issuer];

  async function verifyToken(
    token: string,
    keySet: KeySet,
    now: Date,
  ): Promise<{ claims: JWTPayload } | { error: unknown }> {
    try {
      const { payload } = await jwtVerify(token, keySet, {
        algorithms: ['RS256'],
        audience: settings.audience,
        issuer: issuers,
        requiredClaims: ['exp', 'iat', 'email', 'email_verified'],
        maxTokenAge: MAX_TOKEN_AGE_SECONDS,
        clockTolerance: CLOCK_SKEW_SECONDS,
        currentDate: now,
      });
      return { claims: payload };
    } catch (error) {
      return { error };
    }
  }

  return {
    async verify(request, now) {
      const authorization = headerValue(request, 'authorization');
      if (authorization === undefined) return reject('missing_signature', 'no Authorization header');
      const token = BEARER.exec(authorization)?.[1];
      if (token === undefined) return reject('malformed', 'Authorization is not "Bearer <JWT>"');

      let result: { claims: JWTPayload } | { error: unknown };
      try {
        result = await verifyToken(token, await keySets.get(settings.jwksUrl, now), now);
        if ('error' in result && result.error instanceof errors.JWKSNoMatchingKey) {
          // Google may have started signing with a key published after our last fetch.
          const fresh = await keySets.refresh(settings.jwksUrl, now, JWKS_REFRESH_FLOOR_MS);
          result = await verifyToken(token, fresh, now);
        }
      } catch (error) {
        return unavailable('the JWKS could not be fetched', error);
      }
      if ('error' in result) return rejectionFor(result.error);

      if (result.claims['email'] !== settings.serviceAccountEmail) {
        return reject('bad_signature', 'token email is not the configured service account');
      }
      if (result.claims['email_verified'] !== true) {
        return reject('bad_signature', 'token email is not verified');
      }
      const payload = parseJsonBody(request.rawBody);
      // A subscription that unwraps payloads sends the message's data as the body, and its id in a
      // header when it writes metadata. That data is the publisher's: a body of its own with a
      // `message.messageId` in it (a chat update's `message.message_id`) says nothing of the
      // delivery, so the body is read as Google's envelope only when it is one — its `message`
      // beside the `subscription` it came through.
      const headerId = headerValue(request, 'x-goog-pubsub-message-id');
      if (headerId !== undefined) return accept(headerId, payload, 'the x-goog-pubsub-message-id header');
      const message = field(payload, 'message');
      const envelope = typeof field(payload, 'subscription') === 'string' && message !== undefined;
      return accept(
        envelope ? (field(message, 'messageId') ?? field(message, 'message_id')) : undefined,
        payload,
        'message.messageId of the body or, for a subscription that unwraps payloads, the x-goog-pubsub-message-id header (enable "write metadata")',
      );
    },
  };
}
