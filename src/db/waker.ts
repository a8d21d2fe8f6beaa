// Waking workers after a commit. A NOTIFY inside a publishing transaction makes PostgreSQL take a
// database-wide lock at COMMIT and hold it through the commit's WAL flush, which serialises every
// publishing transaction and defeats group commit. So the API and ingest paths commit first and
// then wake the workers with a separate NOTIFY, coalesced: while one is on its way, further
// wake-ups collapse into one more. (The library path inside a caller's transaction still
// notifies in-transaction: only that fires exactly when the caller commits.)

import { WAKE_CHANNEL } from './messages.ts';
import type { Queryable } from './port.ts';

export interface Waker {
  /** Ask for one NOTIFY soon; never throws (workers also poll). */
  wake(): void;
}

export function createWaker(db: Queryable, onError: (error: Error) => void): Waker {
  let sending = false;
  let again = false;
  const send = async (): Promise<void> => {
    sending = true;
    try {
      do {
        again = false;
        await db.query(`select pg_notify('${WAKE_CHANNEL}', '')`).catch(onError);
      } while (again);
    } finally {
      sending = false;
    }
  };
  return {
    wake() {
      if (sending) again = true;
      else void send();
    },
  };
}
