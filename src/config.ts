// Environment → validated, frozen configuration. Every variable is checked once, at start-up,
// and a bad value stops herald with a message that names the variable and what it expects.

import path from 'node:path';
import { ConfigError } from './errors.ts';
import { parseStrictCidr } from './sender/destination.ts';
import { isValidEndpointSecret } from './signing/standard-webhooks.ts';

export interface HeraldConfig {
  port: number;
  host: string;
  /** A worker-only process serves /metrics on this port; unset: no listener. */
  metricsPort: number | undefined;
  /** The address of the metrics port: HOST unless told (a public API, a private metrics port). */
  metricsHost: string;
  /** Unset → embedded PGlite in `dataDir`. */
  databaseUrl: string | undefined;
  dataDir: string;
  adminKey: string | undefined;
  /** base64 of 32 bytes; unset in embedded mode → generated into the data dir. */
  masterKey: string | undefined;
  /** Earlier master keys (base64), still accepted for decryption while `keys reencrypt` runs. */
  previousMasterKeys: readonly string[];
  allowPrivateNetworks: readonly string[];
  /** Seconds between attempts; attempts per cycle = length + 1. */
  retrySchedule: readonly number[];
  leaseSeconds: number;
  disableAfterFailures: number;
  attemptTimeoutMs: number;
  /** How often an idle worker looks for due work when no wake-up arrives. */
  pollIntervalMs: number;
  /** Requests a worker keeps in flight at once (across endpoints; one per endpoint). */
  workerConcurrency: number;
  /** Days finished messages, deliveries and attempts are kept; undefined: forever (the audit trail). */
  historyRetentionDays: number | undefined;
  /** On SIGTERM, how long a worker waits quietly for attempts in flight (they still end, and are recorded). */
  shutdownGraceMs: number;
  /** Keep-alive connections a worker opens per receiver origin. */
  connectionsPerOrigin: number;
  /**
   * Whether each request also carries its id, timestamp and signature under Svix's own names
   * (`svix-id`, `svix-timestamp`, `svix-signature`), besides the Standard Webhooks ones: receivers
   * written for Svix (the pattern Clerk's and Resend's documentation teach) read those alone.
   */
  svixHeaders: boolean;
  /** Connections this process keeps to a PostgreSQL server (server mode). */
  dbPoolSize: number;
  /**
   * Hot statements are named, so that PostgreSQL parses and plans each once per connection; false
   * behind a pooler that cannot keep named statements across transactions (PgBouncer before 1.21
   * in transaction mode).
   */
  dbPrepare: boolean;
  /** How long a database statement may take before the pool gives its connection up; migrations have none. */
  dbQueryTimeoutMs: number;
  /**
   * The connection LISTEN uses (the workers' wake-ups, the caches' evictions), where DATABASE_URL's
   * cannot hear NOTIFY: behind a transaction-mode pooler, PostgreSQL itself or a session-mode pool.
   * Unset: DATABASE_URL.
   */
  listenDatabaseUrl: string | undefined;
  /** Largest accepted request body, in bytes (413 above it). */
  maxBodyBytes: number;
  /** Largest accepted inbound delivery through /ingest, in bytes: providers send larger ones. */
  ingestMaxBodyBytes: number;
  /** How long a client has to send a request whole, headers and body (api/request-deadline.ts). */
  requestTimeoutMs: number;
  /** Requests per second one API key may make (429 above it); 0: unlimited. */
  apiRateLimit: number;
  /**
   * Failed authentications per client address per minute before its unknown keys are refused;
   * 0 (the default): no limit — behind a proxy, all clients share one address.
   */
  authFailureLimit: number;
  /** PEM file of extra CAs trusted for destinations, beside the system store. */
  extraCaFile: string | undefined;
  /** Where herald sends its own operational webhooks (endpoint.*, message.attempt.*); unset: none. */
  operatorWebhookUrl: string | undefined;
  /** The signing secret of that endpoint (whsec_…); unset: generated once and kept. */
  operatorWebhookSecret: string | undefined;
  logLevel: string;
  /** `herald doctor`: intake claims and messages younger than this may still be mid-write. */
  doctorSettleSeconds: number;
  /** `herald doctor`: a due delivery of an enabled endpoint waiting longer is overdue. */
  doctorDueSeconds: number;
  /** `herald doctor`: an expired lease older than this was not recovered (no worker is running). */
  doctorLeaseGraceSeconds: number;
  /** `herald doctor`: a parked unknown outcome older than this has gone unreviewed. */
  doctorUnknownReviewSeconds: number;
  /** `herald doctor`: how far back the checks of the history look (HERALD_DOCTOR_LOOKBACK_SECONDS). */
  doctorLookbackSeconds: number;
}

