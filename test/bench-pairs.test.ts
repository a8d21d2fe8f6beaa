// The benchmark's end-to-end ratio over interleaved pairs: the table shows the median of the
// pairs' ratios and each pair's, and --pairs is checked before anything runs.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseOptions, wants } from '../bench/config.ts';
import { buildFigures } from '../bench/report/figures.ts';

const pairRows = (pairs: { peer: number; herald: number }[]) => {
  const figures = buildFigures({ pairs }, 32);
  const at = figures.findIndex((f) => f.name.includes('interleaved pairs'));
  assert.ok(at >= 0, 'the median row is shown');
  return { median: figures[at]!, each: figures.slice(at + 1, at + 1 + pairs.length) };
};

test('the median of the pairs, and each pair with its figures', () => {
  const { median, each } = pairRows([
    { peer: 10_000, herald: 9_000 },
    { peer: 8_000, herald: 10_000 },
    { peer: 12_000, herald: 12_000 },
  ]);
  assert.match(median.name, /median of 3 interleaved pairs/);
  assert.equal(median.value, 1);
  assert.equal(median.ratioToPeer, 1);
  assert.deepEqual(
    each.map((f) => [f.name.trim(), f.value]),
    [
      ['pair 1: peer 10,000 jobs/s, herald 9,000 deliveries/s', 0.9],
      ['pair 2: peer 8,000 jobs/s, herald 10,000 deliveries/s', 1.25],
      ['pair 3: peer 12,000 jobs/s, herald 12,000 deliveries/s', 1],
    ],
  );
});

test('of an even number of pairs, the median is the mean of the middle two', () => {
  const { median } = pairRows([
    { peer: 10_000, herald: 9_000 },
    { peer: 10_000, herald: 11_000 },
  ]);
  assert.equal(median.value, 1);
});

test('a pair without a ratio is shown and left out of the median', () => {
  const { median, each } = pairRows([
    { peer: 10_000, herald: 9_000 },
    { peer: 0, herald: 10_000 },
    { peer: 10_000, herald: Number.NaN },
  ]);
  assert.match(median.name, /median of 1 interleaved pairs/);
  assert.equal(median.value, 0.9);
  assert.equal(each.length, 3);
});

test('no pairs, no rows', () => {
  assert.equal(buildFigures({ pairs: [] }, 32).length, 0);
  assert.equal(buildFigures({}, 32).length, 0);
});

test('--pairs: three in a full run, none in a quick one, and only from 0 to 9', () => {
  assert.equal(parseOptions([]).counts.e2ePairs, 3);
  assert.equal(parseOptions(['--quick']).counts.e2ePairs, 0);
  assert.equal(parseOptions(['--quick', '--pairs', '4']).counts.e2ePairs, 4);
  assert.equal(parseOptions(['--pairs', '0']).counts.e2ePairs, 0);
  assert.equal(wants(parseOptions([]), 'pairs'), true);
  assert.equal(wants(parseOptions(['--quick']), 'pairs'), false, 'a quick run takes no pairs');
  assert.equal(wants(parseOptions(['--quick', '--only', 'pairs', '--pairs', '2']), 'pairs'), true);
  assert.throws(() => parseOptions(['--quick', '--only', 'pairs']), /--only pairs: no pairs to take/);
  assert.throws(() => parseOptions(['--only', 'e2e', '--pairs', '3']), /--pairs: add pairs to --only/);
  for (const bad of ['', '10', '2.5', '0x3', ' 3', 'three']) {
    assert.throws(() => parseOptions([`--pairs=${bad}`]), /--pairs expects an integer from 0 to 9/);
  }
});
