// An id as herald_id mints it at a chosen moment (migration 0013: prefix, 12 hex digits of
// milliseconds since the epoch, 16 more digits): tests age rows by their ids, as the queries that
// walk ids to a moment read them (src/db/time-ids.ts).

export function idMintedAt(prefix: string, epochMs: number, suffix = 0): string {
  return `${prefix}_${Math.round(epochMs).toString(16).padStart(12, '0')}${String(suffix).padStart(16, '0')}`;
}