type Env = Record<string, string | undefined>;

const DEFAULT_RETRY_SCHEDULE = '5,300,1800,7200,18000,36000,36000';

function integer(env: Env, name: string, fallback: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  // Digits only: Number() would read a blank value as 0 (turning a limit off), and take 0x1f or 1e3.
  const value = /^\s*\d+\s*$/.test(raw) ? Number(raw) : Number.NaN;
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new ConfigError(name, `an integer from ${min} to ${max}`, raw);
  }
  return value;
}

function retrySchedule(env: Env): number[] {
  const raw = env['HERALD_RETRY_SCHEDULE'] || DEFAULT_RETRY_SCHEDULE;
  const parts = raw.split(',').map((part) => part.trim());
  // Decimal seconds only: an empty step (`5,,300`) would read as 0, and Number() takes 0x1f or 1e3.
  const steps = parts.map((part) => (/^\d+(\.\d+)?$/.test(part) ? Number(part) : Number.NaN));
  if (steps.length > 50 || steps.some((s) => !Number.isFinite(s) || s < 0 || s > 7 * 24 * 3600)) {
    throw new ConfigError(
      'HERALD_RETRY_SCHEDULE',
      'a comma-separated list of at most 50 delays in seconds (0 to 604800)',
      raw,
    );
  }
  return steps;
}

function cidrList(env: Env, name: string): string[] {
  const raw = env[name] ?? '';
  const items = raw
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  for (const item of items) {
    if (parseStrictCidr(item) === null) {
      throw new ConfigError(name, 'a comma-separated list of CIDRs such as 127.0.0.0/8,::1/128', raw);
    }
  }
  return items;
}

/**
 * What a start-up error may say of a URL: its scheme and host. Its path, query or user part may
 * hold a token (a chat webhook's URL is its credential), which a log must not keep.
 */
export function urlOrigin(url: string): string {
  const parsed = URL.parse(url);
  return parsed?.host ? `${parsed.protocol}//${parsed.host}/…` : '(not a URL)';
}

function operatorWebhook(env: Env): { url: string | undefined; secret: string | undefined } {
  const url = env['HERALD_OPERATOR_WEBHOOK_URL'] || undefined;
  const secret = env['HERALD_OPERATOR_WEBHOOK_SECRET'] || undefined;
  if (url !== undefined && !/^https?:$/.test(URL.parse(url)?.protocol ?? '')) {
    throw new ConfigError('HERALD_OPERATOR_WEBHOOK_URL', 'an http:// or https:// URL', urlOrigin(url));
  }
  // The secret is not echoed back: a start-up error must not print it to a log.
  if (secret !== undefined && !isValidEndpointSecret(secret)) {
    throw new ConfigError(
      'HERALD_OPERATOR_WEBHOOK_SECRET',
      'whsec_ followed by the base64 of 24 to 75 random bytes',
    );
  }
  if (secret !== undefined && url === undefined) {
    throw new ConfigError('HERALD_OPERATOR_WEBHOOK_URL', 'a URL when HERALD_OPERATOR_WEBHOOK_SECRET is set');
  }
  return { url, secret };
}

/**
 * The doctor judges rows older than the settle period and younger than the lookback window: a
 * window no longer than the settle period would leave its checks of the history nothing to judge.
 */
function doctorWindow(env: Env): { settle: number; lookback: number } {
  const settle = integer(env, 'HERALD_DOCTOR_SETTLE_SECONDS', 60, 0, 86_400);
  const lookback = integer(env, 'HERALD_DOCTOR_LOOKBACK_SECONDS', 86_400, 60, 3650 * 86_400);
  if (lookback <= settle) {
    throw new ConfigError(
      'HERALD_DOCTOR_LOOKBACK_SECONDS',
      `more than HERALD_DOCTOR_SETTLE_SECONDS (${settle})`,
      String(lookback),
    );
  }
  return { settle, lookback };
}

/** What a lease must leave beyond an attempt's deadline (see loadConfig). */
const MIN_LEASE_MARGIN_MS = 500;

