// Configuration that would break herald at run time is refused at start-up, naming the variable,
// and without echoing what may be a credential.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { loadConfig } from '../src/config.ts';
import { testEnv } from './support/herald.ts';

const base = testEnv('postgres://postgres@127.0.0.1:5432/test');

test('an attempt deadline must leave half a second of its lease to start in and record its outcome', () => {
  const lease = { HERALD_LEASE_SECONDS: '15' };
  assert.throws(
    () => loadConfig({ ...base, ...lease, HERALD_ATTEMPT_TIMEOUT_MS: '14999' }),
    /^ConfigError: HERALD_ATTEMPT_TIMEOUT_MS: expected at most HERALD_LEASE_SECONDS \(15 s\) in milliseconds less 500, got "14999"$/,
  );
  assert.equal(
    loadConfig({ ...base, ...lease, HERALD_ATTEMPT_TIMEOUT_MS: '14500' }).attemptTimeoutMs,
    14_500,
  );
});

test('an admin key that could never be presented is refused, and not echoed', () => {
  for (const key of ['two words', 'short']) {
    assert.throws(
      () => loadConfig({ ...base, HERALD_ADMIN_KEY: key }),
      (error: Error) => /HERALD_ADMIN_KEY/.test(error.message) && !error.message.includes(key),
    );
  }
});

test('an operator webhook URL in an error shows its scheme and host only', () => {
  const url = 'ftp://hooks.example.com/services/T000/B000/s3cr3t-token';
  assert.throws(
    () => loadConfig({ ...base, HERALD_OPERATOR_WEBHOOK_URL: url }),
    (error: Error) =>
      /HERALD_OPERATOR_WEBHOOK_URL/.test(error.message) &&
      error.message.includes('ftp://hooks.example.com/') &&
      !error.message.includes('s3cr3t'),
  );
});
