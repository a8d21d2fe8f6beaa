// herald scales out as stateless processes over one PostgreSQL. Three `herald worker` and two
// `herald api` processes share one database; 300 endpoints in three apps all point at one real
// receiver (its own process, a path per endpoint) that holds each request 0–20 ms. 3,000 messages
// are published through both API processes at once (6,000 deliveries), and one worker is SIGKILLed
// mid-run while the receiver holds a request of its own; it is restarted once its leases were
// recovered. Then, from the receiver's log and the database: (a) every delivery succeeded; (b)
// attempts and requests account for each other one to one (a success per answered request, an
// unknown for what the dead worker left); (c) no endpoint ever had two requests in flight; (d)
// every lease recovered as expired had expired, nothing took its delivery before that, and the dead
// worker's were recovered only after its death.
//
// The checker is tried first on small hand-made histories: each check passes a correct one and
// fails a broken one.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { freshDatabase, type TestDatabase } from './support/database.ts';
import { ADMIN_KEY, testEnv } from './support/herald.ts';
import { type HeraldProcess, killAll, type StartedHerald, startHerald } from './support/processes.ts';
import {
  type AttemptRow,
  callApi,
  checkScaleOut,
  connectionPortsOf,
  type HeldRequest,
  inParallel,
  type ReceiverProcess,
  readAttempts,
  readDeliveries,
  type ScaleOutHistory,
  scrapeCounter,
  startReceiverProcess,
  takeKillSnapshot,
} from './support/scale-out.ts';
import { waitFor } from './support/wait.ts';

// ---- the checker on hand-made histories -----------------------------------------------------------

const T = 1_800_000_000_000;
const LEASE_MS = 2000;

function baseline(): ScaleOutHistory {
  // One message to one endpoint: the dead worker's attempt reached the receiver and was never
  // answered; its lease was recovered after it expired; a live worker then delivered it.
  const lost: AttemptRow = {
    id: 'atmpt_1',
    deliveryId: 'dlv_1',
    messageId: 'msg_1',
    endpointId: 'ep_1',
    leaseToken: 'lease-1',
    startedAt: T,
    finishedAt: T + LEASE_MS + 300,
    outcome: 'unknown',
    statusCode: null,
    responseClass: 'lease_expired',
  };
  const retried: AttemptRow = {
    ...lost,
    id: 'atmpt_2',
    leaseToken: 'lease-2',
    startedAt: T + LEASE_MS + 300,
    finishedAt: T + LEASE_MS + 330,
    outcome: 'success',
    statusCode: 204,
    responseClass: 'http_2xx',
  };
  const request = (seq: number, startedAt: number, answered: boolean): HeldRequest => ({
    seq,
    path: '/ep/1',
    webhookId: 'msg_1',
    startedAt,
    endedAt: startedAt + 10,
    wallAt: startedAt,
    answered,
    status: answered ? 204 : null,
    remotePort: 40000 + seq,
  });
  return {
    expected: new Map([['msg_1', new Set(['ep_1'])]]),
    endpointOfPath: new Map([['/ep/1', 'ep_1']]),
    requests: [request(1, T + 5, false), request(2, T + LEASE_MS + 310, true)],
    deliveries: [
      {
        id: 'dlv_1',
        messageId: 'msg_1',
        endpointId: 'ep_1',
        state: 'succeeded',
        attemptsTotal: 2,
        leaseToken: null,
      },
    ],
    attempts: [lost, retried],
    kill: {
      killedAt: T + 10,
      open: new Map([
        [
          'lease-1',
          {
            attemptId: 'atmpt_1',
            deliveryId: 'dlv_1',
            claimId: 'claim-1',
            startedAt: T,
            leaseExpiresAt: T + LEASE_MS,
          },
        ],
      ]),
    },
    leaseMs: LEASE_MS,
    leasesLostByLiveWorkers: new Set(),
    givenBackByLiveWorkers: new Set(),
  };
}

const failing = (history: ScaleOutHistory) => [
  ...new Set(checkScaleOut(history).violations.map((v) => v.check)),
];

