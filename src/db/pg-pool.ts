// The server adapter: a pg Pool shared by every query, plus one dedicated connection for LISTEN.

import pg from 'pg';
import type { Db, Transaction } from './port.ts';
import { asQueryable } from './port.ts';

export interface PgDbOptions {
  connectionString: string;
  max?: number;
  applicationName?: string;
}

export function createPgDb(options: PgDbOptions): Db {
  const pool = new pg.Pool({
    connectionString: options.connectionString,
    max: options.max ?? 10,
    application_name: options.applicationName ?? 'herald',
    // A connection that dies while idle must not crash the process; the pool replaces it.
    idleTimeoutMillis: 30_000,
  });
  pool.on('error', () => {});
  const listeners: pg.Client[] = [];

  return {
    kind: 'pg',
    query: asQueryable(pool).query,
    async transaction<T>(fn: (tx: Transaction) => Promise<T>): Promise<T> {
      const client = await pool.connect();
      let broken: Error | undefined;
      try {
        await client.query('begin');
        const tx = asQueryable(client);
        const result = await fn({ query: tx.query, script: async (sql) => void (await client.query(sql)) });
        await client.query('commit');
        return result;
      } catch (error) {
        broken = error as Error;
        await client.query('rollback').catch(() => {});
        throw error;
      } finally {
        // A connection that failed mid-transaction may be unusable: destroy it rather than reuse it.
        client.release(isConnectionError(broken) ? broken : undefined);
      }
    },
    async listen(channel, onNotify) {
      const client = new pg.Client({ connectionString: options.connectionString });
      client.on('error', () => {});
      await client.connect();
      client.on('notification', (n) => {
        if (n.channel === channel) onNotify(n.payload ?? '');
      });
      await client.query(`listen ${pg.escapeIdentifier(channel)}`);
      listeners.push(client);
      return async () => {
        listeners.splice(listeners.indexOf(client), 1);
        await client.end().catch(() => {});
      };
    },
    async close() {
      await Promise.all(listeners.splice(0).map((c) => c.end().catch(() => {})));
      await pool.end();
    },
  };
}

function isConnectionError(error: Error | undefined): error is Error {
  if (!error) return false;
  const code = (error as { code?: string }).code;
  // SQLSTATE class 08 is "connection exception"; node errors have no SQLSTATE at all.
  return code === undefined || code.startsWith('08') || code === '57P01';
}
