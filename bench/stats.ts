// Small statistics: percentiles (nearest rank), rates, and CDF points for the chart.

export interface Summary {
  count: number;
  min: number;
  p50: number;
  p95: number;
  p99: number;
  max: number;
  mean: number;
}

export function sorted(values: readonly number[]): number[] {
  return [...values].sort((a, b) => a - b);
}

/** Nearest-rank percentile of an ascending array; NaN when empty. */
export function percentile(ascending: readonly number[], p: number): number {
  if (ascending.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * ascending.length);
  return ascending[Math.min(ascending.length, Math.max(1, rank)) - 1]!;
}

export function summarize(values: readonly number[]): Summary {
  const s = sorted(values);
  const sum = s.reduce((a, b) => a + b, 0);
  return {
    count: s.length,
    min: s[0] ?? Number.NaN,
    p50: percentile(s, 50),
    p95: percentile(s, 95),
    p99: percentile(s, 99),
    max: s.at(-1) ?? Number.NaN,
    mean: s.length ? sum / s.length : Number.NaN,
  };
}

/** The middle value (of an even number, the mean of the two middle ones); NaN when empty. */
export function median(values: readonly number[]): number {
  const s = sorted(values);
  const mid = s.length >> 1;
  if (s.length === 0) return Number.NaN;
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/** Events per second over a window in milliseconds. */
export function rate(count: number, windowMs: number): number {
  return windowMs > 0 ? (count * 1000) / windowMs : Number.NaN;
}

/** Up to `points` (value, fraction ≤ value) pairs of the empirical CDF, for drawing. */
export function cdf(values: readonly number[], points = 200): Array<[number, number]> {
  const s = sorted(values);
  if (s.length === 0) return [];
  const out: Array<[number, number]> = [];
  const step = Math.max(1, Math.floor(s.length / points));
  for (let i = 0; i < s.length; i += step) out.push([s[i]!, (i + 1) / s.length]);
  if (out.at(-1)?.[1] !== 1) out.push([s.at(-1)!, 1]);
  return out;
}

/** Wall-clock milliseconds with sub-millisecond precision, comparable across local processes. */
export function nowMs(): number {
  return performance.timeOrigin + performance.now();
}

/** Arrival minus send time per id (first arrival wins; ids never sent are ignored). */
export function joinLatencies(
  sentAt: ReadonlyMap<string, number>,
  arrivals: ReadonlyArray<[string, number]>,
): number[] {
  const seen = new Set<string>();
  const latencies: number[] = [];
  for (const [id, at] of arrivals) {
    const t0 = sentAt.get(id);
    if (t0 === undefined || seen.has(id)) continue;
    seen.add(id);
    latencies.push(at - t0);
  }
  return latencies;
}
