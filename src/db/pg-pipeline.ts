// One PostgreSQL connection in pipeline mode (Db.pipeline): statements are written to it as they
// come, without waiting for the answers to the ones before them, and the server runs them in
// order. node-postgres ends each with its own Sync, so each is its own transaction and an error
// skips nothing but its own statement.
//
// Why: a group commit writes one batch at a time, and between two writes the server sat idle
// while the API process read the answer, handed results to callers and sent the next batch. With
// a second write already on the wire, the server goes on to it as soon as the first has committed.

import pg from 'pg';
import { preparingQueryable, type Queryable } from './port.ts';

export interface PgPipeline extends Queryable {
  close(): Promise<void>;
}

/**
 * Connected on first use, and again after the connection broke. The statements on the wire when
 * it broke fail with it: each caller is told, and none is sent again, as it may have committed.
 */
export function createPgPipeline(clientConfig: pg.ClientConfig): PgPipeline {
  let client: pg.Client | null = null;
  let connecting: Promise<pg.Client> | null = null;
  let closed = false;

  async function connect(): Promise<pg.Client> {
    const fresh = new pg.Client({ ...clientConfig, pipeline: true });
    // A broken connection is dropped, for the next statement to open another. Without a listener
    // the 'error' event would kill the process; the statements on it fail on their own.
    const drop = () => {
      if (client === fresh) client = null;
    };
    fresh.on('error', drop);
    fresh.on('end', drop);
    try {
      await fresh.connect();
    } catch (error) {
      await fresh.end().catch(() => {});
      throw error;
    }
    client = fresh;
    return fresh;
  }

  /** The connection being opened: statements that come meanwhile wait for the same one. */
  function connected(): Promise<pg.Client> {
    connecting ??= connect().finally(() => {
      connecting = null;
    });
    return connecting;
  }

  return {
    async query<R>(text: string, params?: readonly unknown[], prepareAs?: string) {
      if (closed) throw new Error('the pipelined connection is closed');
      return preparingQueryable(client ?? (await connected())).query<R>(text, params, prepareAs);
    },
    async close() {
      closed = true;
      const open = client ?? (await connecting?.catch(() => null)) ?? null;
      client = null;
      await open?.end();
    },
  };
}
