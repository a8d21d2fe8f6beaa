// Configuration that would break herald at run time is refused at start-up, naming the variable,
// and without echoing what may be a credential.

import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { test } from 'node:test';
import { assertDoctorThresholds, loadConfig } from '../src/config.ts';
import { ConfigError, createHerald } from '../src/herald.ts';
import { selfSignedCertificate } from './support/certificates.ts';
import { startTestHerald, testEnv } from './support/herald.ts';

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

test('herald doctor refuses thresholds a healthy system would fail, naming the variable; a server starts with them', () => {
  for (const [name, min] of [
    ['HERALD_DOCTOR_SETTLE_SECONDS', 5],
    ['HERALD_DOCTOR_DUE_SECONDS', 10],
    ['HERALD_DOCTOR_LEASE_GRACE_SECONDS', 10],
  ] as const) {
    // No other command reads them: an upgrade must not stop a server over one.
    const config = loadConfig({ ...base, [name]: String(min - 1) });
    assert.throws(
      () => assertDoctorThresholds(config),
      new RegExp(
        `^ConfigError: ${name}: expected at least ${min} for herald doctor, or a healthy system fails, got "${min - 1}"$`,
      ),
    );
    assert.doesNotThrow(() => assertDoctorThresholds(loadConfig({ ...base, [name]: String(min) })), name);
  }
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

test('a retry schedule with an empty step, or a step that is no decimal number of seconds, is refused', () => {
  for (const schedule of ['5,,300', '5,300,', ' , 5', '5,0x1f', '5,1e3', '5,-1', '5,.5']) {
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

test('an extra CA file holding no PEM certificate, or an unreadable one, stops start-up naming the variable', async () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'herald-ca-'));
  try {
    const { certFile: ca, pem: good } = selfSignedCertificate(dir, '/CN=test CA');
    const damaged = good.replace(/\n([A-Za-z0-9+/]{20})/, '\n!!!!$1');
    for (const [contents, why] of [
      ['hostname\n', 'no certificate in it'],
      [`${good}${damaged}`, 'certificate 2 unreadable'],
    ] as const) {
      writeFileSync(ca, contents);
      const config = loadConfig({ ...base, HERALD_EXTRA_CA_FILE: ca });
      await assert.rejects(createHerald({ config, migrate: false }), (error: ConfigError) => {
        assert.ok(error instanceof ConfigError, String(error));
        assert.equal(error.variable, 'HERALD_EXTRA_CA_FILE');
        assert.equal(error.code, 'configuration');
        assert.match(error.message, new RegExp(`expected a PEM file of CA certificates, got ".*: ${why}"`));
        return true;
      });
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('an integer setting takes digits only: a blank, hex or exponent value is refused, not read as 0 or 8080', () => {
  for (const [name, raw] of [
    ['HERALD_API_RATE_LIMIT', ' '],
    ['PORT', '0x1f90'],
    ['HERALD_SHUTDOWN_GRACE_MS', '1e3'],
    ['HERALD_DISABLE_AFTER_FAILURES', '-1'],
    ['HERALD_DISABLE_AFTER_FAILURES', '2.5'],
  ] as const) {
    assert.throws(
      () => loadConfig({ ...base, [name]: raw }),
      new RegExp(name),
      `${name}=${JSON.stringify(raw)}`,
    );
  }
  assert.equal(loadConfig({ ...base, HERALD_DISABLE_AFTER_FAILURES: ' 7 ' }).disableAfterFailures, 7);
});

test('a private-network CIDR that is no CIDR stops start-up naming the variable', () => {
  // Old IPv4 spellings too: ipaddr.js reads `010.0.0.0/8` as 8.0.0.0/8, another network.
  for (const cidr of ['10.0.0.0/99', '300.0.0.0/8', 'fe80::/129', '010.0.0.0/8', '127.1/8', '0x7f.0.0.0/8']) {
    assert.throws(
      () => loadConfig({ ...base, HERALD_ALLOW_PRIVATE_NETWORKS: cidr }),
      /HERALD_ALLOW_PRIVATE_NETWORKS/,
      cidr,
    );
  }
  assert.deepEqual(
    loadConfig({ ...base, HERALD_ALLOW_PRIVATE_NETWORKS: '10.0.0.0/8, ::1/128' }).allowPrivateNetworks,
    ['10.0.0.0/8', '::1/128'],
  );
});

test('the pooler settings: a flag is true or false; the LISTEN URL is a postgres URL, not echoed, and only beside DATABASE_URL', () => {
  assert.equal(loadConfig(base).dbPrepare, true);
  assert.equal(loadConfig({ ...base, HERALD_DB_PREPARE: 'false' }).dbPrepare, false);
  assert.throws(
    () => loadConfig({ ...base, HERALD_DB_PREPARE: 'no' }),
    /HERALD_DB_PREPARE: expected true or false/,
  );
  const secret = 'mysql://user:s3cret@db/herald';
  assert.throws(
    () => loadConfig({ ...base, HERALD_LISTEN_DATABASE_URL: secret }),
    (error: Error) => /HERALD_LISTEN_DATABASE_URL/.test(error.message) && !error.message.includes('s3cret'),
  );
  const { DATABASE_URL: _, ...embedded } = base;
  assert.throws(
    () => loadConfig({ ...embedded, HERALD_LISTEN_DATABASE_URL: 'postgres://postgres@127.0.0.1/test' }),
    /HERALD_LISTEN_DATABASE_URL: expected set only with DATABASE_URL/,
  );
  assert.equal(
    loadConfig({ ...base, HERALD_LISTEN_DATABASE_URL: 'postgres://postgres@127.0.0.1:5432/test' })
      .listenDatabaseUrl,
    'postgres://postgres@127.0.0.1:5432/test',
  );
});

test("invariant 8's budgets are the defaults: 8 attempts a cycle on the documented schedule, ±20 % jitter, disabled after 5 known failures", async () => {
  const { HERALD_RETRY_SCHEDULE: _schedule, ...defaults } = base;
  const config = loadConfig(defaults);
  // Immediately, then 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h.
  assert.deepEqual(config.retrySchedule, [5, 300, 1800, 7200, 18_000, 36_000, 36_000]);
  assert.equal(config.disableAfterFailures, 5);
  // The jitter of the policy herald runs with, not only of a constant.
  const t = await startTestHerald('config_defaults', { worker: false });
  try {
    assert.equal(t.herald.core.policy.jitter, 0.2);
  } finally {
    await t.close();
  }
});
