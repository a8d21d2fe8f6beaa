// Retry-After (RFC 9110 §10.2.3): delay-seconds or an HTTP-date, in one of the three forms of
// §5.6.7, each read exactly as the grammar writes it, in GMT. Date.parse reads far more than
// that — a date with no zone (asctime's) in the host's local time, "+0900" or "PST" zones — and
// would make the wait depend on where herald runs.

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
const DAY = '(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun)';
const LONG_DAY = '(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday)';
const MONTH = `(?<month>${MONTHS.join('|')})`;
const TIME = '(?<hours>\\d{2}):(?<minutes>\\d{2}):(?<seconds>\\d{2})';
/** `Sun, 06 Nov 1994 08:49:37 GMT` */
const IMF_FIXDATE = new RegExp(`^${DAY}, (?<day>\\d{2}) ${MONTH} (?<year>\\d{4}) ${TIME} GMT$`);
/** `Sunday, 06-Nov-94 08:49:37 GMT` */
const RFC_850 = new RegExp(`^${LONG_DAY}, (?<day>\\d{2})-${MONTH}-(?<year>\\d{2}) ${TIME} GMT$`);
/** `Sun Nov  6 08:49:37 1994` */
const ASCTIME = new RegExp(`^${DAY} ${MONTH} (?<day>[ \\d]\\d) ${TIME} (?<year>\\d{4})$`);

/**
 * Whole seconds from `nowMs` (a date already past gives 0; a delay too large to count exactly,
 * the largest safe integer), or null when absent or unreadable. Clamping it to sane bounds is the
 * retry policy's job, not the parser's.
 */
export function parseRetryAfter(value: string | readonly string[] | undefined, nowMs: number): number | null {
  // A repeated header is malformed; its first value is as good a guess as any.
  const raw = (typeof value === 'string' ? value : value?.[0])?.trim();
  if (raw === undefined) return null;
  if (/^\d+$/.test(raw)) return Math.min(Number(raw), Number.MAX_SAFE_INTEGER);
  const at = parseHttpDate(raw, nowMs);
  if (at === null) return null;
  return Math.max(0, Math.ceil((at - nowMs) / 1000));
}

/** Milliseconds since the epoch of an HTTP-date, or null. */
function parseHttpDate(text: string, nowMs: number): number | null {
  const g = (IMF_FIXDATE.exec(text) ?? RFC_850.exec(text) ?? ASCTIME.exec(text))?.groups;
  if (g === undefined) return null;
  const year = g['year']!.length === 2 ? fullYear(Number(g['year']), nowMs) : Number(g['year']);
  const month = MONTHS.indexOf(g['month']!);
  const [day, hours, minutes, seconds] = [g['day'], g['hours'], g['minutes'], g['seconds']].map(Number) as [
    number,
    number,
    number,
    number,
  ];
  const at = Date.UTC(year, month, day, hours, minutes, seconds);
  // Date.UTC rolls "31 Feb" or "25:00" over into the next day: such a date is not one.
  const back = new Date(at);
  const exact =
    back.getUTCDate() === day &&
    back.getUTCMonth() === month &&
    back.getUTCHours() === hours &&
    back.getUTCMinutes() === minutes &&
    back.getUTCSeconds() === seconds;
  return exact ? at : null;
}

/** RFC 850's two-digit year: the one in the century that is not more than 50 years ahead (§5.6.7). */
function fullYear(twoDigits: number, nowMs: number): number {
  const thisYear = new Date(nowMs).getUTCFullYear();
  const year = thisYear - (thisYear % 100) + twoDigits;
  return year > thisYear + 50 ? year - 100 : year;
}