describe('scale-out checker', () => {
  test('a correct history passes', () => {
    const result = checkScaleOut(baseline());
    assert.deepEqual(result.violations, []);
    assert.equal(result.counts['leases.recovered'], 1);
    assert.equal(result.attemptOfRequest.get(1)?.id, 'atmpt_1');
    assert.equal(result.attemptOfRequest.get(2)?.id, 'atmpt_2');
  });

  test("the wall clock moved against the receiver's during the run: said, with by how much", () => {
    const steady = checkScaleOut(baseline());
    assert.equal(steady.counts['receiver_clock_drift_ms'], 0);
    assert.deepEqual(steady.notes, []);
    const adjusted = baseline();
    adjusted.requests = [
      adjusted.requests[0]!,
      { ...adjusted.requests[1]!, wallAt: adjusted.requests[1]!.wallAt + 60 },
    ];
    const result = checkScaleOut(adjusted);
    assert.equal(result.counts['receiver_clock_drift_ms'], 60);
    assert.match(result.notes.join('\n'), /moved 60\.0 ms apart/);
  });

  test('a: a delivery left pending, and a message missing a delivery', () => {
    const history = baseline();
    history.deliveries = [{ ...history.deliveries[0]!, state: 'pending' }];
    assert.deepEqual(failing(history), ['a']);
    const missing = baseline();
    missing.expected.get('msg_1')!.add('ep_2');
    assert.deepEqual(failing(missing), ['a']);
  });

  test('b: a request no attempt accounts for, and a success the receiver never answered', () => {
    const history = baseline();
    history.requests = [...history.requests, { ...history.requests[1]!, seq: 3, startedAt: T + 4000 }];
    assert.deepEqual(failing(history), ['b']);
    const unanswered = baseline();
    unanswered.requests = [unanswered.requests[0]!, { ...unanswered.requests[1]!, answered: false }];
    assert.ok(failing(unanswered).includes('b'));
  });

  test('c: two requests in flight at one endpoint', () => {
    // A second message to the same endpoint, whose request arrives while the first one is answered.
    const history = baseline();
    const at = T + LEASE_MS + 312;
    history.expected.set('msg_2', new Set(['ep_1']));
    history.deliveries = [
      ...history.deliveries,
      { ...history.deliveries[0]!, id: 'dlv_2', messageId: 'msg_2', attemptsTotal: 1 },
    ];
    history.attempts = [
      ...history.attempts,
      {
        ...history.attempts[1]!,
        id: 'atmpt_3',
        deliveryId: 'dlv_2',
        messageId: 'msg_2',
        leaseToken: 'lease-3',
        startedAt: at - 5,
        finishedAt: at + 20,
      },
    ];
    history.requests = [
      ...history.requests,
      { ...history.requests[1]!, seq: 3, webhookId: 'msg_2', startedAt: at, endedAt: at + 10 },
    ];
    assert.deepEqual(failing(history), ['c']);
  });

  test('b, c: a request read only after herald gave up on it is its unknown attempt’s, and no overlap', () => {
    // herald timed out at T + 1500 and recorded unknown; the busy receiver read the bytes at
    // T + 1600, while herald's next attempt — on another connection — was already answered.
    const history = baseline();
    history.kill.open.clear();
    history.attempts = [
      { ...history.attempts[0]!, finishedAt: T + 1500, responseClass: 'timeout' },
      { ...history.attempts[1]!, startedAt: T + 1520, finishedAt: T + 1700 },
    ];
    history.requests = [
      { ...history.requests[0]!, startedAt: T + 1600, endedAt: T + 1650 },
      { ...history.requests[1]!, startedAt: T + 1590, endedAt: T + 1620 },
    ];
    const result = checkScaleOut(history);
    assert.deepEqual(result.violations, []);
    assert.equal(result.counts['requests.read_after_herald_gave_up'], 1);
    // Had herald not given up yet, the two would have overlapped.
    history.attempts = [{ ...history.attempts[0]!, finishedAt: T + 1660 }, history.attempts[1]!];
    assert.deepEqual(failing(history), ['c']);
  });

  test('d: a lease recovered early, one longer than claim + lease, a dead worker’s lease a live one lost, a delivery taken early', () => {
    const early = baseline();
    early.attempts = [{ ...early.attempts[0]!, finishedAt: T + LEASE_MS - 1 }, early.attempts[1]!];
    assert.deepEqual(failing(early), ['d']);
    const stretched = baseline();
    stretched.kill.open.get('lease-1')!.leaseExpiresAt = T + LEASE_MS + 400;
    assert.deepEqual(failing(stretched), ['d']);
    // A live worker's lease that ran out is within herald's contract: a note, unless it was early.
    const live = baseline();
    live.kill.open.clear();
    assert.deepEqual(failing(live), []);
    assert.equal(checkScaleOut(live).notes.length, 1);
    live.attempts = [{ ...live.attempts[0]!, finishedAt: T + LEASE_MS - 1 }, live.attempts[1]!];
    assert.deepEqual(failing(live), ['d']);
    const lost = baseline();
    lost.leasesLostByLiveWorkers = new Set(['dlv_1']);
    assert.deepEqual(failing(lost), ['d']);
    const taken = baseline();
    taken.attempts = [taken.attempts[0]!, { ...taken.attempts[1]!, startedAt: T + LEASE_MS - 100 }];
    assert.ok(failing(taken).includes('d'));
  });

  test('d: a lease open at the kill whose attempt is gone passes only if a live worker gave it back unsent', () => {
    // The attempt open at the kill was never sent: its worker gave the lease back (attempt row
    // removed, budget kept) and the next attempt succeeded.
    const givenBack = (): ScaleOutHistory => {
      const history = baseline();
      history.requests = [history.requests[1]!];
      history.attempts = [history.attempts[1]!];
      history.deliveries = [{ ...history.deliveries[0]!, attemptsTotal: 1 }];
      return history;
    };
    assert.deepEqual(failing(givenBack()), ['d']);
    for (const evidence of ['dlv_1', 'claim-1']) {
      const history = givenBack();
      history.givenBackByLiveWorkers = new Set([evidence]);
      const result = checkScaleOut(history);
      assert.deepEqual(result.violations, [], evidence);
      assert.equal(result.counts['leases.open_at_kill_given_back_unsent'], 1);
    }
    // Said to be given back, yet its request reached the receiver: no attempt accounts for it.
    const sent = givenBack();
    sent.givenBackByLiveWorkers = new Set(['dlv_1']);
    sent.requests = baseline().requests;
    assert.deepEqual(failing(sent), ['b']);
  });
});

