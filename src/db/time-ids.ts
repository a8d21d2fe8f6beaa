// herald's ids begin with their creation time (herald_id, migration 0013: a prefix, then 12 hex
// digits of milliseconds since the epoch, taken at the insert, after the transaction's now()), so
// the rows created before a moment are the ids below the first id of that moment. A query bounded
// by it walks a primary key to the moment, where one on a created_at column would read the whole
// history of a table that has no index on it.

/**
 * SQL for the smallest id with `prefix` created at `momentSql` (a timestamptz expression of
 * herald's own, never input: values go in as parameters): ids created since that moment compare
 * at or above it, those created before below it (bytewise, collation "C") — to the millisecond,
 * rounded as herald_id rounds, so an id minted within half a millisecond before the moment may
 * compare above it. Callers use it as a bound to walk to, with an exact test of their own. A
 * moment before 1970 is taken as 1970 (below every id) and one past 9999 as 9999 (above every
 * id): 12 hex digits hold neither a negative count nor one of more digits.
 */
export function firstIdAt(prefix: string, momentSql: string): string {
  if (!/^[a-z]+$/.test(prefix)) throw new Error(`an id prefix is lowercase letters, got ${prefix}`);
  const moment = `least(greatest((${momentSql}), 'epoch'::timestamptz), '9999-12-31'::timestamptz)`;
  return `('${prefix}_' || lpad(to_hex((extract(epoch from ${moment}) * 1000)::bigint), 12, '0'))`;
}

/**
 * SQL for Svix's `before` and `after` filters (parameters; null: no bound) on rows whose ids carry
 * their creation time: the id bounds the walk of the index, the time column decides. An id is
 * minted after its transaction's now(), which the time column holds: an hour of slack on `before`
 * keeps a row whose transaction began before it and minted its id after (a library publish inside
 * a caller's long transaction), and costs at most an hour of rows to walk past; `after` needs none
 * (an id minted at or after a moment compares at or above its first id). `includeAfter`: the
 * window [after, before), as the CLI's `--since` and `--until` take it.
 */
export function createdBetween(on: {
  prefix: string;
  idColumn: string;
  timeColumn: string;
  before: string;
  after: string;
  includeAfter?: boolean;
}): string {
  const { prefix, idColumn: id, timeColumn: time, before, after } = on;
  // Rows are compared by the time they are shown with — to the millisecond, where the column holds
  // microseconds — so that `after` set to a row's own timestamp leaves that row out (a poll from
  // the last row seen got it again), and `before` set to it leaves it out too. A shown time is
  // after A when the row's time reaches the next millisecond past A, at or after A when it reaches
  // A's millisecond rounded up, and before B when it is below B's rounded up.
  const roundedUp = (moment: string) => `date_trunc('milliseconds', ${moment} + interval '999 microseconds')`;
  const fromAfter = on.includeAfter
    ? roundedUp(after)
    : `date_trunc('milliseconds', ${after}) + interval '1 millisecond'`;
  return `(${before}::timestamptz is null
           or (${id} < ${firstIdAt(prefix, `${before} + interval '1 hour'`)} and ${time} < ${roundedUp(before)}))
      and (${after}::timestamptz is null
           or (${id} >= ${firstIdAt(prefix, after)} and ${time} >= ${fromAfter}))`;
}
