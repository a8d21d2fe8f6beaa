// A window of message creation times, as recover, replay-missing and replay take it: from `since`
// (inclusive) until `until` (exclusive), ISO times with their offset.

import { z } from 'zod';

export const isoTime = () => z.iso.datetime({ offset: true });

/**
 * A window that ends where or before it starts holds no message: refused by name, not answered
 * as a task that found nothing (the caller swapped the two, or meant another date). For
 * `.refine(...UNTIL_AFTER_SINCE)`.
 */
export const UNTIL_AFTER_SINCE: [
  (window: { since?: string | Date | null | undefined; until?: string | Date | null | undefined }) => boolean,
  { path: string[]; message: string },
] = [
  // Times as given (ISO text) or as read into Dates (a query string's window, api/query.ts).
  (window) => !window.since || !window.until || new Date(window.until) > new Date(window.since),
  { path: ['until'], message: 'must be later than since' },
];