// ---- the real thing ------------------------------------------------------------------------------

const APPS = 3;
const ENDPOINTS_PER_APP = 100;
/** Each event type is subscribed by ENDPOINTS_PER_APP / EVENT_TYPES endpoints of its app (2). */
const EVENT_TYPES = 50;
const MESSAGES = 3000;
const LEASE_SECONDS = 2;
/** The worker is killed once this many requests have arrived (of about 6,000). */
const KILL_AFTER_REQUESTS = 600;

const ENV = {
  // The attempt deadline must stay below the lease (config refuses otherwise).
  HERALD_LEASE_SECONDS: String(LEASE_SECONDS),
  HERALD_ATTEMPT_TIMEOUT_MS: '1500',
  HERALD_API_RATE_LIMIT: '0',
  // All 300 endpoints share one origin, and a worker holds more claims than it has connections
  // to it: the surplus waits at herald's per-origin gate, its deadline not yet running.
  HERALD_CONNECTIONS_PER_ORIGIN: '8',
  HERALD_WORKER_CONCURRENCY: '24',
  HERALD_SHUTDOWN_GRACE_MS: '3000',
  // Auto-disable is not under test here: a busy 2-core host can make a few attempts time out
  // before they leave (a known failure), and a disabled endpoint would leave its deliveries waiting.
  HERALD_DISABLE_AFTER_FAILURES: '1000',
  // Workers serve /metrics on a port of their own: what each one recorded.
  HERALD_METRICS_PORT: '0',
  // info, not debug: a worker that logs every attempt to a pipe its busy parent drains slowly
  // stalls on the writes and misses its deadlines.
  LOG_LEVEL: 'info',
};

