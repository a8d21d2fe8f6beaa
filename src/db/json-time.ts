// Times inside JSON built by PostgreSQL (json_build_object) are text in the session's time zone,
// with microseconds: `2026-12-02T09:15:00.123456+09:00` beside the `…123Z` that node-postgres
// gives for a top-level column. This renders them as the rest of herald's output does: UTC, to
// the millisecond, `Z` — whatever the server's or the session's time zone.

/** SQL for `expr` (a timestamptz) as ISO 8601 UTC text to the millisecond; null stays null. */
export const isoUtc = (expr: string): string =>
  `to_char(${expr} at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;
