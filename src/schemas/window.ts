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
  (window: { since?: string | null; until?: string | null }) => boolean,
  { path: string[]; message: string },
] = [
  (window) => !window.since || !window.until || Date.parse(window.until) > Date.parse(window.since),
  { path: ['until'], message: 'must be later than since' },
];
