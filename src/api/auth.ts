// Bearer-token authentication and scope checks. Keys are looked up by their SHA-256 hash;
// HERALD_ADMIN_KEY is compared in constant time. What a scope allows:
//   admin   — everything
//   publish — create messages (POST /api/v1/app/{app}/msg) and nothing else
//   read    — GET and HEAD requests, except on API keys: listing them is for admins only
// and any key may ask for readiness (GET /api/v1/health/ready).

import crypto from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import type { Logger } from 'pino';
import { hashApiKey } from '../crypto/api-key-token.ts';
import { API_KEY_CHANGED_CHANNEL, type ApiKeyRow, findLiveApiKeyByHash } from '../db/api-keys.ts';
import { createNotifiedCache, loadOne } from '../db/notified-cache.ts';
import type { Db } from '../db/port.ts';
import type { Actor } from '../engine/core.ts';
import { HeraldError } from '../errors.ts';
import type { AuthFailureLimiter } from './auth-failures.ts';

/** `any`: whatever the key's scopes (readiness, which every client may ask). */
export type Need = 'read' | 'publish' | 'admin' | 'any';

/** Live token hashes remembered per process (see seenLive below). */
const MAX_SEEN_LIVE = 10_000;

export interface Authenticator {
  /**
   * The actor behind an Authorization header; `unauthorized` without a live key, and
   * `rate_limited` for a token that would need a lookup from an address with too many failures.
   */
  authenticate(header: string | undefined, address: string): Promise<Actor>;
  /**
   * Stops honouring a key at once in this process (one it just revoked); other processes stop
   * when the revocation's commit is announced to them.
   */
  forget(keyId: string): void;
  close(): Promise<void>;
}

/**
 * Every request names its key: the live key behind each token hash is cached, so a request costs
 * no query, and evicted when its row changes anywhere (migrations/0009). Only live keys are kept:
 * an unknown or revoked token is looked up each time it is presented.
 */
export function createAuthenticator(deps: {
  db: Db;
  adminKey: string | undefined;
  log: Logger;
  failures: AuthFailureLimiter;
}): Authenticator {
  const keys = createNotifiedCache<ApiKeyRow>({
    db: deps.db,
    channel: API_KEY_CHANGED_CHANNEL,
    load: loadOne((hashHex) => findLiveApiKeyByHash(deps.db, Buffer.from(hashHex, 'hex'))),
    idOf: (key) => key.id,
    log: deps.log,
  });
  // Compared by hash: equal lengths, so the comparison leaks neither the key nor its length, and
  // the token is hashed once per request, for this comparison and the key lookup alike.
  const adminKeyHash = deps.adminKey ? hashApiKey(deps.adminKey) : null;
  // Token hashes that authenticated in this process: still looked up (a key may have been revoked
  // since), but never refused for their address's failures. Bounded; started afresh when full.
  const seenLive = new Set<string>();
  const lookupFailed = (address: string): HeraldError => {
    if (deps.failures.recordFailure(address)) {
      deps.log.warn(
        { address },
        'too many failed authentications from one address; its unknown keys are refused for the rest of the minute',
      );
    }
    return new HeraldError('unauthorized', 'invalid or revoked API key');
  };
  return {
    async authenticate(header, address) {
      const token = header?.match(/^Bearer\s+(\S+)$/i)?.[1];
      // A missing token costs nothing to refuse, so it is not counted: only lookups are.
      if (!token) throw new HeraldError('unauthorized', 'missing bearer token');
      const tokenHash = hashApiKey(token);
      if (adminKeyHash && crypto.timingSafeEqual(tokenHash, adminKeyHash)) {
        return { id: 'env-admin-key', scopes: ['admin'], appIds: null } satisfies Actor;
      }
      const hashHex = tokenHash.toString('hex');
      const wait = seenLive.has(hashHex) ? 0 : deps.failures.blockedFor(address);
      if (wait > 0) {
        throw new HeraldError(
          'rate_limited',
          `too many failed authentications from this address; keys not yet seen here are refused for ${wait} s`,
          undefined,
          { retryAfterSeconds: wait },
        );
      }
      const key = await keys.get(hashHex);
      if (!key) {
        // Seen live once, revoked since: no longer spared the address's limit.
        seenLive.delete(hashHex);
        throw lookupFailed(address);
      }
      if (seenLive.size >= MAX_SEEN_LIVE) seenLive.clear();
      seenLive.add(hashHex);
      return { id: key.id, scopes: key.scopes, appIds: key.appIds } satisfies Actor;
    },
    forget: keys.forget,
    close: keys.close,
  };
}

export function requiredScope(request: FastifyRequest): Need {
  // A publish-only key, what a product holds, may ask whether herald is ready to take its work.
  if (request.routeOptions.url === '/api/v1/health/ready') return 'any';
  // Key names, prefixes and scopes map out who can do what: not for read-only keys.
  if (request.routeOptions.url?.startsWith('/api/v1/api-key')) return 'admin';
  if (request.method === 'GET' || request.method === 'HEAD') return 'read';
  if (request.method === 'POST' && request.routeOptions.url === '/api/v1/app/:app_id/msg') return 'publish';
  return 'admin';
}

export function assertScope(actor: Actor, need: Need): void {
  if (need === 'any' || actor.scopes.includes('admin') || actor.scopes.includes(need)) return;
  throw new HeraldError('forbidden', `this API key lacks the '${need}' scope`);
}

/**
 * API keys and event types belong to no app: a key restricted to some apps must not manage keys
 * (it could mint an unrestricted one) nor change event types every app shares. It may still read
 * event types, which its apps' messages use.
 */
export function assertReach(actor: Actor, request: FastifyRequest): void {
  if (actor.appIds === null) return;
  const url = request.routeOptions.url ?? '';
  const readOnly = request.method === 'GET' || request.method === 'HEAD';
  if (url.startsWith('/api/v1/api-key') || (url.startsWith('/api/v1/event-type') && !readOnly)) {
    throw new HeraldError('forbidden', 'this needs a key that is not restricted to some applications');
  }
}
