// A hand-written SVG chart: the empirical CDFs of latency series (ms, log scale), one line each,
// with their p50/p95/p99 in the legend. No dependencies; text is escaped.

import { cdf, summarize } from '../stats.ts';

export interface Series {
  label: string;
  color: string;
  values: readonly number[];
}

const WIDTH = 760;
const HEIGHT = 440;
const M = { left: 64, right: 24, top: 48, bottom: 96 };

const escapeXml = (text: string) =>
  text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
const fixed = (x: number) => x.toFixed(1);

function ticks(min: number, max: number): number[] {
  const out: number[] = [];
  for (let decade = 10 ** Math.floor(Math.log10(min)); decade <= max * 10; decade *= 10) {
    for (const m of [1, 2, 5]) {
      const t = decade * m;
      if (t >= min && t <= max) out.push(t);
    }
  }
  return out;
}

export function renderCdfSvg(title: string, subtitle: string, series: readonly Series[]): string {
  const all = series.flatMap((s) => s.values).filter((v) => v > 0 && Number.isFinite(v));
  const lo = all.length ? Math.min(...all) : 1;
  const hi = all.length ? Math.max(...all) : 10;
  const xMin = 10 ** Math.floor(Math.log10(lo));
  const xMax = 10 ** Math.ceil(Math.log10(Math.max(hi, xMin * 10)));
  const plotW = WIDTH - M.left - M.right;
  const plotH = HEIGHT - M.top - M.bottom;
  const x = (ms: number) =>
    M.left +
    ((Math.log10(Math.max(ms, xMin)) - Math.log10(xMin)) / (Math.log10(xMax) - Math.log10(xMin))) * plotW;
  const y = (fraction: number) => M.top + (1 - fraction) * plotH;

  const parts: string[] = [];
  parts.push(
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${HEIGHT}" viewBox="0 0 ${WIDTH} ${HEIGHT}" font-family="sans-serif" font-size="12">`,
    `<rect width="${WIDTH}" height="${HEIGHT}" fill="white"/>`,
    `<text x="${M.left}" y="22" font-size="15" font-weight="bold">${escapeXml(title)}</text>`,
    `<text x="${M.left}" y="38" fill="#555">${escapeXml(subtitle)}</text>`,
  );
  for (const f of [0, 0.25, 0.5, 0.75, 0.95, 0.99, 1]) {
    parts.push(
      `<line x1="${M.left}" x2="${M.left + plotW}" y1="${fixed(y(f))}" y2="${fixed(y(f))}" stroke="#ddd"${f === 0.95 || f === 0.99 ? ' stroke-dasharray="3,3"' : ''}/>`,
    );
    if (f !== 0.95 && f !== 0.99) {
      parts.push(`<text x="${M.left - 8}" y="${fixed(y(f) + 4)}" text-anchor="end">${f}</text>`);
    }
  }
  for (const t of ticks(xMin, xMax)) {
    parts.push(
      `<line x1="${fixed(x(t))}" x2="${fixed(x(t))}" y1="${M.top}" y2="${M.top + plotH}" stroke="#eee"/>`,
      `<text x="${fixed(x(t))}" y="${M.top + plotH + 16}" text-anchor="middle">${t}</text>`,
    );
  }
  parts.push(
    `<rect x="${M.left}" y="${M.top}" width="${plotW}" height="${plotH}" fill="none" stroke="#888"/>`,
    `<text x="${M.left + plotW / 2}" y="${M.top + plotH + 34}" text-anchor="middle">latency, ms (log scale)</text>`,
    `<text transform="translate(16 ${M.top + plotH / 2}) rotate(-90)" text-anchor="middle">fraction of requests ≤ latency</text>`,
  );
  series.forEach((s, i) => {
    const points = cdf(s.values);
    if (points.length > 0) {
      const path = points.map(([v, f], k) => `${k === 0 ? 'M' : 'L'}${fixed(x(v))},${fixed(y(f))}`).join(' ');
      parts.push(`<path d="${path}" fill="none" stroke="${s.color}" stroke-width="2"/>`);
    }
    const st = summarize(s.values);
    const legendY = M.top + plotH + 56 + i * 18;
    parts.push(
      `<line x1="${M.left}" x2="${M.left + 24}" y1="${legendY - 4}" y2="${legendY - 4}" stroke="${s.color}" stroke-width="3"/>`,
      `<text x="${M.left + 32}" y="${legendY}">${escapeXml(
        `${s.label}: n=${st.count}, p50 ${st.p50.toFixed(2)} ms, p95 ${st.p95.toFixed(2)} ms, p99 ${st.p99.toFixed(2)} ms`,
      )}</text>`,
    );
  });
  parts.push('</svg>');
  return `${parts.join('\n')}\n`;
}
