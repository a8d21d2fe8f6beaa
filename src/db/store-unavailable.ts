// Errors that mean the database could not do a write now — not that the write was wrong: the API
// answers them 503 to retry (src/api/server.ts), and so does the library on its own pool.

import { PipelineClosedError } from './pg-pipeline.ts';

/**
 * Errors that mean the database could not do it now: it could not be reached, takes no writes or
 * connections now, ran out of disk or memory, or rolled the transaction back to break a deadlock
 * (40P01) or a serialization conflict (40001). The client should retry later.
 */
export function isStoreUnavailable(error: unknown): boolean {
  const code = (error as { code?: string }).code ?? '';
  return (
    [
      'ECONNREFUSED',
      'ECONNRESET',
      'ETIMEDOUT',
      'EPIPE',
      '55P03', // lock_not_available: a publish waited past its lock timeout (migration 0038)
      '57014', // query_canceled: past a statement timeout (a deletion's purge, history-purge.ts)
      '57P01', // admin_shutdown
      '57P02', // crash_shutdown: another backend crashed, the server restarts
      '57P03', // cannot_connect_now: starting up or shutting down
      '53300', // too_many_connections
      '53100', // disk_full
      '53200', // out_of_memory
      '25006', // read_only_sql_transaction: a standby after a failover, or a database set read-only
      '40P01',
      '40001',
    ].includes(code) ||
    code.startsWith('08') ||
    // object_not_in_prerequisite_state is also a statement's own mistake; at connect it is a
    // database that takes no connections now (ALTER DATABASE … ALLOW_CONNECTIONS false).
    (code === '55000' && /not currently accepting connections/.test((error as Error).message ?? '')) ||
    // The group commit's pipeline, closed as the process stops.
    error instanceof PipelineClosedError ||
    // node-postgres's own, told by their words only: a connection lost or not had in time, and a
    // statement past the client's deadline (HERALD_DB_QUERY_TIMEOUT_MS), whose commit is unknown
    // — a retry with the same idempotency key is safe, where a 500 tells a client not to retry.
    /Connection terminated|connection timeout|Query read timeout|timeout exceeded when trying to connect/i.test(
      (error as Error).message ?? '',
    )
  );
}
