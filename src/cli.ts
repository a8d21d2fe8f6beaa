// The `herald` command (started through bin/herald.mjs). `serve` runs the API and a worker in one process (the only way to use
// the embedded database, which one process owns at a time); `api` and `worker` run one role each
// against a PostgreSQL server; `migrate` applies migrations; `keys` manages API keys.

import fs from 'node:fs';
import { Command, InvalidArgumentError } from 'commander';
import { z } from 'zod';
import { rethrowTakenUid, SOURCE_UID_TAKEN } from './api/uid-conflict.ts';
import { assertDoctorThresholds, type ConfigUse, type HeraldConfig, loadConfig } from './config.ts';
import { generateMasterKey } from './crypto/master-key.ts';
import { listApiKeys, type Scope } from './db/api-keys.ts';
import { findApp, findApps } from './db/apps.ts';
import { migrationState } from './db/migrate.ts';
import { isConnectFailure } from './db/server-error.ts';
import { listSources } from './db/sources.ts';
import { steadyNow } from './domain/steady-clock.ts';
import { createApiKey, ensureLocalAdminKey, resolveAppIds, revokeKey } from './engine/api-keys.ts';
import { createSource, requireSource } from './engine/sources.ts';
import { ConfigError, HeraldError } from './errors.ts';
import { createHerald, createLogger, type Herald, migrateDatabase } from './herald.ts';
import { keptConfirmations } from './inbound/sns-confirmations.ts';
import { type DoctorCheck, formatFindings, runDoctor, SKIPPABLE_CHECKS } from './ops/doctor.ts';
import {
  acknowledgeUnknown,
  formatReconciliation,
  isUncertain,
  type Reconciliation,
  reconcileMessage,
  reconcileWindow,
} from './ops/reconcile.ts';
import { reencryptSecrets } from './ops/reencrypt.ts';
import { liftRests, ReplayIn, replay } from './ops/replay.ts';
import { SourceIn } from './schemas/sources.ts';
import { parseOrThrow } from './schemas/validate.ts';

type Role = { api: boolean; worker: boolean };

/** A command that never seals or opens a secret runs without HERALD_MASTER_KEY. */
const OPENS_NO_SECRET: ConfigUse = { masterKey: 'unused' };

/** The CLI acts with an operator's full rights; the audit log names it as 'cli'. */
const CLI_ACTOR = { id: 'cli', scopes: ['admin'], appIds: null } as const;

/**
 * A write to stdout after its reader went away (`herald reconcile … | head`) fails with EPIPE,
 * which stdout emits as an error event: unhandled, it crashed the command with a stack, maybe
 * before it closed its database (the embedded one's lock file left behind). As a Unix tool does,
 * the command ends quietly instead, through its usual cleanup. Another failure is one, and said so.
 */
process.stdout.on('error', (error: NodeJS.ErrnoException) => {
  if (error.code === 'EPIPE') return;
  console.error(`herald: could not write the output: ${error.message}`);
  process.exitCode = 1;
});
// `2>&1 | head`: stderr's reader can go away too. Nothing is left to tell of it.
process.stderr.on('error', (error: NodeJS.ErrnoException) => {
  if (error.code !== 'EPIPE') process.exitCode = 1;
});

function configWith(overrides: { port?: string; host?: string }): Readonly<HeraldConfig> {
  return loadConfig({
    ...process.env,
    ...(overrides.port ? { PORT: overrides.port } : {}),
    ...(overrides.host ? { HOST: overrides.host } : {}),
  });
}

/** How long a repeat of the signal that began a stop counts as the same one (see run's stop). */
const SAME_SIGNAL_MS = 1000;

const API_SETTINGS = { port: 'PORT (or --port)', host: 'HOST (or --host)' };
const METRICS_SETTINGS = { port: 'HERALD_METRICS_PORT', host: 'HERALD_METRICS_HOST' };

/**
 * Listens, or stops start-up naming the setting at fault, as a bad value of any other does: the
 * listen's own error (`EADDRINUSE`, `getaddrinfo ENOTFOUND`) names neither the setting nor the fix.
 */
