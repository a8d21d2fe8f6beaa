// The Prometheus alerting rules that ship with herald (deploy/prometheus/herald-alerts.yml) name
// only metrics herald serves, with labels those metrics carry, and each says what it means and
// how bad it is; the README lists every one. A renamed metric or label fails here, not silently
// in someone's Prometheus.

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { parse } from 'yaml';
import { createMetrics } from '../src/ops/metrics.ts';
import { freshDatabase } from './support/database.ts';

const RULES = new URL('../deploy/prometheus/herald-alerts.yml', import.meta.url);
/** Prometheus's own checker, from Debian's prometheus package where it is installed. */
const PROMTOOL = ['/usr/bin/promtool', '/usr/local/bin/promtool'].find((path) => existsSync(path));
const README = new URL('../README.md', import.meta.url);
/** Labels Prometheus adds to every series it scrapes. */
const TARGET_LABELS = new Set(['job', 'instance']);

interface Rule {
  alert: string;
  expr: string;
  for?: string;
  labels: { severity: string };
  annotations: { summary: string; description: string };
}

test('every alert names metrics and labels herald serves, says what it means, and is in the README', async () => {
  const rules = (parse(await readFile(RULES, 'utf8')) as { groups: { rules: Rule[] }[] }).groups.flatMap(
    (g) => g.rules,
  );
  assert.ok(rules.length >= 8, `${rules.length} rules`);
  assert.equal(new Set(rules.map((r) => r.alert)).size, rules.length, 'alert names are unique');

  const database = await freshDatabase('alerts');
  try {
    const { registry } = createMetrics(database.db);
    const readme = await readFile(README, 'utf8');
    for (const rule of rules) {
      assert.match(rule.alert, /^Herald[A-Z][A-Za-z]+$/, rule.alert);
      assert.ok(['critical', 'warning', 'info'].includes(rule.labels.severity), `${rule.alert}: severity`);
      assert.ok(rule.annotations.summary.length > 10 && rule.annotations.description.length > 40, rule.alert);
      if (rule.for !== undefined) assert.match(rule.for, /^\d+[smhd]$/, `${rule.alert}: for`);
      assert.ok(readme.includes(`\`${rule.alert}\``), `${rule.alert} is listed in the README`);

      const names = [...rule.expr.matchAll(/\bherald_[a-z_]+/g)].map((m) => m[0]);
      assert.ok(names.length > 0, `${rule.alert} reads a herald metric`);
      const labelNames = new Set<string>();
      for (const name of names) {
        const metric = registry.getSingleMetric(name);
        assert.ok(metric, `${rule.alert}: herald serves ${name}`);
        for (const label of (metric as unknown as { labelNames: string[] }).labelNames) labelNames.add(label);
      }
      const used = [
        ...[...rule.expr.matchAll(/([a-z_]+)\s*=~?\s*"/g)].map((m) => m[1]!),
        ...[...rule.expr.matchAll(/\b(?:by|without)\s*\(([^)]*)\)/g)].flatMap((m) => m[1]!.split(',')),
      ].map((label) => label.trim());
      for (const label of used) {
        if (TARGET_LABELS.has(label)) continue;
        assert.ok(labelNames.has(label), `${rule.alert}: ${names.join(', ')} carry the label ${label}`);
      }
    }
  } finally {
    await database.drop();
  }
});

test('promtool finds the rules well formed, and their unit tests pass: each alert fires on its series, not before its time', {
  skip: PROMTOOL ? false : 'promtool is not installed (apt-get install prometheus)',
}, async () => {
  const run = promisify(execFile);
  const cwd = fileURLToPath(new URL('.', RULES));
  const checked = await run(PROMTOOL!, ['check', 'rules', 'herald-alerts.yml'], { cwd });
  assert.match(checked.stdout, /SUCCESS: \d+ rules found/);
  const tested = await run(PROMTOOL!, ['test', 'rules', 'herald-alerts.test.yml'], { cwd });
  assert.match(tested.stdout, /SUCCESS/);
});
