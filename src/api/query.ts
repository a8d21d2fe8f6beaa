// Query-string parsing shared by list routes: Svix's pagination and filters.

import { z } from 'zod';
import type { PageRequest } from '../db/pagination.ts';
import { ident } from '../schemas/svix.ts';
import { parseOrThrow } from '../schemas/validate.ts';
import { UNTIL_AFTER_SINCE } from '../schemas/window.ts';

const flag = z.union([z.boolean(), z.enum(['true', 'false']).transform((v) => v === 'true')]);
/** A number in the query string; an empty one (`status=`) is absent, never 0. */
const numberIn = <T extends z.ZodType>(schema: T) => z.preprocess((v) => (v === '' ? undefined : v), schema);
const date = z.iso.datetime({ offset: true }).transform((v) => new Date(v));

export const ListQuery = z.object({
  limit: z.coerce.number().int().min(1).max(250).default(50),
  // As documented; each list's own pattern replaces it (LIST_QUERIES). An event type's name (up to
  // 256 characters) is its list's iterator, and a prevIterator is `-` before it.
  iterator: z.string().max(257).nullish(),
  order: z.enum(['ascending', 'descending']).optional(),
  before: date.optional(),
  after: date.optional(),
  // Each list says what it means when absent: messages come with content, event types without.
  with_content: flag.optional(),
  include_archived: flag.default(false),
  // As messages carry them: a filter no message can match is a mistake, not an empty list.
  channel: ident(128).optional(),
  // Not in the OSS contract; the Svix SDKs send it on message and attempt lists.
  tag: ident(128).optional(),
  endpoint_id: z.string().max(256).optional(),
  // Not in the OSS contract; the Svix SDKs' attempt list by endpoint sends it: each attempt with its message.
  with_msg: flag.optional(),
  // Svix MessageStatus: 0 to 3, and Canceled (4), which the Svix SDKs send and nothing in herald is.
  status: numberIn(z.coerce.number().int().min(0).max(4).optional()),
  // Svix StatusCodeClass: 0 (no status code), 100, 200, 300, 400, 500.
  status_code_class: numberIn(
    z.coerce
      .number()
      .pipe(
        z.union(
          [0, 100, 200, 300, 400, 500].map((n) => z.literal(n)),
          { error: 'one of 0, 100, 200, 300, 400, 500' },
        ),
      )
      .optional(),
  ),
  event_types: z.union([z.string(), z.array(z.string())]).optional(),
});

/** What a list's pages are walked by: ids with this prefix, or event types' names. */
export type ListKey = 'app' | 'ep' | 'msg' | 'atmpt' | 'event_type_name';

/**
 * An iterator as the list gave it: its key, `-` before it for a prevIterator, or (a name beginning
 * with `-` or `~`, walked forward) `~` before it; empty is none. Anything else is refused, naming
 * it: taken as a bound, a mistyped or foreign iterator would answer a page from nowhere.
 */
function iteratorOf(key: ListKey): z.ZodType<string | null | undefined> {
  const pattern =
    key === 'event_type_name'
      ? /^(?:[-~]?[a-zA-Z0-9\-_.]{1,256})?$/
      : new RegExp(`^(?:-?${key}_[0-9a-f]{12,64})?$`);
  return z
    .string()
    .regex(pattern, 'not an iterator of this list (pass back the iterator or prevIterator a page gave)')
    .nullish();
}

/** One schema per list key, made once: a zod object built per request costs ~50 µs. */
const LIST_QUERIES = new Map(
  (['app', 'ep', 'msg', 'atmpt', 'event_type_name'] as const).map((key) => [
    key,
    ListQuery.extend({ iterator: iteratorOf(key) }),
  ]),
);

/** `event_types`, split at its commas: each a name an event type could have. */
const EventTypeFilter = z.object({ event_types: z.array(ident(256)) });

