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

/** The two ways a PUT to an object's path goes, and what it answers. */
export interface PutSteps<Found, Answer> {
  /** The object the path names, or null. */
  find(): Promise<Found | null>;
  /** Creates it under the path's uid. */
  create(): Promise<Answer>;
  update(found: Found): Promise<Answer>;
  /** The 409's detail for a uid taken by another object. */
  uidTaken: string;
}

/**
 * PUT: creates the object the path names, or updates it. Two PUTs of one new uid race (an SDK
 * retrying a slow first try does it): the one whose insert meets the other's row goes on as a PUT
 * that found the object, as if it had come second, rather than answering 409 for its own uid.
 */
export async function createOrUpdateByPath<Found, Answer>(
  steps: PutSteps<Found, Answer>,
): Promise<{ created: boolean; answer: Answer }> {
  const update = async (found: Found) => ({
    created: false,
    answer: await steps.update(found).catch(rethrowTakenUid(steps.uidTaken)),
  });
  const found = await steps.find();
  if (found) return update(found);
  try {
    return { created: true, answer: await steps.create() };
  } catch (error) {
    if (!isUniqueViolation(error)) throw error;
    const winner = await steps.find();
    if (!winner) throw new HeraldError('conflict', steps.uidTaken);
    return update(winner);
  }
}