async function listenOn(
  server: { listen(at: { port: number; host: string }): Promise<unknown> },
  at: { port: number; host: string },
  settings: { port: string; host: string },
): Promise<void> {
  try {
    await server.listen(at);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'EADDRINUSE' || code === 'EACCES') {
      const why =
        code === 'EADDRINUSE' ? 'in use, by another herald or program' : 'not permitted to this user';
      throw new ConfigError(settings.port, `a port free to listen on at ${at.host}`, `${at.port}: ${why}`);
    }
    if (code === 'ENOTFOUND' || code === 'EAI_AGAIN' || code === 'EADDRNOTAVAIL' || code === 'EAFNOSUPPORT') {
      throw new ConfigError(settings.host, 'an address of this machine to listen on', `${at.host}: ${code}`);
    }
    throw error;
  }
}

async function run(role: Role, overrides: { port?: string; host?: string }): Promise<void> {
  const config = configWith(overrides);
  if (!config.databaseUrl && !(role.api && role.worker)) {
    throw new ConfigError(
      'DATABASE_URL',
      'a PostgreSQL server for separate api/worker processes (use `herald serve` for the embedded database)',
    );
  }
  const herald = await createHerald({ config });
  const { log } = herald.core;
  if (!config.databaseUrl && !config.adminKey) {
    const file = await ensureLocalAdminKey(herald.core.db, config.dataDir);
    if (file) log.info({ file }, 'created an admin API key for this embedded database; it is in this file');
  }
  // HERALD_METRICS_PORT gives /metrics (and the health check) a port of its own: a worker on its
  // own has no API, and an API's port may be public. Without it, the API serves /metrics. The
  // HTTP stack (fastify, every route and schema) is loaded only by a process that serves: a
  // worker without it (and without PGlite's code, see openDb) starts ~9 MiB smaller.
  const server = role.api || config.metricsPort !== undefined ? await import('./api/server.ts') : null;
  const api = server && role.api ? await server.buildApi(herald.core) : null;
  const metrics =
    server && config.metricsPort !== undefined ? await server.buildMetricsServer(herald.core) : null;
  try {
    if (api) await listenOn(api, { port: config.port, host: config.host }, API_SETTINGS);
    if (metrics)
      await listenOn(metrics, { port: config.metricsPort!, host: config.metricsHost }, METRICS_SETTINGS);
    if (role.worker) await herald.startWorker();
  } catch (error) {
    // Closed before the command ends: the embedded database's lock is not left behind.
    await api?.close().catch(() => {});
    await metrics?.close().catch(() => {});
    await herald.close().catch(() => {});
    throw error;
  }
  const address = (s: typeof api) => {
    if (!s) return s;
    const { address: host, port } = s.server.address() as { address: string; port: number };
    return `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
  };
  log.info(
    {
      api: address(api),
      metrics: (address(metrics) ?? address(api))?.concat('/metrics') ?? null,
      worker: role.worker,
      database: config.databaseUrl ? 'postgres' : `embedded (${config.dataDir})`,
    },
    'herald started',
  );

  let first: { signal: string; at: number } | null = null;
  const stop = async (signal: string) => {
    if (first) {
      // Ctrl-C under `npm start` arrives twice within milliseconds: from the terminal, to the
      // whole process group, and from npm, which passes it on to its child. The same signal again
      // within a second is that one press, not a second one.
      if (signal === first.signal && steadyNow() - first.at < SAME_SIGNAL_MS) return;
      // A second signal means "now": leases of attempts still in flight will be recovered.
      log.warn({ signal }, 'stopping at once');
      process.exit(1);
    }
    first = { signal, at: steadyNow() };
    log.info({ signal }, 'stopping: no new work; finishing attempts in flight');
    try {
      await api?.close();
      await metrics?.close();
      await herald.close();
      log.info({ signal }, 'stopped');
      process.exit(0);
    } catch (error) {
      log.error({ err: (error as Error).message }, 'could not stop cleanly');
      process.exit(1);
    }
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
}

/**
 * Runs a command on a herald without its worker. Only `herald migrate` changes the schema: any
 * other command on a database that lacks migrations stops and says so, instead of migrating a
 * production database as a side effect of a look at it (a migration may lock a table while it
 * builds an index, or stop on data it must not change).
 */
async function withHerald<T>(fn: (herald: Herald) => Promise<T>, use: ConfigUse = {}): Promise<T> {
  return withOpenHerald(async (herald) => {
    const { pending } = await migrationState(herald.core.db);
    if (pending.length > 0) {
      throw new Error(`the database lacks migrations ${pending.join(', ')}: run \`herald migrate\` first`);
    }
    return fn(herald);
  }, use);
}