/**
 * What the caller will do with the configuration. `masterKey: 'unused'`: a command that never
 * seals or opens a secret (migrate, doctor, reconcile, replay, API keys) runs against
 * `DATABASE_URL` without HERALD_MASTER_KEY, so a probe or a migration job need not carry it, and
 * ignores the master keys it is given.
 */
export interface ConfigUse {
  masterKey?: 'required' | 'unused';
}

export function loadConfig(env: Env = process.env, use: ConfigUse = {}): Readonly<HeraldConfig> {
  const leaseSeconds = integer(env, 'HERALD_LEASE_SECONDS', 60, 1, 3600);
  const attemptTimeoutMs = integer(env, 'HERALD_ATTEMPT_TIMEOUT_MS', 15_000, 100, 300_000);
  // The worker must be able to send and then record the outcome before its lease runs out;
  // otherwise every slow attempt would be recovered as `unknown` while it is still running.
  // A request may start only while its deadline and time to record its outcome (half of what the
  // lease leaves beyond the deadline) still fit: with less than half a second left over, a claim's
  // own round trip could use up that window, and every lease would be given back unsent.
  if (attemptTimeoutMs > leaseSeconds * 1000 - MIN_LEASE_MARGIN_MS) {
    throw new ConfigError(
      'HERALD_ATTEMPT_TIMEOUT_MS',
      `at most HERALD_LEASE_SECONDS (${leaseSeconds} s) in milliseconds less ${MIN_LEASE_MARGIN_MS}`,
      String(attemptTimeoutMs),
    );
  }
  const logLevel = env['LOG_LEVEL'] || 'info';
  if (!['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].includes(logLevel)) {
    throw new ConfigError('LOG_LEVEL', 'one of fatal, error, warn, info, debug, trace, silent', logLevel);
  }
  const databaseUrl = postgresUrl(env, 'DATABASE_URL');
  // A command that opens no secret on a server leaves the keys alone, whatever they are: a probe
  // still given the key of before a rotation must not fail for a key it never uses.
  const keysUnused = databaseUrl !== undefined && use.masterKey === 'unused';
  const masterKey = keysUnused ? undefined : env['HERALD_MASTER_KEY'] || undefined;
  const listenDatabaseUrl = postgresUrl(env, 'HERALD_LISTEN_DATABASE_URL');
  if (listenDatabaseUrl && !databaseUrl) {
    throw new ConfigError(
      'HERALD_LISTEN_DATABASE_URL',
      'set only with DATABASE_URL (the embedded database has no server)',
    );
  }
  if (databaseUrl && !masterKey && !keysUnused) {
    throw new ConfigError(
      'HERALD_MASTER_KEY',
      'a base64 32-byte key when DATABASE_URL is set (generate one with `herald keys master`)',
    );
  }
  const operator = operatorWebhook(env);
  const doctor = doctorWindow(env);
  return Object.freeze({
    port: integer(env, 'PORT', 8071, 0, 65535),
    metricsPort: env['HERALD_METRICS_PORT'] ? integer(env, 'HERALD_METRICS_PORT', 0, 0, 65535) : undefined,
    host: env['HOST'] || '127.0.0.1',
    metricsHost: env['HERALD_METRICS_HOST'] || env['HOST'] || '127.0.0.1',
    databaseUrl,
    dataDir: path.resolve(env['HERALD_DATA_DIR'] || '.herald'),
    adminKey: adminKey(env),
    masterKey,
    previousMasterKeys: Object.freeze(
      (keysUnused ? '' : (env['HERALD_PREVIOUS_MASTER_KEYS'] ?? ''))
        .split(',')
        .map((k) => k.trim())
        .filter(Boolean),
    ),
    allowPrivateNetworks: Object.freeze(cidrList(env, 'HERALD_ALLOW_PRIVATE_NETWORKS')),
    retrySchedule: Object.freeze(retrySchedule(env)),
    leaseSeconds,
    disableAfterFailures: integer(env, 'HERALD_DISABLE_AFTER_FAILURES', 5, 1, 1000),
    attemptTimeoutMs,
    pollIntervalMs: integer(env, 'HERALD_POLL_INTERVAL_MS', 1000, 10, 60_000),
    workerConcurrency: integer(env, 'HERALD_WORKER_CONCURRENCY', 64, 1, 4096),
    historyRetentionDays: env['HERALD_HISTORY_RETENTION_DAYS']
      ? integer(env, 'HERALD_HISTORY_RETENTION_DAYS', 0, 1, 3650)
      : undefined,
    shutdownGraceMs: integer(env, 'HERALD_SHUTDOWN_GRACE_MS', 10_000, 0, 600_000),
    connectionsPerOrigin: integer(env, 'HERALD_CONNECTIONS_PER_ORIGIN', 8, 1, 1024),
    svixHeaders: flag(env, 'HERALD_SVIX_HEADERS', false),
    dbPoolSize: integer(env, 'HERALD_DB_POOL_SIZE', 20, 1, 1000),
    dbPrepare: flag(env, 'HERALD_DB_PREPARE', true),
    dbQueryTimeoutMs: integer(env, 'HERALD_DB_QUERY_TIMEOUT_MS', 60_000, 1_000, 3_600_000),
    listenDatabaseUrl,
    maxBodyBytes: integer(env, 'HERALD_MAX_BODY_BYTES', 1024 * 1024, 1024, 64 * 1024 * 1024),
    ingestMaxBodyBytes: integer(env, 'HERALD_INGEST_MAX_BODY_BYTES', 8 * 1024 * 1024, 1024, 64 * 1024 * 1024),
    requestTimeoutMs: integer(env, 'HERALD_REQUEST_TIMEOUT_MS', 30_000, 1_000, 600_000),
    apiRateLimit: integer(env, 'HERALD_API_RATE_LIMIT', 200, 0, 1_000_000),
    authFailureLimit: integer(env, 'HERALD_AUTH_FAILURE_LIMIT', 0, 0, 1_000_000),
    extraCaFile: env['HERALD_EXTRA_CA_FILE'] || undefined,
    operatorWebhookUrl: operator.url,
    operatorWebhookSecret: operator.secret,
    logLevel,
    doctorSettleSeconds: doctor.settle,
    doctorDueSeconds: integer(env, 'HERALD_DOCTOR_DUE_SECONDS', 300, 0, 30 * 86_400),
    doctorLeaseGraceSeconds: integer(env, 'HERALD_DOCTOR_LEASE_GRACE_SECONDS', 60, 0, 86_400),
    doctorUnknownReviewSeconds: integer(env, 'HERALD_DOCTOR_UNKNOWN_REVIEW_SECONDS', 86_400, 0, 365 * 86_400),
    doctorLookbackSeconds: doctor.lookback,
  });
}

/**
 * herald doctor's thresholds below which a healthy system fails its checks: a write in flight is
 * invisible until it commits (settle), workers take due work within a poll interval (1 s by
 * default) and recover expired leases every 5 s at most. Checked when the doctor runs, not at
 * every start: no other command reads them, and none must refuse to start over them.
 */
const DOCTOR_FLOORS = [
  ['HERALD_DOCTOR_SETTLE_SECONDS', 'doctorSettleSeconds', 5],
  ['HERALD_DOCTOR_DUE_SECONDS', 'doctorDueSeconds', 10],
  ['HERALD_DOCTOR_LEASE_GRACE_SECONDS', 'doctorLeaseGraceSeconds', 10],
] as const;

export function assertDoctorThresholds(config: HeraldConfig): void {
  for (const [name, key, floor] of DOCTOR_FLOORS) {
    if (config[key] < floor) {
      throw new ConfigError(
        name,
        `at least ${floor} for herald doctor, or a healthy system fails`,
        String(config[key]),
      );
    }
  }
}

/** A connection string, or undefined when the variable is unset or empty. */
function postgresUrl(env: Env, name: string): string | undefined {
  const url = env[name] || undefined;
  // Not echoed back: a connection string may carry a password.
  if (url && !/^postgres(ql)?:\/\//.test(url)) {
    throw new ConfigError(name, 'a postgres:// or postgresql:// connection string');
  }
  return url;
}

/** `true` or `false`; the default when unset or empty. */
function flag(env: Env, name: string, fallback: boolean): boolean {
  const value = env[name];
  if (value === undefined || value === '') return fallback;
  if (value !== 'true' && value !== 'false') throw new ConfigError(name, 'true or false', value);
  return value === 'true';
}

/** A bearer token carries no whitespace: a key with some could never be presented. */
function adminKey(env: Env): string | undefined {
  const key = env['HERALD_ADMIN_KEY'] || undefined;
  // The key is not echoed back: a start-up error must not print it to a log.
  if (key !== undefined && (/\s/.test(key) || key.length < 8)) {
    throw new ConfigError('HERALD_ADMIN_KEY', 'at least 8 characters, without whitespace');
  }
  return key;
}
