// Where rows sit on their table's heap pages: a HOT update always stays on its row's page, so
// for an update that changes no indexed column, "same page" is "HOT", read from the rows
// themselves rather than from lagging statistics.

import type { Queryable } from '../../src/db/port.ts';

/** The heap page of each row of `table` that belongs to the message (ctid is `(page,item)`). */
export async function pagesOfMessageRows(
  db: Queryable,
  table: 'attempt' | 'delivery',
  messageId: string,
): Promise<Map<string, number>> {
  const result = await db.query<{ id: string; page: string }>(
    `select id, (ctid::text::point)[0]::bigint::text as page from ${table} where message_id = $1`,
    [messageId],
  );
  return new Map(result.rows.map((r) => [r.id, Number(r.page)]));
}

/** How many rows are still on the page they were on `then` (both readings hold the same rows). */
export function stayedOnTheirPage(then: Map<string, number>, now: Map<string, number>): number {
  if (now.size !== then.size) throw new Error(`${then.size} rows then, ${now.size} now`);
  return [...now].filter(([id, page]) => then.get(id) === page).length;
}