/** A herald without its worker and without migrating, closed after `fn`. */
async function withOpenHerald<T>(fn: (herald: Herald) => Promise<T>, use: ConfigUse = {}): Promise<T> {
  // What these commands print on stdout is their answer (a key, a list): logs go to stderr.
  const config = loadConfig(process.env, use);
  const herald = await createHerald({ config, logger: createLogger(config.logLevel, 2), migrate: false });
  try {
    return await fn(herald);
  } finally {
    await herald.close();
  }
}

/**
 * Runs `fn`, which checks a command's options as the API checks its body: a validation error is
 * said in the command's words — each issue named by its flag (`--event-type`), as typed, not by
 * the field it becomes (`eventType`), and every issue, not the first only.
 */
async function namingFlags<T>(flags: Record<string, string>, fn: () => T | Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (error) {
    if (!(error instanceof HeraldError) || error.kind !== 'validation' || !error.issues) throw error;
    const said = error.issues.map(({ loc, msg }) => {
      const [field = '', ...inside] = loc.slice(1);
      const where = inside.length > 0 ? ` (${inside.join('.')})` : '';
      return `${flags[field] ?? field}${where}: ${msg}`;
    });
    throw new Error(said.join('; '));
  }
}

const scopeList = (value: string, previous: Scope[] = []): Scope[] => {
  if (!['admin', 'publish', 'read'].includes(value))
    throw new InvalidArgumentError('expected admin, publish or read');
  return [...previous, value as Scope];
};

/**
 * An option's ISO time with its offset (as the API takes them), refused where commander reads it:
 * a time without one would be read in this host's time zone, and a loose date string (`Nov 1`)
 * as whatever year V8 guesses.
 */
const isoTime = (value: string): Date => {
  if (!z.iso.datetime({ offset: true }).safeParse(value).success)
    throw new InvalidArgumentError('expected an ISO time with its offset, e.g. 2026-11-01T00:00:00Z');
  return new Date(value);
};

/** A count option as digits only: `Number` would take `abc` as NaN, `1e3` or `0x10` as numbers. */
const count = (value: string): number => {
  if (!/^\d{1,9}$/.test(value)) throw new InvalidArgumentError('expected a whole number, e.g. 500');
  return Number(value);
};

const program = new Command('herald').description('A webhook gateway on PostgreSQL').showHelpAfterError();

for (const [name, role, text] of [
  ['serve', { api: true, worker: true }, 'run the API and a delivery worker in one process'],
  ['api', { api: true, worker: false }, 'run the HTTP API only (needs DATABASE_URL)'],
  ['worker', { api: false, worker: true }, 'run a delivery worker only (needs DATABASE_URL)'],
] as const) {
  const command = program.command(name).description(text);
  // A worker serves no API: a --port it took would listen nowhere (its /metrics has
  // HERALD_METRICS_PORT), so commander refuses it by name.
  if (role.api) command.option('-p, --port <port>', 'listen port (PORT)');
  command
    .option('--host <host>', role.api ? 'listen address (HOST)' : 'listen address of /metrics (HOST)')
    .action((options) => run(role, options));
}

program
  .command('migrate')
  .description('apply pending database migrations')
  .action(async () => {
    const applied = await migrateDatabase(loadConfig(process.env, OPENS_NO_SECRET));
    console.log(
      applied.length > 0 ? `applied migrations ${applied.join(', ')}` : 'migrations are up to date',
    );
  });

