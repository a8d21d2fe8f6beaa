// The benchmark's batch meter (bench/batches.ts) reads how a herald process batched its writes
// over a window from that process's own /metrics: only the writes inside the window, every item
// of them once.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { meterBatches } from '../bench/batches.ts';
import { createApp, publishVia } from './support/fixtures.ts';
import { startTestHerald, type TestHerald } from './support/herald.ts';

let t: TestHerald;
before(async () => {
  t = await startTestHerald('bench_batches');
});
after(async () => {
  await t.close();
});

test('counts the writes inside its window and their items, and times them', async () => {
  const app = await createApp(t, 'batches-shop');
  await publishVia(t, app, { eventType: 'before.window', payload: {} });
  const meter = await meterBatches(`${t.url}/metrics`, 'publish');
  // Eight at once share writes; two after them go one by one.
  await Promise.all(
    Array.from({ length: 8 }, (_, i) => publishVia(t, app, { eventType: 'in.window', payload: { i } })),
  );
  for (let i = 0; i < 2; i++) await publishVia(t, app, { eventType: 'in.window', payload: { i } });
  const figures = await meter.stop();
  assert.ok(figures.writes >= 3 && figures.writes <= 10, `${figures.writes} writes`);
  assert.equal(Math.round(figures.itemsPerWrite * figures.writes), 10, 'ten publishes in the window');
  assert.ok(figures.msPerWrite > 0, `${figures.msPerWrite} ms per write`);
});

test('a process that serves no metrics there is an error, not a zero', async () => {
  await assert.rejects(meterBatches(`${t.url}/nothing-here`, 'publish'), /answered 404/);
});
