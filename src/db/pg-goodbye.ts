// Ending a PostgreSQL connection with a deadline. A client's end() says goodbye and waits for the
// server to close its side; a server gone without a reset (a failover, a NAT's timeout, a network
// that went silent) never does, and the kernel waits for it for as long as it retransmits, minutes.
// A process stopping on SIGTERM would hang that long, or until it was killed with its attempts'
// outcomes unwritten. Past the deadline the socket is dropped: nothing is lost by it, as the
// connection had no more work.

import type pg from 'pg';
import { answeredWithin, NoAnswerInTime } from './answered-within.ts';

/** A server answers a goodbye at once; a second is one that will not answer. */
const GOODBYE_MS = 1_000;

/** Whether `done` settled within the goodbye's deadline (its own failure is thrown). */
function settledInTime(done: Promise<unknown>): Promise<boolean> {
  return answeredWithin(done, GOODBYE_MS).then(
    () => true,
    (error: unknown) => {
      if (error instanceof NoAnswerInTime) return false;
      throw error;
    },
  );
}

/** Ends `client`; past the deadline, drops its socket. Never rejects. */
export async function endConnection(client: pg.Client): Promise<void> {
  const ended = client.end().catch(() => {});
  if (await settledInTime(ended)) return;
  client.connection.stream.destroy();
  await ended;
}

/**
 * Ends `pool`; past the deadline, drops every connection it still has, `clients` being those it
 * made and has not removed. (pool.end() resolves once no connection is in use: it ends the idle
 * ones in the background, and each is removed only once the server has answered its goodbye.)
 */
export async function endPool(pool: pg.Pool, clients: ReadonlySet<pg.Client>): Promise<void> {
  const allRemoved = new Promise<void>((resolve) => {
    const check = () => {
      if (clients.size > 0) return;
      pool.off('remove', check);
      resolve();
    };
    pool.on('remove', check);
    check();
  });
  const ended = Promise.all([pool.end(), allRemoved]);
  if (await settledInTime(ended)) return;
  for (const client of clients) client.connection.stream.destroy();
  await ended;
}