const keys = program.command('keys').description('manage API keys and the master key');
keys
  .command('create')
  .description('create an API key and print it once')
  .requiredOption('--scope <scope>', 'admin, publish or read (repeatable)', scopeList)
  .option('--name <name>', 'a label for the key', 'cli')
  .option(
    '--app <app>',
    'restrict the key to this app, by id or uid (repeatable)',
    (v: string, p: string[] = []) => [...p, v],
  )
  .action((options: { scope: Scope[]; name: string; app?: string[] }) =>
    withHerald(async (herald) => {
      const apps = options.app;
      const appIds = apps
        ? await namingFlags({ apps: '--app' }, () => resolveAppIds(herald.core.db, apps))
        : null;
      const created = await herald.core.db.transaction((tx) =>
        createApiKey(tx, 'cli', { name: options.name, scopes: options.scope, appIds }),
      );
      console.log(created.key);
      console.error(`created ${created.id} (${created.scopes.join(', ')}); the key is shown only once`);
    }, OPENS_NO_SECRET),
  );
keys
  .command('list')
  .description('list API keys (never the keys themselves)')
  .action(() =>
    withHerald(async (herald) => {
      const listed = await listApiKeys(herald.core.db);
      if (listed.length === 0) console.error('no API keys');
      const apps = await findApps(herald.core.db, [...new Set(listed.flatMap((k) => k.appIds ?? []))]);
      // An app by its uid, as `keys create --app` takes it; by its id once it has none, or is deleted.
      const restriction = (appIds: string[] | null) =>
        appIds === null ? 'all apps' : `apps ${appIds.map((id) => apps.get(id)?.uid ?? id).join(',')}`;
      for (const key of listed) {
        console.log(
          [
            key.id,
            key.prefix,
            key.scopes.join(','),
            restriction(key.appIds),
            key.name,
            key.revokedAt ? 'revoked' : 'live',
          ].join('\t'),
        );
      }
    }, OPENS_NO_SECRET),
  );
keys
  .command('revoke <id>')
  .description('revoke an API key')
  .action((id: string) =>
    withHerald(async (herald) => {
      if (!(await herald.core.db.transaction((tx) => revokeKey(tx, 'cli', id)))) {
        throw new Error(`no live API key ${id}`);
      }
      console.log(`revoked ${id}`);
    }, OPENS_NO_SECRET),
  );
keys
  .command('reencrypt')
  .description('re-encrypt stored secrets under HERALD_MASTER_KEY (old keys in HERALD_PREVIOUS_MASTER_KEYS)')
  .action(() =>
    withHerald(async (herald) => {
      const report = await reencryptSecrets(herald.core.db, herald.core.box, CLI_ACTOR.id);
      for (const { table, examined, reencrypted, unreadable } of report.tables) {
        console.log(`${table}: examined ${examined} secrets, re-encrypted ${reencrypted}`);
        if (unreadable.length > 0) {
          const owners = [...new Set(unreadable.map((u) => u.owner))].join(', ');
          console.error(`no configured key opens ${unreadable.length} ${table} rows, of ${owners}`);
          process.exitCode = 1;
        }
      }
    }),
  );
keys
  .command('master')
  .description('print a new random master key (base64) for HERALD_MASTER_KEY')
  .action(() => console.log(generateMasterKey()));

const sources = program.command('sources').description('manage inbound sources');
sources
  .command('list')
  .description('list inbound sources and their ingest paths')
  .action(() =>
    withHerald(async (herald) => {
      const found = await listSources(herald.core.db, null);
      if (found.length === 0) console.error('no inbound sources');
      for (const s of found) {
        console.log(
          [s.id, s.uid ?? '-', s.scheme, s.appId, s.eventType, `/ingest/${s.uid ?? s.id}`].join('\t'),
        );
      }
    }, OPENS_NO_SECRET),
  );
sources
  .command('confirmations <source>')
  .description(
    'print the command that confirms each SNS subscription this source was asked to confirm (confirmSubscriptions off)',
  )
  .action((idOrUid: string) =>
    withHerald(async (herald) => {
      const source = await requireSource(herald.core.db, idOrUid);
      const kept = await keptConfirmations(herald.core.db, herald.core.box, source);
      if (kept.length === 0) console.error('no SNS subscription confirmation was kept for this source');
      for (const k of kept) {
        console.log(`# ${k.topicArn}: asked ${k.receivedAt.toISOString()} (a token is valid for three days)`);
        console.log(k.command);
      }
    }),
  );
