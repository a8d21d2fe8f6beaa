// A worker on a host whose wall clock is wrong keeps every rule that is timed against the lease or
// the database: it starts a request only while the attempt's whole deadline fits in the lease as
// the database runs it (invariant 4: one request in flight per endpoint), it schedules retries by
// the database's clock, and it timestamps signatures by it — whether its clock ran behind from the
// start or was stepped back while a request waited. The worker is a real `herald worker` process
// with its clock shifted (test/support/clock-offset.ts); the database, the receivers and this test
// keep the host's clock.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { loadConfig } from '../src/config.ts';
import { createHerald, type Herald } from '../src/herald.ts';
import { freshDatabase, type TestDatabase } from './support/database.ts';
import { testEnv } from './support/herald.ts';
import { type HeraldProcess, killAll, startHerald } from './support/processes.ts';
import { type ReceivedRequest, startReceiver } from './support/receiver.ts';
import { addEndpoint, seedApp } from './support/seed.ts';
import { waitFor } from './support/wait.ts';

const LEASE_MS = 3000;
const ATTEMPT_TIMEOUT_MS = 2500;
/**
 * The latest a request may start after its claim: later, its deadline and the time kept to record
 * its outcome (half of what the lease leaves beyond the deadline) would outlast the lease.
 */
const START_LIMIT_MS = (LEASE_MS - ATTEMPT_TIMEOUT_MS) / 2;
const RETRY_SECONDS = 60;
const JITTER = 0.2;
const CONGESTED =
  'congested: the request waited for a connection to its origin past its start limit; not sent';
const CLOCK_OFFSET = fileURLToPath(new URL('./support/clock-offset.ts', import.meta.url));

let database: TestDatabase;
let herald: Herald;

before(async () => {
  database = await freshDatabase('clock_skew');
  herald = await createHerald({ config: loadConfig(testEnv(database.url)), migrate: false });
});

after(async () => {
  await killAll();
  await herald?.close();
  await database?.drop();
});

interface AttemptRow {
  endpointUrl: string;
  outcome: string | null;
  startedAt: Date;
  finishedAt: Date | null;
  nextAttemptAt: Date | null;
}

async function attempts(messageId: string): Promise<AttemptRow[]> {
  const { rows } = await database.db.query<AttemptRow>(
    `select e.url as "endpointUrl", a.outcome, a.started_at as "startedAt", a.finished_at as "finishedAt",
            d.next_attempt_at as "nextAttemptAt"
       from attempt a join delivery d on d.id = a.delivery_id join endpoint e on e.id = d.endpoint_id
      where d.message_id = $1 order by a.started_at`,
    [messageId],
  );
  return rows;
}

interface Run {
  worker: HeraldProcess;
  shared: { url: string; requests: ReceivedRequest[] };
  failing: { url: string; requests: ReceivedRequest[] };
  rows: AttemptRow[];
}

/**
 * Two endpoints share an origin and its one connection; the first request to arrive there hangs
 * past its deadline, so the other endpoint's request waits for the connection. A third endpoint,
 * elsewhere, answers 500. One message to the three, delivered by a worker whose clock is shifted
 * as `clock` says; `onFirstRequest` runs as soon as the hanging request has arrived.
 */
