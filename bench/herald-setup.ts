// herald as the benchmark runs it: one environment (loopback allowed, rate limit off, a random
// master and admin key), an in-process instance (createHerald + buildApi on 127.0.0.1) for the
// API, the library face and set-up, and helpers that create apps, endpoints and sources through
// the public HTTP API, as a user would.

import crypto from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { Pool } from 'undici';
import { buildApi } from '../src/api/server.ts';
import { loadConfig } from '../src/config.ts';
import { createHerald, createLogger, type Herald } from '../src/herald.ts';
import { PEER_LOCAL_QUEUE } from './config.ts';
import { closedLoop } from './load.ts';

const ADMIN_KEY = `bench-admin-${crypto.randomBytes(12).toString('hex')}`;
const MASTER_KEY = crypto.randomBytes(32).toString('base64');

/** Objects set-up creates at once through the API (and its connections to it). */
const SET_UP_CONCURRENCY = 8;

/** The settings every herald of the run gets, in-process or as a `herald worker` process. */
export function heraldEnv(databaseUrl: string, concurrency: number): Record<string, string> {
  return {
    DATABASE_URL: databaseUrl,
    HERALD_MASTER_KEY: MASTER_KEY,
    HERALD_ADMIN_KEY: ADMIN_KEY,
    HERALD_ALLOW_PRIVATE_NETWORKS: '127.0.0.0/8',
    // The benchmark is the only client; the per-key limit (200/s by default) would cap it.
    HERALD_API_RATE_LIMIT: '0',
    // Every bench endpoint is on one origin (the local receiver). The peer keeps `concurrency`
    // requests on the wire and locks up to PEER_LOCAL_QUEUE more jobs ahead of them; herald keeps
    // as many requests on the wire (its connections to the origin) and holds as many leases as the
    // peer holds jobs: leases wait inside herald for a connection, and each claim and outcome
    // write carries a larger batch.
    HERALD_CONNECTIONS_PER_ORIGIN: String(concurrency),
    HERALD_WORKER_CONCURRENCY: String(concurrency + PEER_LOCAL_QUEUE),
    LOG_LEVEL: 'error',
  };
}

export interface InProcessHerald {
  herald: Herald;
  api: FastifyInstance;
  /** The API as set-up uses it (apps, endpoints, sources), with the admin key. */
  call(
    method: 'GET' | 'POST' | 'PATCH',
    path: string,
    body?: unknown,
  ): Promise<{ status: number; body: unknown }>;
  close(): Promise<void>;
}

/** createHerald({config}) + buildApi, listening on an ephemeral loopback port; no worker. */
export async function startInProcess(
  env: Record<string, string>,
  poolSize: number,
): Promise<InProcessHerald> {
  const config = loadConfig({ ...env, HERALD_DB_POOL_SIZE: String(poolSize) });
  const herald = await createHerald({ config, logger: createLogger(config.logLevel, 2), migrate: false });
  const api = await buildApi(herald.core);
  await api.listen({ port: 0, host: '127.0.0.1' });
  const url = `http://127.0.0.1:${(api.server.address() as { port: number }).port}`;
  const client = new Pool(url, { connections: SET_UP_CONCURRENCY, keepAliveTimeout: 60_000 });
  return {
    herald,
    api,
    async call(method, path, body) {
      const response = await client.request({
        method,
        path,
        headers: {
          authorization: `Bearer ${ADMIN_KEY}`,
          ...(body === undefined ? {} : { 'content-type': 'application/json' }),
        },
        body: body === undefined ? null : JSON.stringify(body),
      });
      const text = await response.body.text();
      return { status: response.statusCode, body: text ? JSON.parse(text) : null };
    },
    async close() {
      await client.close();
      await api.close();
      await herald.close();
    },
  };
}

function expect(result: { status: number; body: unknown }, status: number, what: string): void {
  if (result.status !== status) {
    throw new Error(`${what}: expected ${status}, got ${result.status} ${JSON.stringify(result.body)}`);
  }
}

/** An app (by uid) with `endpoints` endpoints, all pointing at `url`; returns the endpoint ids. */
export async function createAppWithEndpoints(
  h: InProcessHerald,
  uid: string,
  endpoints: number,
  url: string,
): Promise<string[]> {
  expect(await h.call('POST', '/api/v1/app', { name: uid, uid }), 201, `create app ${uid}`);
  const ids: string[] = [];
  const made = await closedLoop(endpoints, SET_UP_CONCURRENCY, 300_000, async (i) => {
    const created = await h.call('POST', `/api/v1/app/${uid}/endpoint`, { url, description: `bench ${i}` });
    expect(created, 201, `create endpoint ${i} of ${uid}`);
    ids.push((created.body as { id: string }).id);
  });
  if (made.truncated) throw new Error(`created only ${made.done} of ${endpoints} endpoints of ${uid}`);
  return ids;
}

/** A new API key that may only publish, and only to `app`; returns the token. */
export async function createPublishKey(h: InProcessHerald, app: string): Promise<string> {
  const created = await h.call('POST', '/api/v1/api-key', {
    name: `publish ${app}`,
    scopes: ['publish'],
    apps: [app],
  });
  expect(created, 201, `create a publish key for ${app}`);
  return (created.body as { key: string }).key;
}

/** A standard-webhooks inbound source relaying into `app`; returns its uid and raw HMAC key. */
export async function createSource(
  h: InProcessHerald,
  uid: string,
  app: string,
  eventType: string,
): Promise<{ uid: string; key: Buffer }> {
  const key = crypto.randomBytes(24);
  const created = await h.call('POST', '/api/v1/source', {
    uid,
    scheme: 'standard-webhooks',
    secret: `whsec_${key.toString('base64')}`,
    app,
    eventType,
  });
  expect(created, 201, `create source ${uid}`);
  return { uid, key };
}
