// What the database server said of a failed statement, told apart without its words: the
// severity PostgreSQL sends (node-postgres and PGlite read its field S) is translated with the
// server's lc_messages — "FEHLER", "ERREUR" — where its SQLSTATE is not.

const SQLSTATE = /^[0-9A-Z]{5}$/;
/** SQLSTATEs of the errors after which the server ends the session: shutdown, connection. */
const ENDS_SESSION = /^(57P0|08)/;

/**
 * The SQLSTATE of a statement the server refused with the session still open (an ERROR, in any
 * language), or null: no answer from the server at all (a socket error, the client's own
 * deadline), or one that ended the session (FATAL, PANIC).
 */
export function refusedStatementCode(error: unknown): string | null {
  const { severity, code } = (error ?? {}) as { severity?: unknown; code?: unknown };
  if (typeof severity !== 'string' || typeof code !== 'string' || !SQLSTATE.test(code)) return null;
  if (severity === 'FATAL' || severity === 'PANIC' || ENDS_SESSION.test(code)) return null;
  return code;
}

/**
 * An error that says the server's named statements are not what the client believes: one it does
 * not have (26000), one it has already (42P05), a cached plan whose result changed (0A000).
 */
export function namedStatementsStale(error: unknown): boolean {
  return ['26000', '42P05', '0A000'].includes(refusedStatementCode(error) ?? '');
}

/** What a server says at connect when it will not take the session (FATAL, before any statement). */
const REFUSED_AT_CONNECT = new Set([
  '3D000', // the database does not exist
  '28000', // no pg_hba.conf entry, or another authorization failure
  '28P01', // a wrong password
  '42501', // no CONNECT privilege on the database
  '53300', // too many connections
  '57P03', // starting up or shutting down
]);

/**
 * An error that says no connection to the database could be made: its address refused or never
 * answered, its name did not resolve, or the server refused the session. Told apart from a failure
 * of a session that was open, so that a command can say which setting to look at.
 */
export function isConnectFailure(error: unknown): boolean {
  const { syscall, severity, code, message } = (error ?? {}) as Record<string, unknown>;
  if (syscall === 'connect' || syscall === 'getaddrinfo') return true;
  if (severity === 'FATAL' && typeof code === 'string' && REFUSED_AT_CONNECT.has(code)) return true;
  // node-postgres's own, told by its words only: no connection within its connect timeout.
  return typeof message === 'string' && /^timeout expired$|due to connection timeout/.test(message);
}
