// Host name lookups that take long must hold up nothing else:
// - an endpoint's URL is checked (its name resolved, every address judged) before the transaction
//   that creates or changes the endpoint begins: a transaction held open meanwhile keeps a pooled
//   connection — with the embedded database, the only one, so every claim and outcome write would
//   wait behind it;
// - concurrent lookups of one name share one: a lookup takes one of node's few pool threads until
//   the system resolver gives up, so a slow name's connections must not take them all.
//
// The system resolver is the one seam: this process's dns.promises.lookup answers one name only
// when the test lets it (nothing here can make a real name resolve slowly on demand).

import assert from 'node:assert/strict';
import dnsPromises from 'node:dns/promises';
import { syncBuiltinESMExports } from 'node:module';
import { after, before, test } from 'node:test';
import { checkingResolver, systemResolver, UNPROVEN_LOOKUPS } from '../src/sender/resolve.ts';
import { createApp, createEndpoint } from './support/fixtures.ts';
import { startTestHerald, type TestHerald } from './support/herald.ts';
import { waitFor } from './support/wait.ts';

const SLOW_NAME = 'slow-dns.herald.test';
/** Names under it are held, as SLOW_NAME is: names whose servers have not answered yet. */
const HELD_ZONE = 'held.herald.test';
/** Answered at once. */
const PROMPT_NAME = 'prompt-dns.herald.test';
/** Answered at once too, and only ever looked up by a registration check. */
const CHECKED_NAME = 'checked-dns.herald.test';
/** Resolves to the loopback receiver's address until `nameMoved`; then to the cloud metadata address. */
const MOVING_NAME = 'moving-dns.herald.test';
let nameMoved = false;

let t: TestHerald;
const originalLookup = dnsPromises.lookup;
let pending: Array<() => void> = [];
let slowLookups = 0;
/** Every name this process's system resolver was asked for, in order. */
const lookedUp: string[] = [];

before(async () => {
  t = await startTestHerald('endpoint_dns', { worker: false });
  const held = (async (hostname: string, options: unknown) => {
    lookedUp.push(hostname);
    if (hostname === MOVING_NAME)
      return [{ address: nameMoved ? '169.254.169.254' : '127.0.0.1', family: 4 }];
    if (hostname === PROMPT_NAME || hostname === CHECKED_NAME) return [{ address: '127.0.0.1', family: 4 }];
    if (hostname !== SLOW_NAME && !hostname.endsWith(`.${HELD_ZONE}`))
      return originalLookup(hostname, options as never);
    slowLookups++;
    await new Promise<void>((resolve) => pending.push(resolve));
    return [{ address: '127.0.0.1', family: 4 }];
  }) as typeof dnsPromises.lookup;
  dnsPromises.lookup = held;
  syncBuiltinESMExports();
});
after(async () => {
  dnsPromises.lookup = originalLookup;
  syncBuiltinESMExports();
  await t.close();
});

/** Sessions of the test database inside a transaction now (herald's pool, while it waits on DNS). */
async function openTransactions(): Promise<number> {
  const { rows } = await t.database.db.query<{ n: number }>(
    `select count(*)::int as n from pg_stat_activity
      where datname = current_database() and pid <> pg_backend_pid() and state like 'idle in transaction%'`,
  );
  return rows[0]!.n;
}

/** Starts `request`, waits until its lookup is held, checks no transaction is open, lets it go. */
async function whileResolving<T>(request: () => Promise<T>): Promise<T> {
  pending = [];
  const answer = request();
  await waitFor('the lookup to be held', () => pending.length > 0);
  assert.equal(await openTransactions(), 0, 'no transaction is open while the name resolves');
  for (const release of pending) release();
  return answer;
}

test('creating, replacing and patching an endpoint resolve its new URL before any transaction begins', async () => {
  const app = await createApp(t, 'dns');
  const url = `http://${SLOW_NAME}:9/hook`;

  const created = await whileResolving(() => t.call('POST', `/api/v1/app/${app}/endpoint`, { url }));
  assert.equal(created.status, 201, JSON.stringify(created.body));

  const other = await createEndpoint(t, app, { url: 'http://127.0.0.1:9/other' });
  const patched = await whileResolving(() =>
    t.call('PATCH', `/api/v1/app/${app}/endpoint/${other}`, { url: `${url}/patched` }),
  );
  assert.equal(patched.status, 200, JSON.stringify(patched.body));
  assert.equal(patched.body.url, `${url}/patched`);

  const replaced = await whileResolving(() =>
    t.call('PUT', `/api/v1/app/${app}/endpoint/${other}`, { url: `${url}/replaced` }),
  );
  assert.equal(replaced.status, 200, JSON.stringify(replaced.body));
  assert.equal(replaced.body.url, `${url}/replaced`);

  const upserted = await whileResolving(() =>
    t.call('PUT', `/api/v1/app/${app}/endpoint/new-by-put`, { url: `${url}/new` }),
  );
  assert.equal(upserted.status, 201, JSON.stringify(upserted.body));
});

