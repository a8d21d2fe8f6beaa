// What every use case needs: the database, the configuration, the secret box, the retry policy,
// the destination policy, the logger and the metrics. Built once by createHerald.

import type { Logger } from 'pino';
import type { HeraldConfig } from '../config.ts';
import { type SecretBox, UnknownMasterKeyError } from '../crypto/secret-box.ts';
import type { PublishResult } from '../db/messages.ts';
import type { Db } from '../db/port.ts';
import type { RetryPolicy } from '../domain/retry-policy.ts';
import { HeraldError } from '../errors.ts';
import type { Metrics } from '../ops/metrics.ts';
import type { AddressPolicy } from '../sender/destination.ts';
import type { GroupedPublish } from './publish.ts';

export interface Core {
  db: Db;
  config: Readonly<HeraldConfig>;
  box: SecretBox;
  policy: RetryPolicy;
  addressPolicy: AddressPolicy;
  /** HERALD_EXTRA_CA_FILE's certificates, trusted besides Node's by every HTTPS fetch herald makes. */
  extraCaPem: string | undefined;
  log: Logger;
  /**
   * Publishes on herald's own pool, sharing one statement and one commit with whatever else is
   * being published at that moment (see db/group-commit.ts).
   */
  publishGrouped: (publish: GroupedPublish) => Promise<PublishResult>;
  /**
   * Evicts an app from the publishes' cache at once: a change this process just committed, which
   * its next publish must see even before the database announces it (a uid moved to a new app).
   */
  appChanged: (appId: string) => void;
  metrics: Metrics;
}

/** Who is acting, for the audit log and for scope checks. */
export interface Actor {
  /** api key id, 'env-admin-key' or 'library'. */
  id: string;
  scopes: readonly ('admin' | 'publish' | 'read')[];
  /** null: every app. */
  appIds: readonly string[] | null;
}

export const LIBRARY_ACTOR: Actor = { id: 'library', scopes: ['admin'], appIds: null };

/**
 * Opens a secret for a caller of the API. One sealed under a master key this process was not
 * given answers 503 `secret_unavailable`, to be retried: in a rotation rolling out, another
 * process of the deployment holds that key, and this one will once it is restarted with it listed.
 */
export function openForCaller(box: SecretBox, sealed: Buffer, ownerId: string, what: string): string {
  return forCaller(() => box.open(sealed, ownerId), what);
}

/** What `open` opens, with a master key this process lacks answered as openForCaller's. */
export function forCaller<T>(open: () => T, what: string): T {
  try {
    return open();
  } catch (error) {
    if (!(error instanceof UnknownMasterKeyError)) throw error;
    throw new HeraldError(
      'secret_unavailable',
      `${what} is sealed under master key ${error.keyId}, which this herald process does not hold (HERALD_MASTER_KEY, HERALD_PREVIOUS_MASTER_KEYS); retry, or tell its operator`,
    );
  }
}
