// The Db port: the one seam between herald and its database. Two adapters implement it (pg Pool
// for a PostgreSQL server, PGlite for the embedded default); everything above speaks only this.

export interface QueryResult<R> {
  rows: R[];
  rowCount: number;
}

/** Anything that runs SQL: the pool, a transaction, or a caller's own pg client. */
export interface Queryable {
  /**
   * `prepareAs` names a hot statement: on herald's own PostgreSQL connections (and on a caller's
   * node-postgres client when asked) it is parsed and analysed once per connection, not on every
   * call (its text must never vary under one name). Other adapters run it as a plain statement.
   */
  query<R = Record<string, unknown>>(
    text: string,
    params?: readonly unknown[],
    prepareAs?: string,
  ): Promise<QueryResult<R>>;
}

/** A connection of its own, sending statements without waiting for answers (Db.pipeline). */
export interface Pipeline extends Queryable {
  close(): Promise<void>;
}

/** A transaction handle; `script` runs several statements without parameters (migrations). */
export interface Transaction extends Queryable {
  script(sql: string): Promise<void>;
}

export interface Db extends Queryable {
  readonly kind: 'pg' | 'pglite';
  /** Runs `fn` in one transaction: COMMIT when it resolves, ROLLBACK when it throws. */
  transaction<T>(fn: (tx: Transaction) => Promise<T>): Promise<T>;
  /** Subscribes to NOTIFY on `channel`; resolves to an unsubscribe function. */
  listen(channel: string, onNotify: (payload: string) => void): Promise<() => Promise<void>>;
  /**
   * A connection of its own for autocommit statements, each sent without waiting for the answers
   * to the ones before it (PostgreSQL's pipelining): the server runs them one after another, each
   * as its own transaction, and starts the next as soon as the one before has committed, not once
   * herald has read that answer and sent another. A statement that fails fails alone. For the
   * group commits' writes (group-commit.ts). Each call makes another, connected on first use and
   * closed by its owner or with the Db. The embedded database runs one statement at a time
   * anyway: its pipeline is itself.
   */
  pipeline(): Pipeline;
  close(): Promise<void>;
}

/** A pg client or PGlite result normalised to {rows, rowCount}. */
export interface ForeignQueryable {
  query(
    text: string,
    params?: unknown[],
  ): Promise<{ rows: unknown[]; rowCount?: number | null; affectedRows?: number }>;
}

/**
 * Adapts a caller's own client (pg Client/PoolClient, PGlite transaction) to the port; it runs
 * every statement as a plain one: a library leaves nothing behind on a connection it does not own,
 * and a caller's driver or pooler may not support named statements. (A caller may ask otherwise
 * of a node-postgres client: preparingQueryable with a name prefix.)
 */
export function asQueryable(client: ForeignQueryable): Queryable {
  return {
    async query<R>(text: string, params?: readonly unknown[]) {
      const result = await client.query(text, params as unknown[] | undefined);
      return {
        rows: result.rows as R[],
        rowCount: result.rowCount ?? result.affectedRows ?? result.rows.length,
      };
    },
  };
}

/**
 * A node-postgres Client or PoolClient: it takes a query as a config object, with a name to prepare
 * it under. (Its constructor sets `connectionParameters`; PGlite and other drivers have none.)
 */
export function isNodePostgresClient(client: ForeignQueryable): client is ForeignQueryable & NamingClient {
  return typeof client === 'object' && client !== null && 'connectionParameters' in client;
}

/** A client that takes a query as a config object, with a name to prepare it under (node-postgres). */
interface NamingClient {
  query(config: { text: string; values?: unknown[] | undefined; name?: string | undefined }): Promise<{
    rows: unknown[];
    rowCount: number | null;
  }>;
}

/** How a pg connection takes herald's named statements (see preparingQueryable). */
export interface Naming {
  /** On a connection herald does not own, keeps its names apart from the owner's. */
  prefix?: string;
  /** false: every statement unnamed (behind a pooler that cannot keep named ones). */
  prepare?: boolean;
  /** Added to the error when a named statement was lost or met another's: what to do about it. */
  lostHint?: string;
}

/** SQLSTATEs of a named statement another session prepared, or this one no longer has. */
const LOST_NAMED_STATEMENT = new Set(['42P05', '26000']);

/** A pg Pool or client as the port, with named statements prepared once per connection. */
export function preparingQueryable(client: NamingClient, naming: Naming = {}): Queryable {
  const { prefix = '', prepare = true, lostHint } = naming;
  return {
    async query<R>(text: string, params?: readonly unknown[], prepareAs?: string) {
      const name = prepareAs === undefined || !prepare ? undefined : `${prefix}${prepareAs}`;
      try {
        const result = await client.query({ text, values: params as unknown[] | undefined, name });
        return { rows: result.rows as R[], rowCount: result.rowCount ?? result.rows.length };
      } catch (error) {
        // Behind a transaction-mode pooler the session is not this connection's own: the error
        // alone ("prepared statement … already exists") does not say so.
        const code = (error as { code?: string }).code;
        if (name !== undefined && lostHint && code && LOST_NAMED_STATEMENT.has(code))
          (error as Error).message += ` (${lostHint})`;
        throw error;
      }
    },
  };
}