async function congestedOrigin(
  uid: string,
  clock: Record<string, string>,
  onFirstRequest: (worker: HeraldProcess) => void = () => {},
): Promise<Run> {
  const shared = await startReceiver((_request, n) => (n === 1 ? 'hang' : { status: 204 }));
  const failing = await startReceiver(() => ({ status: 500 }));
  try {
    const app = await seedApp(database.db, uid);
    for (const url of [`${shared.url}/a`, `${shared.url}/b`, `${failing.url}/c`]) {
      await addEndpoint(herald, database.db, app, { url });
    }
    const { message } = await herald.publish(uid, { eventType: 'invoice.paid', payload: { n: 1 } });
    const { proc: worker } = await startHerald(
      'worker',
      testEnv(database.url, {
        NODE_OPTIONS: `--import ${CLOCK_OFFSET}`,
        ...clock,
        HERALD_CONNECTIONS_PER_ORIGIN: '1',
        HERALD_LEASE_SECONDS: String(LEASE_MS / 1000),
        HERALD_ATTEMPT_TIMEOUT_MS: String(ATTEMPT_TIMEOUT_MS),
        HERALD_RETRY_SCHEDULE: String(RETRY_SECONDS),
        LOG_LEVEL: 'info',
      }),
      { name: `worker (${uid})` },
    );
    await waitFor('the first request at the shared origin', () => shared.requests.length >= 1);
    onFirstRequest(worker);
    // The hung request's attempt ends at its deadline; the other endpoint's is sent after it.
    await waitFor(
      'both endpoints at the shared origin to have an answered or timed-out attempt, and the failing one its 500',
      async () => {
        const rows = await attempts(message.id);
        const finished = (prefix: string) =>
          rows.some((r) => r.endpointUrl.startsWith(prefix) && r.finishedAt);
        return (
          shared.requests.length >= 2 &&
          finished(`${shared.url}/a`) &&
          finished(`${shared.url}/b`) &&
          finished(failing.url)
        );
      },
      20_000,
    );
    const rows = await attempts(message.id);
    await worker.kill('SIGTERM');
    return { worker, shared, failing, rows };
  } finally {
    await shared.close();
    await failing.close();
  }
}

/**
 * Each request at the shared origin left within its lease's start limit as the database keeps
 * time: the one that waited for the hung one's connection did not go out on a lease the database
 * had nearly ended, but was given back unsent (the slack covers the trip from the worker's check
 * to the receiver on a busy machine).
 */
function assertStartedWithinLeases({ worker, shared, rows }: Run): void {
  for (const request of shared.requests) {
    // The request's attempt: its endpoint's latest to start before it arrived.
    const own = rows
      .filter((r) => r.endpointUrl === `${shared.url}${request.path}`)
      .findLast((r) => r.startedAt.getTime() <= request.startedAt)!;
    const afterClaimMs = request.startedAt - own.startedAt.getTime();
    assert.ok(
      afterClaimMs <= START_LIMIT_MS + 700,
      `${request.path} arrived ${afterClaimMs} ms into its attempt's lease; the start limit is ${START_LIMIT_MS} ms`,
    );
  }
  assert.ok(
    worker.logs.some((l) => l.msg === CONGESTED),
    'the waiting request was given back unsent at its start limit',
  );
}

test('a worker whose clock runs two minutes behind the database starts no request its lease cannot cover, and retries and signs by the database clock', async () => {
  const run = await congestedOrigin('behind', { TEST_CLOCK_OFFSET_MS: '-120000' });
  assertStartedWithinLeases(run);

  // The 500's retry is due one schedule step after the attempt by the database's clock, not two
  // minutes early.
  const failed = run.rows.find((r) => r.endpointUrl.startsWith(run.failing.url))!;
  assert.equal(failed.outcome, 'failure');
  assert.ok(failed.nextAttemptAt, 'the retry is still to come: its budget was not spent early');
  const dueInS = (failed.nextAttemptAt.getTime() - failed.finishedAt!.getTime()) / 1000;
  assert.ok(
    dueInS >= RETRY_SECONDS * (1 - JITTER) - 1 && dueInS <= RETRY_SECONDS * (1 + JITTER) + 1,
    `the retry is due ${dueInS} s after the failed attempt; the schedule says ${RETRY_SECONDS} s ± ${JITTER * 100} %`,
  );

  // Signatures carry the database's time, which receivers (here, on the same host) share.
  for (const request of [...run.shared.requests, ...run.failing.requests]) {
    const signedAt = Number(request.headers['webhook-timestamp']) * 1000;
    assert.ok(
      Math.abs(signedAt - request.startedAt) <= 2000,
      `signed at ${new Date(signedAt).toISOString()}, received at ${new Date(request.startedAt).toISOString()}`,
    );
  }
});

test('a worker whose clock is stepped back while a request waits for its origin still gives the request back at its start limit', async () => {
  // Stepped back 20 s just after the claim (NTP correcting a drift, a VM resumed): a start limit
  // read on the wall clock would now lie 20 s ahead, and the waiting request would go out when
  // the hung one let go of the connection, 2.5 s into a 3 s lease.
  const run = await congestedOrigin('stepped', { TEST_CLOCK_STEP_MS: '-20000' }, (worker) =>
    worker.signal('SIGUSR2'),
  );
  assertStartedWithinLeases(run);
});