/** Svix's window of an endpoint's statistics: one that ends where it starts counts nothing. */
export const StatsQuery = z
  .object({ since: date.nullish(), until: date.nullish() })
  .refine(...UNTIL_AFTER_SINCE);

export type ListQuery = z.infer<typeof ListQuery> & { page: PageRequest; eventTypes: string[] | null };

/** `event_types[]=a` and `event_types[0]=a`, as PHP and Rails clients spell a list (Svix reads both). */
const EVENT_TYPES_ITEM = /^event_types\[\d*\]$/;

function withEventTypesFolded(query: unknown): unknown {
  if (typeof query !== 'object' || query === null) return query;
  const entries = Object.entries(query);
  if (!entries.some(([key]) => EVENT_TYPES_ITEM.test(key))) return query;
  const folded: unknown[] = [];
  const rest: Record<string, unknown> = {};
  for (const [key, value] of entries) {
    if (key === 'event_types' || EVENT_TYPES_ITEM.test(key)) folded.push(value);
    else rest[key] = value;
  }
  return { ...rest, event_types: folded.flat() };
}

/**
 * Reads a true/false flag of the query string (`get_if_exists`, `expunge`): `absent` when it is not
 * there; anything but true or false is refused, naming it — a mistyped `expunge=1` must not
 * quietly archive instead. Made once, at start-up: a zod object built per request cost a publish
 * ~50 µs.
 */
export function flagReader(name: string, absent: boolean): (query: unknown) => boolean {
  const schema = z.object({ [name]: flag.default(absent) });
  return (query) => parseOrThrow(schema, query, 'query')[name] === true;
}

/** `with_content` of a single message (its publish and its read), as the lists read it. */
export const parseWithContent = flagReader('with_content', true);

/**
 * The list's query. As in Svix, `before` and `after` are ignored once an iterator is passed (but
 * for herald's own window and ascending walk, whose bounds hold on every page), and
 * `after` alone starts the walk at its moment towards newer items (as a prevIterator walks): the
 * first page holds the oldest items after it, newest first, and its `prevIterator` goes on
 * towards newer ones. (Ids follow the clock at which items were made, not their commits: a tail
 * can pass an item that commits after a newer one it has seen; the README says so.) (Both at once,
 * which Svix refuses, is a window walked from `before`.) `byTime`: whether the list takes
 * `before` and `after` (messages and attempts); the others ignore them, as Svix does — and their
 * walk with them, which `after` would otherwise turn to start from the oldest item.
 */
export function parseListQuery(
  query: unknown,
  naturalOrder: 'ascending' | 'descending',
  keyedBy: ListKey,
  { byTime = false } = {},
): ListQuery {
  const q = parseOrThrow(LIST_QUERIES.get(keyedBy)!, withEventTypesFolded(query), 'query');
  const eventTypes =
    q.event_types === undefined
      ? null
      : parseOrThrow(
          EventTypeFilter,
          { event_types: [q.event_types].flat().flatMap((t) => t.split(',')) },
          'query',
        ).event_types;
  const order = q.order ?? naturalOrder;
  // An empty iterator is none: as a cursor it would end every walk at once, an empty last page.
  const iterator = q.iterator || null;
  // herald's own extensions keep their bounds on every page: a window (both at once) and an
  // ascending walk up to `before`. With an iterator, Svix's way would let the pages after the
  // first run past them.
  const bounded =
    (q.before !== undefined && q.after !== undefined) || (order === 'ascending' && q.before !== undefined);
  const before = byTime && (iterator === null || bounded) ? q.before : undefined;
  const after = byTime && (iterator === null || bounded) ? q.after : undefined;
  // '-' with no id: a walk back from the very start, which `after` bounds.
  const fromAfter =
    iterator === null && after !== undefined && before === undefined && order === 'descending';
  return {
    ...q,
    before,
    after,
    eventTypes,
    page: { limit: q.limit, iterator: fromAfter ? '-' : iterator, order },
  };
}