sources
  .command('create')
  .description('create an inbound source (the secret is sealed; it is never shown again)')
  .requiredOption(
    '--scheme <scheme>',
    'standard-webhooks, stripe, github, slack, shopify, hmac, gcp-pubsub or aws-sns',
  )
  .requiredOption('--app <app>', 'the app (id or uid) its messages go to')
  .requiredOption('--event-type <name>', 'the event type of its messages')
  .option('--uid <uid>', 'a readable identifier, used in /ingest/{uid}')
  .option(
    '--secret <secret>',
    'the signing secret (repeatable; visible to other users in the process list: prefer --secret-file)',
    (v: string, p: string[] = []) => [...p, v],
  )
  .option(
    '--secret-file <path>',
    'a file holding the signing secret (repeatable; a trailing newline is dropped)',
    (v: string, p: string[] = []) => [...p, v],
  )
  .option('--business-key <template>', 'e.g. {{body.order.id}}:{{body.type}} (default {{delivery_id}})')
  .option('--settings <json>', 'scheme settings as JSON, e.g. {"header":"x-signature",...}')
  .action(
    (options: {
      scheme: string;
      app: string;
      eventType: string;
      uid?: string;
      secret?: string[];
      secretFile?: string[];
      businessKey?: string;
      settings?: string;
    }) =>
      withHerald(async (herald) => {
        const fromFiles = (options.secretFile ?? []).map(readSecretFile);
        const secrets = [...(options.secret ?? []), ...fromFiles];
        const input = await namingFlags(SOURCE_FLAGS, () =>
          parseOrThrow(SourceIn, {
            uid: options.uid,
            scheme: options.scheme,
            app: options.app,
            eventType: options.eventType,
            secret: secrets.length > 0 ? secrets : undefined,
            businessKey: options.businessKey,
            settings: options.settings ? parseSettings(options.settings) : undefined,
          }),
        );
        const created = await herald.core.db
          .transaction((tx) => createSource(herald.core, tx, CLI_ACTOR, input))
          .catch(rethrowTakenUid(SOURCE_UID_TAKEN));
        console.log(`${created.id}\t/ingest/${created.uid ?? created.id}`);
      }),
  );

const SOURCE_FLAGS = {
  uid: '--uid',
  scheme: '--scheme',
  app: '--app',
  eventType: '--event-type',
  // Secrets from --secret and --secret-file are one list: an issue's index counts both.
  secret: '--secret/--secret-file',
  businessKey: '--business-key',
  settings: '--settings',
};

function parseSettings(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new Error(`--settings is not JSON: ${(error as Error).message}`);
  }
}

/** A secret kept in a file (a mounted secret, say), not on the command line where `ps` shows it. */
function readSecretFile(path: string): string {
  try {
    return fs.readFileSync(path, 'utf8').replace(/\r?\n$/, '');
  } catch (error) {
    throw new Error(`--secret-file ${path}: ${(error as NodeJS.ErrnoException).code ?? 'unreadable'}`);
  }
}

program
  .command('reconcile')
  .description('print the evidence about a message, or the messages of a time window, and what is unknown')
  .option('--message <id>', 'one message, by its id (msg_…)')
  .option('--since <time>', 'messages created at or after this ISO time', isoTime)
  .option('--until <time>', 'and before this ISO time', isoTime)
  .option('--app <app>', 'only this app (id or uid)')
  .option('--unknown-only', 'only messages with an outcome unknown, or not recorded yet')
  .option(
    '--acknowledge',
    'with --message: its unknown outcomes are reviewed and left as they are (no longer awaiting review)',
  )
  .option('--json', 'machine-readable output')
  .action(
    (options: {
      message?: string;
      since?: Date;
      until?: Date;
      app?: string;
      unknownOnly?: boolean;
      acknowledge?: boolean;
      json?: boolean;
    }) =>
      withHerald(async (herald) => {
        const db = herald.core.db;
        const windowed = options.since || options.until || options.app || options.unknownOnly;
        if (options.acknowledge) {
          if (!options.message || windowed || options.json)
            throw new Error('--acknowledge takes one --message <id>, and nothing else');
          await acknowledge(herald, options.message);
          return;
        }
        if (options.message && windowed)
          throw new Error(
            '--message names one message: --since, --until, --app and --unknown-only are for a window',
          );
        if (!options.message && !options.since) throw new Error('give --message <id> or --since <time>');
        if (options.since && options.until && options.until <= options.since)
          throw new Error('--until must be after --since');
        const app = options.app ? await findApp(db, options.app) : null;
        if (options.app && !app) throw new Error(`no app ${options.app}`);
        if (options.message) {
          const found = await reconcileMessage(db, options.message);
          if (!found) throw new Error(`no message ${options.message}`);
          await printReconciliations([found], options.json ?? false);
          return;
        }
        const printed = await printReconciliations(
          reconcileWindow(db, {
            since: options.since!,
            until: options.until ?? null,
            appId: app?.id ?? null,
            uncertainOnly: options.unknownOnly ?? false,
          }),
          options.json ?? false,
        );
        // On stderr, as a note: stdout stays the report (empty), and --json's `[]`.
        if (printed === 0 && !options.json) {
          console.error(
            options.unknownOnly
              ? 'no messages in this window with an outcome unknown or not recorded yet'
              : 'no messages in this window',
          );
        }
      }, OPENS_NO_SECRET),
  );

