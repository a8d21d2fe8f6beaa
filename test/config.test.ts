// Configuration that would break herald at run time is refused at start-up, naming the variable,
// and without echoing what may be a credential.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { loadConfig } from '../src/config.ts';
import { createHerald } from '../src/herald.ts';
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

test('a retry schedule with an empty step is refused, not read as a 0 s wait', () => {
  for (const schedule of ['5,,300', '5,300,', ' , 5']) {
    assert.throws(
      () => loadConfig({ ...base, HERALD_RETRY_SCHEDULE: schedule }),
      /HERALD_RETRY_SCHEDULE/,
      schedule,
    );
  }
  assert.deepEqual(
    loadConfig({ ...base, HERALD_RETRY_SCHEDULE: '5, 0.5 ,300' }).retrySchedule,
    [5, 0.5, 300],
  );
});

test('an extra CA file that cannot be read stops start-up naming the variable', async () => {
  const config = loadConfig({ ...base, HERALD_EXTRA_CA_FILE: '/nonexistent/ca.pem' });
  await assert.rejects(createHerald({ config, migrate: false }), (error: Error) =>
    /HERALD_EXTRA_CA_FILE: expected a readable PEM file, got "\/nonexistent\/ca.pem: ENOENT"/.test(
      error.message,
    ),
  );
});
