// Turns a zod failure into herald's validation error: 422, naming every offending field.

import type { z } from 'zod';
import { HeraldError, invalidField, notFound } from '../errors.ts';
import { Uid } from './svix.ts';

export function parseOrThrow<S extends z.ZodType>(
  schema: S,
  value: unknown,
  location: 'body' | 'query' = 'body',
): z.infer<S> {
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  const issues = parsed.error.issues.map((issue) => ({
    loc: [location, ...issue.path.map(String)],
    msg: issue.message,
    type: issue.code,
  }));
  const first = issues[0]!;
  const where = first.loc.slice(1).join('.') || location;
  throw new HeraldError('validation', `${where}: ${first.msg}`, issues);
}

/**
 * A path segment that names an object must be a valid id, uid or name: one that is not names
 * nothing, and a PUT that creates what its path names would store what no request can name
 * again. The API checks every path's ids with it (api/server.ts); the library, an app it creates.
 */
export function assertPathIdentifier(param: string, value: string, what: string): void {
  if (Uid.safeParse(value).success) return;
  throw new HeraldError('validation', `${param}: not a valid ${what}`, [
    { loc: ['path', param], msg: 'only letters, digits, - _ and ., at most 256', type: 'value_error' },
  ]);
}

/**
 * The uid of an object that a request creates under its path (a PUT; a publish that creates its
 * app): the path's. A path that begins as the kind's ids do names an id that does not exist (no
 * uid may begin so): not found, as for a GET. A body naming another uid is refused: the object
 * would not be where the request put it, and the same request again would find nothing there and
 * try to create it a second time.
 */
export function uidFromPath(
  path: string,
  bodyUid: string | null | undefined,
  on: { idPrefix: string; what: string; field?: string[] },
): string {
  if (path.startsWith(on.idPrefix)) throw notFound(on.what);
  if (bodyUid != null && bodyUid !== path) {
    throw invalidField(on.field ?? ['uid'], 'must be the uid the path names');
  }
  return path;
}