/**
 * Prints each reconciliation as it comes (a window's pages are not held whole): as text, blank
 * lines between; with `json`, one JSON array, as JSON.stringify(all, null, 2) would print it.
 * Exit code 3 when any is uncertain. Returns how many it printed.
 */
async function printReconciliations(
  found: Iterable<Reconciliation> | AsyncIterable<Reconciliation>,
  json: boolean,
): Promise<number> {
  let printed = 0;
  for await (const reconciliation of found) {
    const text = json
      ? `${printed === 0 ? '[' : ','}\n  ${JSON.stringify(reconciliation, null, 2).replaceAll('\n', '\n  ')}`
      : `${printed === 0 ? '' : '\n'}${formatReconciliation(reconciliation)}\n`;
    printed++;
    if (isUncertain(reconciliation)) process.exitCode = 3;
    // Nobody reads the rest: the window is not walked to its end for nothing.
    if (!(await print(text))) return printed;
  }
  if (json) await print(printed === 0 ? '[]\n' : '\n]\n');
  return printed;
}

/**
 * Writes to stdout; false once it takes no more (its reader went away). Waits for the write's
 * end: a failed write to a pipe is told in a later turn of the event loop, which a loop over the
 * embedded database, whose queries never wait for one, would not reach before its end.
 */
function print(text: string): Promise<boolean> {
  return new Promise((resolve) => process.stdout.write(text, (error) => resolve(!error)));
}

/** `reconcile --message … --acknowledge`: see acknowledgeUnknown. */
async function acknowledge(herald: Herald, messageId: string): Promise<void> {
  const acknowledged = await acknowledgeUnknown(herald.core.db, CLI_ACTOR.id, messageId);
  if (acknowledged.length === 0 && !(await reconcileMessage(herald.core.db, messageId))) {
    throw new Error(`no message ${messageId}`);
  }
  const attempts = acknowledged.reduce((n, r) => n + r.unknownAttempts, 0);
  console.log(
    acknowledged.length === 0
      ? `no unknown outcome of ${messageId} awaits review`
      : `acknowledged ${attempts} unknown attempt(s) on ${acknowledged.map((r) => r.deliveryId).join(', ')}`,
  );
}

program
  .command('doctor')
  .description('look for stuck or unreviewed states; exit 2 when any holds (for cron or a probe)')
  .option('--json', 'machine-readable output')
  .option(
    '--skip <check>',
    `a check not to run (repeatable): ${SKIPPABLE_CHECKS.join(', ')}`,
    (check: string, previous: DoctorCheck[] = []) => {
      if (!(SKIPPABLE_CHECKS as readonly string[]).includes(check))
        throw new InvalidArgumentError(`not a check that can be skipped: ${check}`);
      return [...previous, check as DoctorCheck];
    },
  )
  .action(async (options: { json?: boolean; skip?: DoctorCheck[] }) => {
    // Read-only, unlike withHerald: a probe must never apply migrations (it reports them pending).
    const config = loadConfig(process.env, OPENS_NO_SECRET);
    assertDoctorThresholds(config);
    const herald = await createHerald({ config, logger: createLogger(config.logLevel, 2), migrate: false });
    try {
      const findings = await runDoctor(
        herald.core.db,
        {
          settleSeconds: config.doctorSettleSeconds,
          dueSeconds: config.doctorDueSeconds,
          leaseGraceSeconds: config.doctorLeaseGraceSeconds,
          unknownReviewSeconds: config.doctorUnknownReviewSeconds,
          lookbackSeconds: config.doctorLookbackSeconds,
        },
        options.skip ?? [],
      );
      console.log(options.json ? JSON.stringify(findings, null, 2) : formatFindings(findings, options.skip));
      // 2, not 1: a probe can tell "something is stuck" from "doctor could not run" (exit 1).
      if (findings.length > 0) process.exitCode = 2;
    } finally {
      await herald.close();
    }
  });

