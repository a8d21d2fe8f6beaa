// createHerald(): the library face. It opens the database (PGlite in the data dir, or a
// PostgreSQL server), applies migrations, and starts or stops the roles: the HTTP API and the
// delivery worker. `publish(app, message, { db })` enqueues inside the caller's own transaction.

import crypto from 'node:crypto';
import fs from 'node:fs';
import pino, { type Logger } from 'pino';
import { type HeraldConfig, loadConfig } from './config.ts';
import { assertSecretsUnderKeys, loadMasterKeys, secretBoxWithoutKey } from './crypto/master-key.ts';
import { createSecretBox } from './crypto/secret-box.ts';
import { APP_CHANGED_CHANNEL, findApps } from './db/apps.ts';
import { sealClearHeaders } from './db/clear-headers.ts';
import { coalesced, createGroupCommit, MAX_BATCH_CHARS } from './db/group-commit.ts';
import { wakeWorkers } from './db/messages.ts';
import { type Migration, migrate, migrationState } from './db/migrate.ts';
import { createNotifiedCache } from './db/notified-cache.ts';
import { createPgDb } from './db/pg-pool.ts';
import {
  asQueryable,
  type Db,
  type ForeignQueryable,
  isNodePostgresClient,
  preparingQueryable,
  type Queryable,
} from './db/port.ts';
import { isStoreUnavailable } from './db/store-unavailable.ts';
import { holdsPrototypeKey, PROTOTYPE_KEY_REFUSED } from './domain/prototype-keys.ts';
import { RETRY_JITTER } from './domain/retry-policy.ts';
import { type Core, LIBRARY_ACTOR } from './engine/core.ts';
import { type GroupedPublish, type Published, publish, publishGroup } from './engine/publish.ts';
import { ConfigError, HeraldError, invalidField } from './errors.ts';
import { createMetrics } from './ops/metrics.ts';
import { emitOutcomeEvents, emitRecoveryEvents } from './ops/operational-webhooks.ts';
import { ensureOperatorWebhooks, findOperatorWebhooks } from './ops/operator-app.ts';
import { MessageIn } from './schemas/svix.ts';
import { parseOrThrow } from './schemas/validate.ts';
import { createAddressPolicy, warnOfPrivateNetworks } from './sender/destination.ts';
import { createSender } from './sender/send.ts';
import { createWorker, type Worker } from './worker/worker.ts';

export type { HeraldConfig } from './config.ts';
export { ConfigError, HeraldError } from './errors.ts';

export interface HeraldOptions {
  /** Environment-style settings; defaults to process.env. */
  env?: Record<string, string | undefined>;
  /** A ready configuration; wins over `env`. */
  config?: Readonly<HeraldConfig>;
  logger?: Logger;
  /**
   * Apply pending migrations on open (default true), and seal the endpoint headers an earlier
   * version kept in clear. Without, herald opens a database that exists and writes nothing as it
   * opens: an embedded data directory without one is refused, not made.
   */
  migrate?: boolean;
}

export interface Herald {
  readonly core: Core;
  /**
   * Publishes a message. With `db`, the message, its deliveries and its audit entry are written
   * through the caller's client inside the caller's transaction: roll it back and nothing is sent.
   * With `db`, `wake: false` leaves the workers' NOTIFY out of that transaction (see `wake()`);
   * without `db` the publish commits on its own and wakes the workers with its commit. With `db`,
   * `prepare: true` (a node-postgres client) prepares herald's statements once on that connection
   * instead of parsing and planning them at every publish.
   */
  publish(
    app: string,
    message: unknown,
    options?: { db?: ForeignQueryable; prepare?: boolean; idempotencyKey?: string; wake?: boolean },
  ): Promise<Published>;
  /**
   * Wakes the delivery workers (a NOTIFY outside any transaction of yours), for publishes made with
   * `{ db, wake: false }`: call it after your COMMIT. Calls that overlap share one NOTIFY. It never
   * throws: if the database cannot be reached, workers still find the work by polling.
   */
  wake(): Promise<void>;
  startWorker(): Promise<Worker>;
  close(): Promise<void>;
}

/**
 * The caller's own client as the port (null: none given): plain statements, or with `prepare`
 * herald's statements prepared once on it under names that begin with `herald:`.
 */
