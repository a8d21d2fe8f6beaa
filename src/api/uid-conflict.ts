// A uid (of an app, endpoint or source) that is already taken reaches herald as PostgreSQL's
// unique_violation. Routes turn it into a 409 that says which uid clashed; the server's generic
// mapping (server.ts) stays the safety net for any other unique index.

import { HeraldError } from '../errors.ts';

/** What a create or change of a source with a uid already taken answers (API and CLI alike). */
export const SOURCE_UID_TAKEN = 'a source with this uid exists';

export const isUniqueViolation = (error: unknown): boolean => (error as { code?: string }).code === '23505';

/** A `.catch` handler: a unique violation becomes a 409 with `detail`; anything else goes on. */
export const rethrowTakenUid =
  (detail: string) =>
  (error: unknown): never => {
    if (isUniqueViolation(error)) throw new HeraldError('conflict', detail);
    throw error;
  };

/** Runs `fn`; a unique violation becomes a 409 with `detail`. */
export const conflictOnTakenUid = <T>(detail: string, fn: () => Promise<T>): Promise<T> =>
  fn().catch(rethrowTakenUid(detail));