const REPLAY_FLAGS = {
  status: '--status',
  cap: '--cap',
  app: '--app',
  endpoint: '--endpoint',
  since: '--since',
  until: '--until',
  messageIds: '--message',
};

program
  .command('replay')
  .description('start a new delivery cycle for the finished deliveries the filters select (try --dry-run)')
  .requiredOption('--status <status>', 'failed, succeeded or all-finished (never waiting or in-flight ones)')
  .requiredOption('--cap <n>', 'refuse when more deliveries than this are selected', count)
  .option('--app <app>', 'only this app (id or uid)')
  .option('--endpoint <endpoint>', 'only this endpoint (its id, or its uid with --app)')
  .option('--since <time>', 'messages created at or after this ISO time')
  .option('--until <time>', 'and before this ISO time')
  .option('--message <id>', 'only this message, by its id (repeatable)', (v: string, p: string[] = []) => [
    ...p,
    v,
  ])
  .option(
    '--include-unreviewed',
    'also replay failed deliveries whose unknown outcomes await review (sent again, they may apply twice)',
  )
  .option('--dry-run', 'list what would be replayed; change nothing')
  .option('--json', 'machine-readable output')
  .action(
    (options: {
      status: string;
      cap: number;
      app?: string;
      endpoint?: string;
      since?: string;
      until?: string;
      message?: string[];
      includeUnreviewed?: boolean;
      dryRun?: boolean;
      json?: boolean;
    }) =>
      withHerald(async (herald) => {
        const input = await namingFlags(REPLAY_FLAGS, () =>
          parseOrThrow(ReplayIn, {
            status: options.status,
            cap: options.cap,
            dryRun: options.dryRun ?? false,
            app: options.app,
            endpoint: options.endpoint,
            since: options.since,
            until: options.until,
            messageIds: options.message,
            includeUnreviewed: options.includeUnreviewed ?? false,
          }),
        );
        // What the filters name is looked up in the replay itself: one it does not find is a flag's.
        const { result, endpoints } = await namingFlags(REPLAY_FLAGS, () =>
          herald.core.db.transaction((tx) => replay(tx, CLI_ACTOR, input)),
        );
        await liftRests(herald.core.db, endpoints, herald.core.log);
        if (options.json) {
          console.log(JSON.stringify(result, null, 2));
          return;
        }
        for (const d of result.deliveries) console.log([d.messageId, d.endpointId, d.deliveryId].join('\t'));
        console.error(
          result.dryRun
            ? `dry run ${result.id}: ${result.count} deliveries would be replayed` +
                (result.exceedsCap ? ` — more than the cap of ${result.cap}, so a real run would refuse` : '')
            : `replay ${result.id}: ${result.count} deliveries restarted`,
        );
        if (result.payloadGone > 0) {
          // The data does not tell which: both leave the payload null (db/retention.ts, db/messages.ts).
          console.error(
            `${result.payloadGone} more matched but were left: their payload is gone (retention or a content delete)`,
          );
        }
        if (result.unreviewed > 0 && !input.includeUnreviewed) {
          console.error(
            `${result.unreviewed} more matched but were left: their unknown outcomes await review ` +
              '(herald reconcile; --include-unreviewed replays them)',
          );
        }
      }, OPENS_NO_SECRET),
  );

try {
  await program.parseAsync();
} catch (error) {
  // One clear line, no stack: configuration errors and a busy data dir are the usual causes. A
  // database that cannot be reached is said with the setting that names it.
  const { message } = error as Error;
  console.error(
    `herald: ${isConnectFailure(error) ? `DATABASE_URL: could not connect (${message})` : message}`,
  );
  process.exit(1);
}