function callerQueryable(client: ForeignQueryable | undefined, prepare: boolean): Queryable | null {
  // A pool lends each statement whichever connection is free, each its own transaction: the
  // publish would commit at once, whatever the caller's transaction does after. What is no client
  // at all (a JavaScript caller's slip) is refused the same way, not met as a TypeError.
  const notAClient = typeof client !== 'object' || client === null || !('query' in client);
  if (client !== undefined && (notAClient || isPool(client))) {
    throw new HeraldError(
      'validation',
      'db must be the client your transaction runs on (await pool.connect(), or a transaction’s tx), not a pool',
    );
  }
  if (!prepare) return client ? asQueryable(client) : null;
  if (client && isNodePostgresClient(client)) return preparingQueryable(client, { prefix: 'herald:' });
  throw new HeraldError(
    'validation',
    'prepare: true needs db, a node-postgres client (pg Client or PoolClient)',
  );
}

/**
 * A publish on herald's own pool that failed: closed while it waited (the pool's own error says
 * nothing a caller can act on), or refused for now by the database — store_unavailable, to retry.
 */
function ownPoolErrorOf(assertOpen: () => void) {
  return (error: unknown): never => {
    assertOpen();
    if (!isStoreUnavailable(error)) throw error;
    throw new HeraldError(
      'store_unavailable',
      `the database could not take the publish now (${(error as Error).message}); publish again — with an idempotency key, a repeat is safe`,
    );
  };
}

/** A node-postgres Pool, or herald's own Db: each hands its statements to any connection. */
function isPool(client: ForeignQueryable): boolean {
  return (
    ('totalCount' in client && 'idleCount' in client) || ('transaction' in client && 'pipeline' in client)
  );
}

/** JSON logs to stdout by default; `fd` 2 sends them to stderr (for CLI commands that print). */
export function createLogger(level: string, fd: 1 | 2 = 1): Logger {
  return pino(
    {
      level,
      // Authorization and signatures must never reach a log line, whatever logs them.
      redact: {
        paths: [
          'req.headers.authorization',
          'req.headers["webhook-signature"]',
          'req.headers["svix-signature"]',
          'headers.authorization',
          'headers["webhook-signature"]',
        ],
        censor: '[redacted]',
      },
    },
    pino.destination(fd),
  );
}

export async function openDb(config: Readonly<HeraldConfig>, log: Logger): Promise<Db> {
  if (config.databaseUrl) {
    let deaf = false;
    return createPgDb({
      connectionString: config.databaseUrl,
      listenConnectionString: config.listenDatabaseUrl,
      max: config.dbPoolSize,
      prepare: config.dbPrepare,
      queryTimeoutMs: config.dbQueryTimeoutMs,
      checkHearing: true,
      onListenState: (state, error) => {
        if (state === 'lost')
          log.warn({ err: error?.message }, 'LISTEN connection lost; polling until it is back');
        else if (state === 'restored') log.info('LISTEN connection restored');
        else if (state === 'hearing') {
          // At info only after a warning that it was deaf: the all-clear belongs beside the alarm.
          if (deaf) log.info('LISTEN hears a NOTIFY sent through DATABASE_URL again');
          deaf = false;
        } else {
          deaf = true;
          log.warn(
            'LISTEN did not hear a NOTIFY sent through DATABASE_URL: wake-ups fall back to polling and ' +
              'cached apps, sources and API keys to their 5 s age limit. Behind a transaction-mode ' +
              'pooler, set HERALD_LISTEN_DATABASE_URL to PostgreSQL itself or to a session-mode pool',
          );
        }
      },
    });
  }
  return openEmbedded(config.dataDir);
}

/**
 * Applies the pending migrations (`herald migrate`, and the start of a server); returns the
 * versions applied. On PostgreSQL they run on a connection of their own with no query deadline: a
 * migration that builds an index over a large table, or waits for the lock of another process's
 * migration, takes as long as it takes, where the pool's deadline would give it up every time
 * (and roll its work back). The embedded database is made in the data directory if it is not
 * there yet.
 */
