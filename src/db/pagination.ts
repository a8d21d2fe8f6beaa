// Svix-style cursor pagination over time-ordered ids. `iterator` is the last id of the previous
// page; a leading '-' (as in Svix's prevIterator) walks back towards newer/older instead. A key
// that itself begins with '-' (an event type's name may) goes forward as '~' and the key: '~' is
// in no id or name.

export interface PageRequest {
  limit: number;
  iterator: string | null;
  /** The natural order of the listing: 'ascending' oldest first, 'descending' newest first. */
  order: 'ascending' | 'descending';
}

export interface Page<T> {
  data: T[];
  iterator: string | null;
  prevIterator: string | null;
  done: boolean;
}

export interface PageQuery {
  /** A condition on `column` to AND into the WHERE clause (uses parameter `$n`). */
  condition: string;
  orderBy: string;
  param: string | null;
  /** Rows come back reversed (walking backwards) and must be flipped before use. */
  reversed: boolean;
  fetch: number;
}

const FORWARD = '~';

/** A page's forward iterator: its last key, marked when the key would read as a walk back. */
function forwardFrom(key: string): string {
  return key.startsWith('-') || key.startsWith(FORWARD) ? `${FORWARD}${key}` : key;
}

export function pageQuery(column: string, request: PageRequest, paramIndex: number): PageQuery {
  const backwards = request.iterator?.startsWith('-') ?? false;
  const marked = backwards || (request.iterator?.startsWith(FORWARD) ?? false);
  const cursor = marked ? request.iterator!.slice(1) : request.iterator;
  const ascending = (request.order === 'ascending') !== backwards;
  return {
    // The parameter is always referenced (null when there is no cursor) so its type is known.
    condition: `($${paramIndex}::text is null or ${column} ${ascending ? '>' : '<'} $${paramIndex})`,
    orderBy: `${column} ${ascending ? 'asc' : 'desc'}`,
    param: cursor,
    reversed: backwards,
    fetch: request.limit + 1,
  };
}

export function toPage<T>(
  rows: T[],
  request: PageRequest,
  query: PageQuery,
  idOf: (row: T) => string,
): Page<T> {
  const more = rows.length > request.limit;
  const data = rows.slice(0, request.limit);
  if (query.reversed) data.reverse();
  const first = data[0];
  const last = data.at(-1);
  return {
    data,
    // An empty page forwards keeps its cursor, to poll from for what comes next; walking back
    // there is nothing before it, and no cursor to go on from.
    iterator: last ? forwardFrom(idOf(last)) : query.reversed ? null : request.iterator,
    prevIterator: first ? `-${idOf(first)}` : null,
    // In either direction, as Svix says it: whether this page reached the end of the walk.
    done: !more,
  };
}
