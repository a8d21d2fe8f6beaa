// bench-results/latest.json ({machine, startedAt, scenarios}) and latest.svg beside it.

import fs from 'node:fs';
import path from 'node:path';
import type { Figure } from './figures.ts';

export interface ResultsFile {
  machine: Record<string, unknown>;
  startedAt: string;
  scenarios: Figure[];
}

export function writeResults(outDir: string, file: ResultsFile, svg: string): { json: string; svg: string } {
  fs.mkdirSync(outDir, { recursive: true });
  const json = path.join(outDir, 'latest.json');
  const chart = path.join(outDir, 'latest.svg');
  const round = (_key: string, value: unknown) =>
    typeof value === 'number' && !Number.isInteger(value) ? Number(value.toFixed(4)) : value;
  fs.writeFileSync(json, `${JSON.stringify(file, round, 2)}\n`);
  fs.writeFileSync(chart, svg);
  return { json, svg: chart };
}