export async function migrateDatabase(
  config: Readonly<HeraldConfig>,
  migrations?: Migration[],
): Promise<number[]> {
  const db = config.databaseUrl
    ? createPgDb({
        connectionString: config.databaseUrl,
        max: 1,
        prepare: config.dbPrepare,
        applicationName: 'herald migrate',
        queryTimeoutMs: 0,
      })
    : await openEmbedded(config.dataDir);
  try {
    return await migrate(db, migrations);
  } finally {
    await db.close();
  }
}

// Loaded only here: a process on PostgreSQL never needs the embedded database's code.
async function openEmbedded(dataDir: string): Promise<Db> {
  const { openEmbeddedDb } = await import('./db/pglite.ts');
  return openEmbeddedDb(dataDir);
}

export async function createHerald(options: HeraldOptions = {}): Promise<Herald> {
  const config = options.config ?? loadConfig(options.env);
  const log = options.logger ?? createLogger(config.logLevel);
  const embedded = !config.databaseUrl;
  if (embedded && options.migrate === false) {
    const { assertEmbeddedDatabase } = await import('./db/pglite.ts');
    assertEmbeddedDatabase(config.dataDir);
  }
  // Without a master key on PostgreSQL (a config loaded for a command that opens no secret).
  const keys =
    config.masterKey || embedded
      ? loadMasterKeys(config.masterKey, config.previousMasterKeys, config.dataDir, embedded)
      : null;
  const box = keys ? createSecretBox(keys) : secretBoxWithoutKey();
  const extraCaPem = config.extraCaFile ? readExtraCa(config.extraCaFile) : undefined;
  const addressPolicy = createAddressPolicy(config.allowPrivateNetworks);
  // Said by a process that sends, once: a command that only reads (doctor in cron, say) would
  // otherwise log it at every run.
  const warnOfDestinations = onlyOnce(async () =>
    warnOfPrivateNetworks(log, config.allowPrivateNetworks, 'destinations'),
  );
  if (options.migrate !== false && !embedded) await migrateDatabase(config);
  const db = await openDb(config, log);
  try {
    // The embedded database is one process's: its migrations run on the Db it opened.
    if (options.migrate !== false && embedded) await migrate(db);
    await warnIfDatabaseAhead(db, log);
    if (keys) await assertSecretsUnderKeys(db, box, keys, embedded ? config.dataDir : null);
    // What the migrations could not do without the key: headers an earlier version kept in clear
    // are sealed by a process that migrates (a server, the library), never by a command, which
    // a probe or a read-only standby may run.
    if (keys && options.migrate !== false) {
      const sealed = await sealClearHeaders(db, box);
      if (sealed > 0)
        log.info({ endpoints: sealed }, 'sealed the endpoint headers an earlier version kept in clear');
    }
  } catch (error) {
    await db.close();
    throw error;
  }
  // The apps published to, without a query per batch: evicted when a change is announced.
  const apps = createNotifiedCache({
    db,
    channel: APP_CHANGED_CHANNEL,
    load: (idsOrUids) => findApps(db, idsOrUids),
    idOf: (app) => app.id,
    log,
  });
  const metrics = createMetrics(db, log);
  // Closed by close(), or sooner by its deadline: either way once.
  const closeDb = onlyOnce(() => db.close());
  // Publishes go on a pipeline of their own: a second write goes right behind the first once 16
  // wait, and one beside them only when publishes have waited 5 ms behind a long write such as a
  // large fan-out (see group-commit.ts).
  const publishPipeline = db.pipeline();
  const submitPublish = createGroupCommit(
    (batch: GroupedPublish[], lane) =>
      publishGroup(lane === 'pipelined' ? publishPipeline : db, batch, apps.getMany),
    {
      maxBatch: 256,
      // 256 payloads of up to HERALD_MAX_BODY_BYTES could pass what one parameter holds.
      batchSize: { of: (publish) => publish.size, max: MAX_BATCH_CHARS },
      pipelined: 2,
      beside: 1,
      besideStays: false,
      splitAt: 16,
      maxWaitMs: 5,
      overloaded: () =>
        new HeraldError('overloaded', 'too many publishes are waiting for the database; retry in a second'),
      // Publishes refused before the database (an app missing or out of reach) are not items of
      // the write; a batch of only those wrote nothing.
      written: (results, seconds) => {
        const items = results.filter((r) => !(r instanceof Error)).length;
        if (items > 0) metrics.batchWritten('publish', items, seconds);
      },
    },
  );
  const core: Core = {
    db,
    config,
    box,
    policy: { schedule: config.retrySchedule, jitter: RETRY_JITTER },
    addressPolicy,
    extraCaPem,
    log,
    metrics,
    publishGrouped: async (publish) => {
      const outcome = await submitPublish(publish);
      if (outcome instanceof Error) throw outcome;
      return outcome;
    },
    appChanged: apps.forget,
  };
  try {
    // Set-up belongs with migrating: the commands that open herald without migrating (doctor,
    // keys, replay, reconcile, sources) leave the operator app alone.
    if (options.migrate !== false) await ensureOperatorWebhooks(core);
  } catch (error) {
    await db.close();
    throw error;
  }
  const workers: Worker[] = [];
  const senders: { close(): Promise<void> }[] = [];

  /** Set when close() begins: herald's own pool takes no more work. */
  let closed = false;
  /** Workers' starts under way (startWorker): close() waits for them. */
  const starting = new Set<Promise<void>>();
  const assertOpen = () => {
    if (closed) throw new HeraldError('store_unavailable', 'this herald is closed');
  };
  const ownPoolError = ownPoolErrorOf(assertOpen);

  return {
    core,
    async publish(app, message, publishOptions = {}) {
      // Not once it closes, in a caller's transaction either: its caches no longer hear of changes
      // (an app deleted). In a caller's transaction it writes through their client, and the
      // database's error stays itself (it tells whether that transaction was aborted); on herald's
      // own pool, what the API answers 503 is a HeraldError to retry.
      assertOpen();
      const ownPool = !publishOptions.db;
      if (holdsPrototypeKey(message))
        throw new HeraldError('bad_request', `the message ${PROTOTYPE_KEY_REFUSED}`);
      assertMessageFields(message);
      const input = parseOrThrow(MessageIn, message);
      const target = callerQueryable(publishOptions.db, publishOptions.prepare ?? false) ?? db;
      const publishing = publish(core, target, LIBRARY_ACTOR, app, input, {
        idempotencyKey: publishOptions.idempotencyKey ?? null,
        wake: publishOptions.wake,
      });
      const published = await (ownPool ? publishing.catch(ownPoolError) : publishing);
      // Inside the caller's transaction this counts before their COMMIT: herald cannot see it, so a
      // rolled-back publish is still counted (README, Metrics).
      if (published.created) core.metrics.published('library');
      return published;
    },
    wake: coalesced(async () => {
      // Closed, it has no workers' wake-up to send, and nothing to warn of.
      if (closed) return;
      await wakeWorkers(db).catch((error: Error) =>
        log.warn({ err: error.message }, 'could not wake the workers; they will poll'),
      );
    }),
    async startWorker() {
      assertOpen();
      void warnOfDestinations();
      const sender = createSender({
        allowPrivateNetworks: config.allowPrivateNetworks,
        timeoutMs: config.attemptTimeoutMs,
        extraCaPem,
        connectionsPerOrigin: config.connectionsPerOrigin,
      });
      senders.push(sender);
      const worker = createWorker({
        db,
        box,
        sender,
        policy: core.policy,
        svixHeaders: config.svixHeaders,
        log,
        leaseSeconds: config.leaseSeconds,
        attemptTimeoutMs: config.attemptTimeoutMs,
        disableAfterFailures: config.disableAfterFailures,
        findOperatorEndpoint: async () => (await findOperatorWebhooks(core))?.endpointId ?? null,
        concurrency: config.workerConcurrency,
        pollIntervalMs: config.pollIntervalMs,
        historyRetentionDays: config.historyRetentionDays,
        metrics: core.metrics,
        afterRecord: emitOutcomeEvents,
        afterRecover: emitRecoveryEvents,
        operatorWebhooksConfigured: config.operatorWebhookUrl !== undefined,
      });
      const started = worker.start();
      starting.add(started);
      try {
        await started;
      } finally {
        starting.delete(started);
      }
      workers.push(worker);
      // Closed while it started: close() waited for the start, and stops it with the others.
      assertOpen();
      return worker;
    },
    close: onlyOnce(async () => {
      closed = true;
      // A worker still starting is stopped with the others, once it has started.
      await Promise.allSettled(starting);
      // Every lease this process claims from here on is claimed by a worker that is stopping, so
      // a lease from now, all have expired: nothing it still has to write counts then (a fenced
      // outcome would be refused; recovery has the leases). A server that has gone silent (no
      // reset) must not hold the stop longer, for a query deadline at each of its steps: its
      // connections are dropped, and what still waits on them fails at once. (The embedded
      // database is in the process: nothing to drop.)
      const leasesOver =
        db.kind === 'pg'
          ? setTimeout(() => {
              log.warn(
                'stopping: a lease has passed since the stop began; dropping the database connections',
              );
              closeDb().catch(() => {});
            }, config.leaseSeconds * 1000)
          : undefined;
      const stopping = workers.splice(0);
      try {
        await Promise.all(stopping.map((w) => w.stop(config.shutdownGraceMs)));
        // A sender closes once its requests have ended, those that outlived the grace too: their
        // outcomes are then written before the database closes.
        await Promise.all(senders.splice(0).map((s) => s.close()));
        await Promise.all(stopping.map((w) => w.finish()));
      } finally {
        // A worker that failed to stop cleanly must not leave the pool and its connections open.
        try {
          await apps.close();
          await closeDb();
        } finally {
          clearTimeout(leasesOver);
        }
      }
    }),
  };
}

