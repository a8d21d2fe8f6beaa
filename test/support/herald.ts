// Starts herald in-process against a fresh test database: the API on an ephemeral port and
// (optionally) a worker, with settings sized for tests (short schedule, loopback allowed).

import type { FastifyInstance } from 'fastify';
import { buildApi } from '../../src/api/server.ts';
import { loadConfig } from '../../src/config.ts';
import { createHerald, createLogger, type Herald } from '../../src/herald.ts';
import { freshDatabase, type TestDatabase } from './database.ts';

export const ADMIN_KEY = 'test-admin-key';
export const MASTER_KEY = Buffer.alloc(32, 7).toString('base64');

export function testEnv(url: string, extra: Record<string, string> = {}): Record<string, string> {
  return {
    DATABASE_URL: url,
    HERALD_MASTER_KEY: MASTER_KEY,
    HERALD_ADMIN_KEY: ADMIN_KEY,
    HERALD_ALLOW_PRIVATE_NETWORKS: '127.0.0.0/8,::1/128',
    HERALD_RETRY_SCHEDULE: '0.05,0.05,0.05,0.05,0.05,0.05,0.05',
    HERALD_POLL_INTERVAL_MS: '50',
    HERALD_ATTEMPT_TIMEOUT_MS: '3000',
    HERALD_LEASE_SECONDS: '10',
    LOG_LEVEL: process.env['LOG_LEVEL'] ?? 'silent',
    PORT: '0',
    // Several test files run at once against one server with max_connections = 100.
    HERALD_DB_POOL_SIZE: '6',
    ...extra,
  };
}

export interface TestHerald {
  database: TestDatabase;
  herald: Herald;
  api: FastifyInstance;
  url: string;
  /** fetch against the API with the admin key. */
  call(
    method: string,
    path: string,
    body?: unknown,
    headers?: Record<string, string>,
    // biome-ignore lint/suspicious/noExplicitAny: tests inspect JSON responses loosely
  ): Promise<{ status: number; body: any }>;
  close(): Promise<void>;
}

export interface HeraldOptions {
  worker?: boolean;
  /** Migrate, and seal headers kept in clear, as a server starting does (createHerald's default). */
  migrate?: boolean;
  /** Variables over testEnv's; a function of the test database's URL when they name it. */
  env?: Record<string, string> | ((databaseUrl: string) => Record<string, string>);
}

export async function startTestHerald(
  label: string,
  options: HeraldOptions & { settings?: Record<string, string> } = {},
): Promise<TestHerald> {
  const database = await freshDatabase(label, { settings: options.settings });
  const started = await startHeraldOn(database, options);
  return {
    ...started,
    async close() {
      await started.close();
      await database.drop();
    },
  };
}

/**
 * Another herald (its API, and a worker unless told not to) on a test database that is there
 * already, as a second process would be; its close() leaves the database.
 */
export async function startHeraldOn(
  database: TestDatabase,
  options: HeraldOptions = {},
): Promise<TestHerald> {
  const env = typeof options.env === 'function' ? options.env(database.url) : options.env;
  const config = loadConfig(testEnv(database.url, env));
  const herald = await createHerald({
    config,
    logger: createLogger(config.logLevel),
    migrate: options.migrate ?? false,
  });
  const api = await buildApi(herald.core);
  await api.listen({ port: 0, host: '127.0.0.1' });
  const url = `http://127.0.0.1:${(api.server.address() as { port: number }).port}`;
  if (options.worker !== false) await herald.startWorker();
  return {
    database,
    herald,
    api,
    url,
    async call(method, path, body, headers = {}) {
      const response = await fetch(url + path, {
        method,
        headers: {
          authorization: `Bearer ${ADMIN_KEY}`,
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
          ...headers,
        },
        body: body === undefined ? null : typeof body === 'string' ? body : JSON.stringify(body),
      });
      const text = await response.text();
      return { status: response.status, body: text ? JSON.parse(text) : null };
    },
    async close() {
      await api.close();
      await herald.close();
    },
  };
}
