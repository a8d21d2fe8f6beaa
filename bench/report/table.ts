// The one table the run prints: figure, value, unit, ratio to the peer, ratio to the limit.

import type { Figure } from './figures.ts';

function formatValue(value: number): string {
  if (!Number.isFinite(value)) return 'n/a';
  if (Math.abs(value) >= 100) return Math.round(value).toLocaleString('en-US');
  if (Math.abs(value) >= 10) return value.toFixed(1);
  return value.toFixed(2);
}

const formatRatio = (ratio: number | undefined) => (ratio === undefined ? '' : `${ratio.toFixed(2)}×`);

export function renderTable(figures: readonly Figure[]): string {
  const header = ['figure', 'value', 'unit', '× peer', '× limit'];
  const rows = figures.map((f) => [
    f.name,
    formatValue(f.value),
    f.unit,
    formatRatio(f.ratioToPeer),
    formatRatio(f.ratioToLimit),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) =>
    cells
      .map((cell, i) => (i === 0 || i === 2 ? cell.padEnd(widths[i]!) : cell.padStart(widths[i]!)))
      .join('  ');
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

export const RATIO_LEGEND = [
  '× peer: herald ÷ graphile-worker in this run (throughput: higher is better; latency: lower is better).',
  '× limit: e2e and peer ÷ the HTTP limit; publish and intake ÷ the commit limit taken right before them (same concurrency).',
  "CPU per operation: user + system CPU of each process over the timed window ÷ operations (e2e and peer: from the worker's start-up message until the receiver has counted every request, per request counted in that window); × peer: herald ÷ the peer's same process (lower is better). PostgreSQL: its postmaster and all of its children, those that ended in the window included.",
  'E=1 is serial by design (one request in flight per endpoint), so it has no ratio: the peer and the limits run 32 at a time.',
].join('\n');