/**
 * A build started on a database that a newer build migrated (a rollback, a host left behind)
 * runs, as a rolling deploy needs it to, but says so: what those migrations changed is unknown
 * to it. `herald doctor` reports it too (migrations_ahead).
 */
async function warnIfDatabaseAhead(db: Db, log: Logger): Promise<void> {
  const { ahead } = await migrationState(db);
  if (ahead.length > 0) {
    log.warn(
      { migrations: ahead },
      'the database has migrations this build does not know: a newer build migrated it; run that build',
    );
  }
}

/** `run` once: later calls share the first one's end (a second close() closes nothing twice). */
function onlyOnce(run: () => Promise<void>): () => Promise<void> {
  let running: Promise<void> | null = null;
  return () => {
    running ??= run();
    return running;
  };
}

/** The operator's CA file, or a start-up error that names the variable (not a bare ENOENT). */
function readExtraCa(path: string): string {
  let pem: string;
  try {
    pem = fs.readFileSync(path, 'utf8');
  } catch (error) {
    throw new ConfigError(
      'HERALD_EXTRA_CA_FILE',
      'a readable PEM file',
      `${path}: ${(error as NodeJS.ErrnoException).code ?? 'unreadable'}`,
    );
  }
  // TLS skips what is not a PEM certificate without a word: a wrong file would only show as
  // every private-CA receiver failing its handshake, delivery after delivery.
  const certificates = pem.match(PEM_CERTIFICATE) ?? [];
  const unreadable = certificates.findIndex((certificate) => {
    try {
      new crypto.X509Certificate(certificate);
      return false;
    } catch {
      return true;
    }
  });
  if (certificates.length === 0 || unreadable >= 0) {
    const why =
      certificates.length === 0 ? 'no certificate in it' : `certificate ${unreadable + 1} unreadable`;
    throw new ConfigError('HERALD_EXTRA_CA_FILE', 'a PEM file of CA certificates', `${path}: ${why}`);
  }
  return pem;
}

const PEM_CERTIFICATE = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

/**
 * The API ignores a body's unknown fields, as Svix does; a library caller's message is code, where
 * an unknown field is a mistake that would pass unseen: an `idempotencyKey` put in the message
 * instead of the options would publish every retry anew.
 */
function assertMessageFields(message: unknown): void {
  if (typeof message !== 'object' || message === null) return; // parsing says what it is not
  const unknown = Object.keys(message).find((field) => !Object.hasOwn(MessageIn.shape, field));
  if (unknown === undefined) return;
  throw invalidField(
    [unknown],
    unknown === 'idempotencyKey'
      ? "not a field of a message: publish's options take it (its third argument)"
      : 'not a field of a message',
  );
}
