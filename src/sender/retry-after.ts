// Every HTTP-date form (IMF-fixdate, RFC 850, asctime) opens with a day name. Requiring one
// keeps Date.parse from reading a year into values such as "1.5" or "2025".
const HTTP_DATE_START = /^(Mon|Tue|Wed|Thu|Fri|Sat|Sun)/;

/**
 * Retry-After (RFC 9110 §10.2.3): delay-seconds or an HTTP-date. Returns whole seconds from
 * `nowMs` (a date already past gives 0), or null when absent or unreadable. Clamping it to
 * sane bounds is the retry policy's job, not the parser's.
 */
export function parseRetryAfter(value: string | readonly string[] | undefined, nowMs: number): number | null {
  // A repeated header is malformed; its first value is as good a guess as any.
  const raw = (typeof value === 'string' ? value : value?.[0])?.trim();
  if (raw === undefined) return null;
  if (/^\d+$/.test(raw)) {
    const seconds = Number(raw);
    return Number.isSafeInteger(seconds) ? seconds : null;
  }
  if (!HTTP_DATE_START.test(raw)) return null;
  const at = Date.parse(raw);
  if (Number.isNaN(at)) return null;
  return Math.max(0, Math.ceil((at - nowMs) / 1000));
}
