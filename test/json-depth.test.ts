// nestedDeeperThan against the depth of the value the text holds, for any JSON: brackets inside
// strings (escaped quotes and backslashes among them) do not count.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { nestedDeeperThan } from '../src/domain/json-depth.ts';

const depthOf = (value: unknown): number =>
  value !== null && typeof value === 'object'
    ? 1 + Math.max(0, ...Object.values(value as Record<string, unknown>).map(depthOf))
    : 0;

test('a text is deeper than max exactly when its value nests more than max objects and arrays', () => {
  fc.assert(
    fc.property(
      fc.jsonValue({ maxDepth: 8 }),
      fc.integer({ min: 0, max: 9 }),
      fc.boolean(),
      (value, max, pretty) => {
        const text = JSON.stringify(value, null, pretty ? 2 : undefined);
        assert.equal(nestedDeeperThan(text, max), depthOf(value) > max, text);
      },
    ),
    { numRuns: 2000 },
  );
});

test('brackets and escaped quotes inside strings are text, not nesting', () => {
  assert.equal(nestedDeeperThan('{"a":"[[[[{{{{"}', 1), false);
  assert.equal(nestedDeeperThan('{"a":"\\"[[[[","b":"\\\\"}', 1), false);
  assert.equal(nestedDeeperThan('{"a":"\\\\",   "b":[[1]]}', 2), true);
});