let database: TestDatabase;
let receiver: ReceiverProcess;

before(async () => {
  database = await freshDatabase('scale_out');
  receiver = await startReceiverProcess();
});

after(async () => {
  await killAll();
  await receiver?.close();
  await database?.drop();
});

const logsOf = (proc: HeraldProcess, msg: string) => proc.logs.filter((r) => r.msg === msg);
const metricsUrlOf = (p: StartedHerald) =>
  String(p.proc.logs.find((r) => r.msg === 'herald started')?.['metrics']);

test('3 workers and 2 APIs on one database: a worker killed mid-run, every delivery once per attempt', {
  timeout: 300_000,
}, async () => {
  const t0 = Date.now();
  const env = testEnv(database.url, ENV);
  const startWorker = (name: string) => startHerald('worker', env, { name });
  const [api1, api2, ...workers] = await Promise.all([
    startHerald('api', env, { name: 'api-1' }),
    startHerald('api', env, { name: 'api-2' }),
    startWorker('worker-1'),
    startWorker('worker-2'),
    startWorker('worker-3'),
  ]);
  const apis = [api1!.apiUrl!, api2!.apiUrl!];
  const victim = workers[2]!;

  // Three apps of 100 endpoints; endpoint i belongs to app i % 3 and subscribes to one event type.
  const endpointOfPath = new Map<string, string>();
  const subscribers = new Map<string, string[]>();
  const typeOf = (i: number) => `scale.t${Math.floor(i / APPS) % EVENT_TYPES}`;
  for (let a = 0; a < APPS; a++) {
    const created = await callApi(apis[a % 2]!, ADMIN_KEY, 'POST', '/api/v1/app', {
      name: `scale ${a}`,
      uid: `scale-${a}`,
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
  }
  await inParallel(APPS * ENDPOINTS_PER_APP, 16, async (i) => {
    const path = `/ep/${i}`;
    const created = await callApi(apis[i % 2]!, ADMIN_KEY, 'POST', `/api/v1/app/scale-${i % APPS}/endpoint`, {
      url: receiver.url + path,
      filterTypes: [typeOf(i)],
    });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    endpointOfPath.set(path, created.body.id);
    const key = `${i % APPS}|${typeOf(i)}`;
    subscribers.set(key, [...(subscribers.get(key) ?? []), created.body.id]);
  });
  const setupMs = Date.now() - t0;

  // Publish through both APIs at once (message i to app i % 3, with the same event-type rule, so
  // each message goes to two endpoints), while one worker is killed mid-run.
  const expected = new Map<string, Set<string>>();
  const acceptedBy = [0, 0];
  let published = 0;
  const publishStarted = Date.now();
  const publishing = inParallel(MESSAGES, 24, async (i) => {
    const via = i % 2;
    const answer = await callApi(
      apis[via]!,
      ADMIN_KEY,
      'POST',
      `/api/v1/app/scale-${i % APPS}/msg`,
      { eventType: typeOf(i), payload: { n: i } },
      { 'idempotency-key': `scale-${i}` },
    );
    assert.equal(answer.status, 202, `message ${i} via api-${via + 1}: ${JSON.stringify(answer.body)}`);
    expected.set(answer.body.id, new Set(subscribers.get(`${i % APPS}|${typeOf(i)}`)));
    acceptedBy[via]!++;
    published++;
  }).then(() => Date.now() - publishStarted);

  // Kill the victim while the receiver holds one of its requests — held from then on until the
  // connection closes, so the dead worker certainly leaves behind a lease whose request reached the
  // receiver and was never answered. Once the survivors recovered its leases, it is restarted.
  const killing = (async () => {
    let ports = new Set<number>();
    let portsReadAt = 0;
    const target = await waitFor(
      'worker-3 to have a request held at the receiver, mid-run',
      async () => {
        if (receiver.requests.length < KILL_AFTER_REQUESTS) return null;
        // Reading /proc is not free, and the victim's keep-alive connections change rarely.
        if (Date.now() - portsReadAt > 100) {
          ports = connectionPortsOf(victim.proc.pid, receiver.port);
          portsReadAt = Date.now();
        }
        for (const r of receiver.open.values()) {
          if (ports.has(r.remotePort) && (await receiver.holdUntilClosed(r.seq))) return r;
        }
        throw new Error(
          `${published} published, ${receiver.requests.length} requests so far, worker-3's connections ` +
            `${[...ports].join(',') || 'none'}, requests held from ${[...receiver.open.values()].map((r) => r.remotePort).join(',') || 'none'}`,
        );
      },
      40_000,
      2,
    );
    const atKill = { atMs: Date.now() - t0, published, requests: receiver.requests.length };
    const exit = await victim.proc.kill('SIGKILL');
    assert.equal(exit.signal, 'SIGKILL', victim.proc.describe());
    const snapshot = await takeKillSnapshot(database.db);
    await waitFor(
      "the dead worker's expired leases to be recovered",
      async () => {
        const { rows } = await database.db.query<{ n: number }>(
          `select count(*)::int as n from attempt where response_class = 'lease_expired'`,
        );
        return rows[0]!.n > 0;
      },
      15_000,
    );
    const restarted = await startWorker('worker-3-restarted');
    return { target, atKill, snapshot, restarted, restartedAtMs: Date.now() - t0 };
  })();
  const [publishMs, killed] = await Promise.all([publishing, killing]);
  const { restarted } = killed;
  assert.equal(expected.size, MESSAGES, 'every publish got its own message id');
  assert.ok(killed.atKill.requests < MESSAGES, `the kill came after ${killed.atKill.requests} requests`);
  assert.ok(killed.snapshot.open.size > 0, 'leases were held when the worker died');

  const deliveries = [...expected.values()].reduce((n, s) => n + s.size, 0);
  assert.equal(deliveries, MESSAGES * (ENDPOINTS_PER_APP / EVENT_TYPES));
  await waitFor(
    `all ${deliveries} deliveries to succeed`,
    async () => {
      const { rows } = await database.db.query<{ total: number; succeeded: number }>(
        `select count(*)::int as total, count(*) filter (where state = 'succeeded')::int as succeeded from delivery`,
      );
      return rows[0]!.total === deliveries && rows[0]!.succeeded === deliveries;
    },
    60_000,
    100,
  );
  const drainedAtMs = Date.now() - t0;
  await waitFor('the receiver to have nothing in flight', () => receiver.open.size === 0, 5000);

  // Nobody but the victim died. What each live worker recorded, from its own /metrics; then
  // everyone stops cleanly.
  const live: StartedHerald[] = [api1!, api2!, workers[0]!, workers[1]!, restarted];
  const liveWorkers = [workers[0]!, workers[1]!, restarted];
  for (const p of live)
    assert.equal(p.proc.exitInfo, null, `${p.proc.name} exited on its own\n${p.proc.describe()}`);
  const recordedBy: Record<string, number> = {};
  let recoveredByMetrics = 0;
  for (const w of liveWorkers) {
    recordedBy[w.proc.name] = await scrapeCounter(metricsUrlOf(w), 'herald_attempts_total', {
      outcome: 'success',
    });
    recoveredByMetrics += await scrapeCounter(metricsUrlOf(w), 'herald_lease_recoveries_total');
  }
  for (const p of live) {
    const exit = await p.proc.kill('SIGTERM');
    assert.equal(exit.code, 0, p.proc.describe());
  }

  const lostLeases = liveWorkers.flatMap((w) => [
    ...logsOf(w.proc, 'lease lost before the outcome was recorded; result discarded'),
    ...logsOf(
      w.proc,
      'could not record the outcome within the lease; lease recovery will mark the attempt unknown',
    ),
  ]);
  const history: ScaleOutHistory = {
    expected,
    endpointOfPath,
    requests: receiver.requests,
    deliveries: await readDeliveries(database.db),
    attempts: await readAttempts(database.db),
    kill: killed.snapshot,
    leaseMs: LEASE_SECONDS * 1000,
    leasesLostByLiveWorkers: new Set(lostLeases.map((r) => String(r['deliveryId']))),
    givenBackByLiveWorkers: new Set(
      liveWorkers.flatMap((w) =>
        w.proc.logs
          .filter((r) => /(; not sent|given back unsent)$/.test(r.msg ?? ''))
          .map((r) => String(r['deliveryId'] ?? r['claimId'])),
      ),
    ),
  };
  const result = checkScaleOut(history);
  const { counts } = result;
  const recoveredInLogs = liveWorkers
    .flatMap((w) => logsOf(w.proc, 'recovered expired leases; attempts marked unknown'))
    .reduce((n, r) => n + Number(r['count']), 0);
  // Every success was recorded by exactly one process: what the live ones did not, the victim did.
  recordedBy['worker-3'] =
    (counts['attempts.success'] ?? 0) - Object.values(recordedBy).reduce((n, v) => n + v, 0);
  const notable = [...live, victim].flatMap((p) =>
    p.proc.logs
      .filter(
        (r) =>
          (r.level ?? 0) >= 40 && !/^(destinations may resolve|recovered expired leases)/.test(r.msg ?? ''),
      )
      .map((r) => `${p.proc.name}: ${JSON.stringify(r)}`),
  );
  console.log(
    JSON.stringify({
      ms: {
        setup: setupMs,
        publish: publishMs,
        kill: killed.atKill.atMs,
        restart: killed.restartedAtMs,
        drained: drainedAtMs,
      },
      messages: expected.size,
      acceptedBy,
      deliveries: history.deliveries.length,
      attempts: history.attempts.length,
      requests: history.requests.length,
      atKill: { ...killed.atKill, leasesOpen: killed.snapshot.open.size },
      recovered: { logs: recoveredInLogs, metrics: recoveredByMetrics },
      successesRecordedBy: recordedBy,
      receiverEventLoopDelayMs: await receiver.eventLoopDelay(),
      counts,
      notes: result.notes.length,
      otherWarnings: notable.length,
    }),
  );
  for (const line of [...result.notes, ...notable].slice(0, 20)) console.log(line);

  assert.deepEqual(
    result.violations.slice(0, 20).map((v) => `(${v.check}) ${v.detail}`),
    [],
    `${result.violations.length} violations`,
  );
  // The kill left what it was meant to: the held request was never answered, and it is accounted
  // for by the dead worker's attempt, recovered as unknown after its lease expired.
  const target = killed.target;
  assert.equal(target.answered, false, `request #${target.seq} was held when its worker died`);
  const lostAttempt = result.attemptOfRequest.get(target.seq);
  assert.equal(lostAttempt?.outcome, 'unknown', `request #${target.seq}: ${JSON.stringify(lostAttempt)}`);
  assert.equal(lostAttempt?.responseClass, 'lease_expired');
  assert.ok(killed.snapshot.open.has(lostAttempt.leaseToken));
  assert.ok((counts['leases.recovered_from_the_dead_worker'] ?? 0) > 0);
  // Each recovery the workers reported is a lease_expired attempt, and the other way round.
  assert.equal(recoveredInLogs, counts['leases.recovered']);
  assert.equal(recoveredByMetrics, counts['leases.recovered']);
  // The work really was shared: both survivors recorded successes; the live workers' counts add up
  // to no more than the database holds (the rest is what the victim recorded before it died).
  for (const name of ['worker-1', 'worker-2'])
    assert.ok((recordedBy[name] ?? 0) > 0, `${name} recorded no success: ${JSON.stringify(recordedBy)}`);
  assert.ok(recordedBy['worker-3']! >= 0, JSON.stringify(recordedBy));
});
