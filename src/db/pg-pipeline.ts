// One PostgreSQL connection in pipeline mode (Db.pipeline): statements are written to it as they
// come, without waiting for the answers to the ones before them, and the server runs them in
// order. node-postgres ends each with its own Sync, so each is its own transaction and an error
// skips nothing but its own statement.
//
// Why: a group commit writes one batch at a time, and between two writes the server sat idle
// while the API process read the answer, handed results to callers and sent the next batch. With
// a second write already on the wire, the server goes on to it as soon as the first has committed.

import pg from 'pg';
import { endConnection } from './pg-goodbye.ts';
import { type Naming, type Pipeline, preparingQueryable, type Queryable } from './port.ts';
import { namedStatementsStale, refusedStatementCode } from './server-error.ts';

/** A write handed to a pipeline its owner has closed (the process is stopping): not written. */
export class PipelineClosedError extends Error {}

/**
 * Connected on first use, and again after the connection broke. The statements on the wire when
 * it broke fail with it: each caller is told, and none is sent again, as it may have committed
 * (a statement cut off by the client's query deadline breaks the connection too: those behind it
 * on the wire fail with it, and may have committed).
 */
export function createPgPipeline(
  clientConfig: pg.ClientConfig,
  options: { onClose?: () => void; naming?: Naming } = {},
): Pipeline {
  const { onClose, naming } = options;
  /** The connection in use, with the Queryable its statements go through (made once per connection). */
  interface Open {
    client: pg.Client;
    queryable: Queryable;
  }
  let open: Open | null = null;
  let connecting: Promise<Open> | null = null;
  let closed = false;

  /** Takes a connection out of use (once): the next statement opens another. */
  function retire(broken: pg.Client): void {
    if (open?.client !== broken) return;
    open = null;
    void endConnection(broken);
  }

  async function connect(): Promise<Open> {
    const fresh = new pg.Client({ ...clientConfig, pipeline: true });
    // Without a listener the 'error' event would kill the process; the statements on the
    // connection fail on their own.
    fresh.on('error', () => retire(fresh));
    fresh.on('end', () => retire(fresh));
    try {
      await fresh.connect();
    } catch (error) {
      await endConnection(fresh);
      throw error;
    }
    open = { client: fresh, queryable: preparingQueryable(fresh, naming) };
    return open;
  }

  /** The connection being opened: statements that come meanwhile wait for the same one. */
  function connected(): Promise<Open> {
    connecting ??= connect().finally(() => {
      connecting = null;
    });
    return connecting;
  }

  return {
    async query<R>(text: string, params?: readonly unknown[], prepareAs?: string) {
      if (closed) throw new PipelineClosedError('the pipelined connection is closed');
      const current = open ?? (await connected());
      try {
        return await current.queryable.query<R>(text, params, prepareAs);
      } catch (error) {
        if (unfitForMore(error)) retire(current.client);
        throw error;
      }
    },
    async close() {
      if (closed) return;
      closed = true;
      onClose?.();
      const last = open ?? (await connecting?.catch(() => null)) ?? null;
      open = null;
      if (last) await endConnection(last.client);
    },
  };
}

/**
 * An error after which the connection must not take more statements: it broke (no severity: a
 * socket error, the client's query deadline; FATAL: the server ended it), or the server's named
 * statements are no longer what the client believes (a Parse that failed, a statement whose
 * result changed under a migration). Its successor prepares them afresh.
 */
function unfitForMore(error: unknown): boolean {
  return refusedStatementCode(error) === null || namedStatementsStale(error);
}
