// The benchmark's end-to-end ratio over interleaved pairs: the table shows the median of the
// pairs' ratios with the lowest and the highest, and --pairs is checked before anything runs.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseOptions } from '../bench/config.ts';
import { buildFigures } from '../bench/report/figures.ts';

const throughput = (perSecond: number) => ({ perSecond, count: 100_000, elapsedMs: 1000 });
const firstPair = {
  peer: { ...throughput(10_000), peakRssBytes: 0 },
  e2eFan: { ...throughput(9_000), recordedMs: 0, peakRssBytes: 0, endpoints: 1000 },
};

test('the median of the pairs, with the lowest and the highest, beside the first pair', () => {
  const figures = buildFigures(
    {
      ...firstPair,
      pairs: [
        { peer: 10_000, herald: 9_000 },
        { peer: 8_000, herald: 10_000 },
        { peer: 12_000, herald: 12_000 },
      ],
    },
    32,
  );
  const at = figures.findIndex((f) => f.name.includes('median of 3 interleaved pairs'));
  assert.ok(at >= 0, 'the median row is shown');
  assert.equal(figures[at]!.value, 1);
  assert.equal(figures[at]!.ratioToPeer, 1);
  assert.deepEqual(
    figures.slice(at + 1, at + 3).map((f) => [f.name.trim(), f.value]),
    [
      ['the lowest pair', 0.9],
      ['the highest pair', 1.25],
    ],
  );
  const first = figures.find((f) => f.name.startsWith('herald e2e E=1,000: '));
  assert.equal(first?.ratioToPeer, 0.9, 'the first pair is still shown as measured');
});

test('one pair shows no median', () => {
  const figures = buildFigures({ ...firstPair, pairs: [{ peer: 10_000, herald: 9_000 }] }, 32);
  assert.equal(figures.filter((f) => f.name.includes('interleaved pairs')).length, 0);
});

test('--pairs: three in a full run, one in a quick one, and only from 1 to 9', () => {
  assert.equal(parseOptions([]).counts.e2ePairs, 3);
  assert.equal(parseOptions(['--quick']).counts.e2ePairs, 1);
  assert.equal(parseOptions(['--quick', '--pairs', '4']).counts.e2ePairs, 4);
  for (const bad of ['0', '10', '2.5', 'three']) {
    assert.throws(() => parseOptions(['--pairs', bad]), /--pairs expects an integer from 1 to 9/);
  }
});