test('concurrent lookups of one name make one system lookup; the next one asks again', async () => {
  pending = [];
  slowLookups = 0;
  const answers = Array.from({ length: 10 }, () => systemResolver(SLOW_NAME));
  await waitFor('the lookup to be held', () => pending.length > 0);
  assert.equal(slowLookups, 1);
  for (const release of pending) release();
  for (const answer of await Promise.all(answers))
    assert.deepEqual(answer, [{ address: '127.0.0.1', family: 4 }]);
  // Nothing kept: a lookup after the answer asks the system again.
  pending = [];
  const again = systemResolver(SLOW_NAME);
  await waitFor('the second lookup to be held', () => pending.length > 0);
  assert.equal(slowLookups, 2);
  for (const release of pending) release();
  await again;
});

test('names not proven lately take at most half of the lookup threads; a proven name is looked up at once', async () => {
  // A tenant's names whose servers never answer would otherwise hold every thread of node's pool,
  // and every other tenant's lookups would time out behind them.
  pending = [];
  slowLookups = 0;
  const loopback = [{ address: '127.0.0.1', family: 4 }];
  // Answered promptly to a delivery's lookup: proven. To a registration check: not.
  assert.deepEqual(await systemResolver(PROMPT_NAME), loopback);
  assert.deepEqual(await checkingResolver(CHECKED_NAME), loopback);
  // At most half of node's lookup threads: the others stay free for proven names.
  const threads = Number(process.env['UV_THREADPOOL_SIZE']) || 4;
  assert.ok(UNPROVEN_LOOKUPS >= 1 && UNPROVEN_LOOKUPS * 2 <= threads, `${UNPROVEN_LOOKUPS} of ${threads}`);
  const stuck = Array.from({ length: UNPROVEN_LOOKUPS }, (_, i) => systemResolver(`n${i}.${HELD_ZONE}`));
  await waitFor('the unproven lane to be full', () => slowLookups === UNPROVEN_LOOKUPS);
  // One more unproven name waits for a place, with no lookup of its own meanwhile...
  const late = systemResolver(`late.${HELD_ZONE}`);
  // ...while the proven name is looked up at once.
  assert.deepEqual(await systemResolver(PROMPT_NAME), loopback);
  assert.equal(slowLookups, UNPROVEN_LOOKUPS, 'the late lookup waits for a place');
  // The name a registration check resolved waits as an unproven one does: behind the late one.
  const checked = systemResolver(CHECKED_NAME);
  const from = lookedUp.length;
  // A place frees up: the late one is looked up.
  pending.shift()!();
  await waitFor('the late lookup to start', () => slowLookups === UNPROVEN_LOOKUPS + 1);
  for (const release of pending) release();
  for (const answer of await Promise.all([...stuck, late, checked])) assert.deepEqual(answer, loopback);
  assert.deepEqual(
    lookedUp.slice(from),
    [`late.${HELD_ZONE}`, CHECKED_NAME],
    'a registration check proves nothing: its name waited its turn',
  );
});

test('a repeated endpoint creation gets its kept answer even when its URL would be refused now', async () => {
  const app = await createApp(t, 'dns-repeat');
  const url = `http://${MOVING_NAME}:9/hook`;
  const create = () =>
    t.call('POST', `/api/v1/app/${app}/endpoint`, { url }, { 'idempotency-key': 'ep-create-1' });
  nameMoved = false;
  const first = await create();
  assert.equal(first.status, 201, JSON.stringify(first.body));
  nameMoved = true;
  try {
    const repeat = await create();
    assert.equal(repeat.status, 201, JSON.stringify(repeat.body));
    assert.equal(repeat.body.id, first.body.id);
    // The check itself is live: a new request for that URL is refused (a forbidden address).
    const fresh = await t.call('POST', `/api/v1/app/${app}/endpoint`, { url });
    assert.equal(fresh.status, 422, JSON.stringify(fresh.body));
  } finally {
    nameMoved = false;
  }
});
