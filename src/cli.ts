#!/usr/bin/env node
// The `herald` command. `serve` runs the API and a worker in one process (the only way to use
// the embedded database, which one process owns at a time); `api` and `worker` run one role each
// against a PostgreSQL server; `migrate` applies migrations; `keys` manages API keys.

import { Command, InvalidArgumentError } from 'commander';
import { buildApi } from './api/server.ts';
import { type HeraldConfig, loadConfig } from './config.ts';
import { generateMasterKey } from './crypto/master-key.ts';
import { listApiKeys, type Scope } from './db/api-keys.ts';
import { migrate } from './db/migrate.ts';
import { createApiKey, ensureLocalAdminKey, revokeKey } from './engine/api-keys.ts';
import { ConfigError } from './errors.ts';
import { createHerald, createLogger, type Herald } from './herald.ts';
import { reencryptSecrets } from './ops/reencrypt.ts';

type Role = { api: boolean; worker: boolean };

function configWith(overrides: { port?: string; host?: string }): Readonly<HeraldConfig> {
  return loadConfig({
    ...process.env,
    ...(overrides.port ? { PORT: overrides.port } : {}),
    ...(overrides.host ? { HOST: overrides.host } : {}),
  });
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
  const api = role.api ? await buildApi(herald.core) : null;
  if (api) await api.listen({ port: config.port, host: config.host });
  if (role.worker) await herald.startWorker();
  log.info(
    {
      api: api ? `http://${config.host}:${(api.server.address() as { port: number }).port}` : null,
      worker: role.worker,
      database: config.databaseUrl ? 'postgres' : `embedded (${config.dataDir})`,
    },
    'herald started',
  );

  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) {
      // A second signal means "now": leases of attempts still in flight will be recovered.
      log.warn({ signal }, 'stopping at once');
      process.exit(1);
    }
    stopping = true;
    log.info({ signal }, 'stopping: no new work; finishing attempts in flight');
    try {
      await api?.close();
      await herald.close();
      process.exit(0);
    } catch (error) {
      log.error({ err: (error as Error).message }, 'could not stop cleanly');
      process.exit(1);
    }
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
}

async function withHerald<T>(fn: (herald: Herald) => Promise<T>): Promise<T> {
  // What these commands print on stdout is their answer (a key, a list): logs go to stderr.
  const config = loadConfig();
  const herald = await createHerald({ config, logger: createLogger(config.logLevel, 2), migrate: false });
  try {
    await migrate(herald.core.db);
    return await fn(herald);
  } finally {
    await herald.close();
  }
}

const scopeList = (value: string, previous: Scope[] = []): Scope[] => {
  if (!['admin', 'publish', 'read'].includes(value))
    throw new InvalidArgumentError('expected admin, publish or read');
  return [...previous, value as Scope];
};

const program = new Command('herald').description('A webhook gateway on PostgreSQL').showHelpAfterError();

for (const [name, role, text] of [
  ['serve', { api: true, worker: true }, 'run the API and a delivery worker in one process'],
  ['api', { api: true, worker: false }, 'run the HTTP API only (needs DATABASE_URL)'],
  ['worker', { api: false, worker: true }, 'run a delivery worker only (needs DATABASE_URL)'],
] as const) {
  program
    .command(name)
    .description(text)
    .option('-p, --port <port>', 'listen port (PORT)')
    .option('--host <host>', 'listen address (HOST)')
    .action((options) => run(role, options));
}

program
  .command('migrate')
  .description('apply pending database migrations')
  .action(() =>
    withHerald(async () => {
      console.log('migrations are up to date');
    }),
  );

const keys = program.command('keys').description('manage API keys and the master key');
keys
  .command('create')
  .description('create an API key and print it once')
  .requiredOption('--scope <scope>', 'admin, publish or read (repeatable)', scopeList)
  .option('--name <name>', 'a label for the key', 'cli')
  .option('--app <app>', 'restrict the key to this app id (repeatable)', (v: string, p: string[] = []) => [
    ...p,
    v,
  ])
  .action((options: { scope: Scope[]; name: string; app?: string[] }) =>
    withHerald(async (herald) => {
      const created = await herald.core.db.transaction((tx) =>
        createApiKey(tx, 'cli', { name: options.name, scopes: options.scope, appIds: options.app ?? null }),
      );
      console.log(created.key);
      console.error(`created ${created.id} (${created.scopes.join(', ')}); the key is shown only once`);
    }),
  );
keys
  .command('list')
  .description('list API keys (never the keys themselves)')
  .action(() =>
    withHerald(async (herald) => {
      for (const key of await listApiKeys(herald.core.db)) {
        console.log(
          [key.id, key.prefix, key.scopes.join(','), key.name, key.revokedAt ? 'revoked' : 'live'].join('\t'),
        );
      }
    }),
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
    }),
  );
keys
  .command('reencrypt')
  .description('re-encrypt stored secrets under HERALD_MASTER_KEY (old keys in HERALD_PREVIOUS_MASTER_KEYS)')
  .action(() =>
    withHerald(async (herald) => {
      const report = await reencryptSecrets(herald.core.db, herald.core.box);
      console.log(`examined ${report.examined} secrets, re-encrypted ${report.reencrypted}`);
      if (report.unreadable.length > 0) {
        console.error(`no configured key opens endpoint_secret rows ${report.unreadable.join(', ')}`);
        process.exitCode = 1;
      }
    }),
  );
keys
  .command('master')
  .description('print a new random master key (base64) for HERALD_MASTER_KEY')
  .action(() => console.log(generateMasterKey()));

try {
  await program.parseAsync();
} catch (error) {
  // One clear line, no stack: configuration errors and a busy data dir are the usual causes.
  console.error(`herald: ${(error as Error).message}`);
  process.exit(1);
}
