// The server adapter: a pg Pool shared by every query, plus one dedicated connection for every
// LISTEN channel (pg-listener.ts) and one for every pipeline (pg-pipeline.ts).

import crypto from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { endPool } from './pg-goodbye.ts';
import { createPgListener } from './pg-listener.ts';
import { createPgPipeline } from './pg-pipeline.ts';
import type { Db, Pipeline, Transaction } from './port.ts';
import { preparingQueryable } from './port.ts';
import { namedStatementsStale } from './server-error.ts';

export interface PgDbOptions {
  connectionString: string;
  /** Where LISTEN connects, when not `connectionString` (which a transaction pooler may serve). */
  listenConnectionString?: string | undefined;
  max?: number;
  applicationName?: string;
  /** false: no named statements (behind a pooler that cannot keep them). */
  prepare?: boolean;
  /**
   * Called when the LISTEN connection is lost and when it is back (so a waiter can catch up); and,
   * with `checkHearing`, with what the check found: `hearing`, or `deaf` when a NOTIFY sent through
   * the pool did not arrive.
   */
  onListenState?: (state: 'lost' | 'restored' | 'hearing' | 'deaf', error?: Error) => void;
  /** Each time the LISTEN connection is made, check that it hears a NOTIFY sent through the pool. */
  checkHearing?: boolean;
  /** Each query's deadline (QUERY_TIMEOUT_MS by default); 0: none (migrations). */
  queryTimeoutMs?: number;
}

// A server that stops answering without closing the connection must not hang herald forever:
// connecting, and every query, has a deadline; TCP keep-alive notices a dead peer. The query's is
// the client's own: when it passes, pg gives up on the connection, and the server may still be
// running the statement.
const CONNECT_TIMEOUT_MS = 5_000;
const QUERY_TIMEOUT_MS = 60_000;
const LISTEN_RETRY_MAX_MS = 5_000;
/** How long a NOTIFY sent through the pool may take to reach the LISTEN connection. */
const HEARING_TIMEOUT_MS = 3_000;
const HEARING_CHANNEL = 'herald_listen_check';

export function createPgDb(options: PgDbOptions): Db {
  const clientConfig = {
    connectionString: options.connectionString,
    application_name: options.applicationName ?? 'herald',
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    query_timeout: options.queryTimeoutMs ?? QUERY_TIMEOUT_MS,
    // Probes after 10 s of silence, not the system's 2 hours: the listening connection sends
    // nothing, and a peer gone without a reset (a NAT's timeout, a failover) would otherwise take
    // its notifications with it unnoticed.
    keepAlive: true,
    keepAliveInitialDelayMillis: 10_000,
  };
  const pool = new pg.Pool({ ...clientConfig, max: options.max ?? 10, idleTimeoutMillis: 30_000 });
  // A connection that dies while idle must not crash the process; the pool replaces it.
  pool.on('error', () => {});
  // Those that close() drops if they do not end in time.
  const connections = new Set<pg.Client>();
  pool.on('connect', (client) => connections.add(client));
  pool.on('remove', (client) => connections.delete(client));
  const naming = {
    prepare: options.prepare ?? true,
    lostHint: 'behind a pooler in transaction mode? set HERALD_DB_PREPARE=false',
  };
  const pipelines = new Set<Pipeline>();
  const listener = createPgListener({
    clientConfig: {
      ...clientConfig,
      connectionString: options.listenConnectionString ?? options.connectionString,
    },
    onState: (state, error) => {
      // A check under way when the connection dropped proves nothing: the one after its return counts.
      if (state === 'lost') connection++;
      options.onListenState?.(state, error);
      if (state === 'restored') checkHearing();
    },
    retryMaxMs: LISTEN_RETRY_MAX_MS,
  });
  let listening = false;
  /** Counts the LISTEN connections lost: a check's verdict stands only on the one it began on. */
  let connection = 0;
  let closed = false;

  // Through a transaction-mode pooler, LISTEN is accepted and then hears nothing: its session is
  // lent to other clients between statements. Nothing fails — wake-ups fall back to polling and
  // cached rows to their age limit — so the listener is asked to hear a NOTIFY of the pool's. The
  // check's channel, once listened on, stays with the others for the connection's life.
  let expected: { token: string; hear: () => void } | null = null;
  let checkChannel: Promise<unknown> | null = null;
  function checkHearing(): void {
    if (!options.checkHearing) return;
    const token = crypto.randomUUID();
    const heard = new Promise<boolean>((resolve) => {
      expected = { token, hear: () => resolve(true) };
    });
    const on = connection;
    void (async () => {
      checkChannel ??= listener
        .listen(HEARING_CHANNEL, (payload) => {
          if (payload === expected?.token) expected.hear();
        })
        .catch((error: unknown) => {
          checkChannel = null;
          throw error;
        });
      await checkChannel;
      await pool.query('select pg_notify($1, $2)', [HEARING_CHANNEL, token]);
      const inTime = await Promise.race([heard, sleep(HEARING_TIMEOUT_MS, false, { ref: false })]);
      if (!closed && on === connection) options.onListenState?.(inTime ? 'hearing' : 'deaf');
    })().catch(() => {
      // The connection went away meanwhile: its return runs the check again.
    });
  }

  return {
    kind: 'pg',
    query: preparingQueryable(pool, naming).query,
    async transaction<T>(fn: (tx: Transaction) => Promise<T>): Promise<T> {
      const client = await pool.connect();
      let broken: Error | undefined;
      // The pool stops listening for a client's errors while it is checked out: without a listener
      // here, a connection lost mid-transaction would be an unhandled 'error' event and kill the
      // process. The failing query rejects on its own; this only keeps the event handled.
      const onError = (error: Error) => {
        broken ??= error;
      };
      client.on('error', onError);
      try {
        await client.query('begin');
        const tx = preparingQueryable(client, naming);
        const result = await fn({ query: tx.query, script: async (sql) => void (await client.query(sql)) });
        await client.query('commit');
        return result;
      } catch (error) {
        broken = error as Error;
        await client.query('rollback').catch(() => {});
        throw error;
      } finally {
        client.off('error', onError);
        // A connection that failed mid-transaction may be unusable, or its named statements no
        // longer what the client believes (a migration changed a result, a pooler lost one):
        // destroy it rather than reuse it — pool.query already does so for any failed statement.
        client.release(
          broken && (isConnectionError(broken) || namedStatementsStale(broken)) ? broken : undefined,
        );
      }
    },
    async listen(channel, onNotify) {
      const stop = await listener.listen(channel, onNotify);
      if (!listening) {
        listening = true;
        checkHearing();
      }
      return stop;
    },
    pipeline() {
      const pipeline = createPgPipeline(clientConfig, { naming, onClose: () => pipelines.delete(pipeline) });
      pipelines.add(pipeline);
      return pipeline;
    },
    async close() {
      closed = true;
      // At once: a database gone silent has each of them wait a goodbye's deadline.
      await Promise.all([
        listener.close(),
        ...[...pipelines].map((p) => p.close()),
        endPool(pool, connections),
      ]);
    },
  };
}

function isConnectionError(error: Error | undefined): error is Error {
  if (!error) return false;
  const code = (error as { code?: string }).code;
  // SQLSTATE class 08 is "connection exception"; node errors have no SQLSTATE at all.
  return code === undefined || code.startsWith('08') || code === '57P01';
}
