// Support for test/scale-out.test.ts: a receiver in a process of its own that holds every request a
// random few ms and logs its start and end on one monotonic clock; a way to find which of the
// receiver's connections belong to one process (so a worker can be killed while a request of its
// own is held); the database snapshots the test takes; and the checker that judges the history.
//
// The receiver runs in a child process because it must keep time: in the test's own process its
// event loop is shared with the load generator, and on a busy 2-core host new connections then
// wait seconds in its accept queue — long enough for herald's attempts to time out, which would
// test the test process instead of herald.

import { type ChildProcess, fork } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import type { AttemptRow as SoakAttemptRow } from '../../scripts/soak/checker.ts';
import type { Queryable } from '../../src/db/port.ts';

// ---- the receiver -------------------------------------------------------------------------------

/** Wall-clock milliseconds with sub-millisecond resolution, monotonic within one process. */
const clock = (): number => performance.timeOrigin + performance.now();

export interface HeldRequest {
  seq: number;
  path: string;
  webhookId: string | null;
  /** When the request arrived, and when its answer was handed to the socket or the socket closed. */
  startedAt: number;
  endedAt: number | null;
  /**
   * Date.now() at its arrival: the wall clock, which PostgreSQL's now() reads too. `clock()` was
   * anchored to it when the receiver started; the two drift apart when the system's time is
   * adjusted, and the checker says by how much.
   */
  wallAt: number;
  /** true: a status was written; false: the connection closed first (the client went away). */
  answered: boolean;
  status: number | null;
  /** The client's side of the connection, to tell which process sent it. */
  remotePort: number;
}

type FromReceiver =
  | { t: 'ready'; port: number }
  | { t: 'start'; request: HeldRequest }
  | { t: 'end'; seq: number; endedAt: number; answered: boolean; status: number | null }
  | { t: 'held'; seq: number; ok: boolean }
  | { t: 'delay'; p99: number; max: number };
type ToReceiver = { t: 'hold'; seq: number } | { t: 'delay' };

/** The child's side: serve, answer every request with 204 after 0–20 ms, report everything. */
async function serveReceiver(send: (m: FromReceiver) => void): Promise<void> {
  const open = new Map<number, { record: HeldRequest; holdUntilClosed: boolean }>();
  const delay = monitorEventLoopDelay({ resolution: 10 });
  delay.enable();
  let seq = 0;
  const server = http.createServer((req, res) => {
    const header = req.headers['webhook-id'];
    const record: HeldRequest = {
      seq: ++seq,
      path: req.url ?? '/',
      webhookId: typeof header === 'string' ? header : null,
      startedAt: clock(),
      endedAt: null,
      wallAt: Date.now(),
      answered: false,
      status: null,
      remotePort: req.socket.remotePort ?? -1,
    };
    const entry = { record, holdUntilClosed: false };
    open.set(record.seq, entry);
    send({ t: 'start', request: record });
    const end = (status: number | null) => {
      if (record.endedAt !== null) return;
      record.endedAt = clock();
      open.delete(record.seq);
      send({ t: 'end', seq: record.seq, endedAt: record.endedAt, answered: status !== null, status });
    };
    // The client went away before the answer (a killed worker, a timeout): it ends here, unanswered.
    res.on('close', () => end(null));
    req.resume();
    req.on('end', () => {
      setTimeout(() => {
        if (res.destroyed) return end(null);
        if (entry.holdUntilClosed) return;
        // The end is logged before the answer is written: nothing herald does next can precede it.
        end(204);
        res.writeHead(204).end();
      }, Math.random() * 20);
    });
  });
  server.keepAliveTimeout = 60_000;
  process.on('message', (m: ToReceiver) => {
    if (m.t === 'delay') send({ t: 'delay', p99: delay.percentile(99) / 1e6, max: delay.max / 1e6 });
    if (m.t === 'hold') {
      const entry = open.get(m.seq);
      if (entry) entry.holdUntilClosed = true;
      send({ t: 'held', seq: m.seq, ok: entry !== undefined });
    }
  });
  process.on('disconnect', () => process.exit(0));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  send({ t: 'ready', port: (server.address() as AddressInfo).port });
}

if (process.env['HERALD_SCALE_OUT_RECEIVER'] === '1' && process.send) {
  const send = process.send.bind(process);
  void serveReceiver((m) => send(m));
}

export interface ReceiverProcess {
  url: string;
  port: number;
  /** Every request, in arrival order, as the child reported it (a live mirror). */
  readonly requests: readonly HeldRequest[];
  /** Requests not yet ended. */
  readonly open: ReadonlyMap<number, HeldRequest>;
  /** Never answer request `seq`; hold it until its connection closes. false: it had ended. */
  holdUntilClosed(seq: number): Promise<boolean>;
  /** How late the receiver's event loop ran (ms): its own timing error. */
  eventLoopDelay(): Promise<{ p99: number; max: number }>;
  close(): Promise<void>;
}

export async function startReceiverProcess(): Promise<ReceiverProcess> {
  // Not NODE_TEST_CONTEXT: it would make the child report to the test runner like a test file.
  const env: NodeJS.ProcessEnv = { HERALD_SCALE_OUT_RECEIVER: '1' };
  for (const [key, value] of Object.entries(process.env)) if (key !== 'NODE_TEST_CONTEXT') env[key] ??= value;
  const child: ChildProcess = fork(fileURLToPath(import.meta.url), [], {
    env,
    execPath: process.execPath,
    execArgv: [],
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const requests: HeldRequest[] = [];
  const open = new Map<number, HeldRequest>();
  const waiting = new Map<string, (m: FromReceiver) => void>();
  const ready = new Promise<number>((resolve, reject) => {
    child.once('exit', (code) =>
      reject(new Error(`the receiver process exited (${code}) before it was ready`)),
    );
    child.on('message', (m: FromReceiver) => {
      switch (m.t) {
        case 'ready':
          resolve(m.port);
          break;
        case 'start':
          requests.push(m.request);
          open.set(m.request.seq, m.request);
          break;
        case 'end': {
          const r = open.get(m.seq);
          if (r) Object.assign(r, { endedAt: m.endedAt, answered: m.answered, status: m.status });
          open.delete(m.seq);
          break;
        }
        default: {
          const key = m.t === 'held' ? `held:${m.seq}` : 'delay';
          waiting.get(key)?.(m);
          waiting.delete(key);
        }
      }
    });
  });
  const ask = <T extends FromReceiver>(m: ToReceiver, key: string) =>
    new Promise<T>((resolve) => {
      waiting.set(key, resolve as (m: FromReceiver) => void);
      child.send(m);
    });
  const port = await ready;
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    requests,
    open,
    async holdUntilClosed(seq) {
      return (await ask<{ t: 'held'; seq: number; ok: boolean }>({ t: 'hold', seq }, `held:${seq}`)).ok;
    },
    async eventLoopDelay() {
      const { p99, max } = await ask<{ t: 'delay'; p99: number; max: number }>({ t: 'delay' }, 'delay');
      return { p99, max };
    },
    async close() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGKILL');
      await exited;
    },
  };
}

/**
 * The local ports of the TCP connections that process `pid` holds to 127.0.0.1:`remotePort`
 * (Linux: its socket inodes in /proc/PID/fd, looked up in /proc/net/tcp{,6}). The receiver sees
 * these as the remote ports of that process's requests.
 */
export function connectionPortsOf(pid: number, remotePort: number): Set<number> {
  const inodes = new Set<string>();
  for (const fd of fs.readdirSync(`/proc/${pid}/fd`)) {
    try {
      const link = /^socket:\[(\d+)\]$/.exec(fs.readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (link) inodes.add(link[1]!);
    } catch {
      // The descriptor closed while we looked.
    }
  }
  const ports = new Set<number>();
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    let text: string;
    try {
      text = fs.readFileSync(table, 'utf8');
    } catch {
      continue;
    }
    for (const line of text.split('\n').slice(1)) {
      const cols = line.trim().split(/\s+/);
      if (cols.length < 10 || !inodes.has(cols[9]!)) continue;
      const local = Number.parseInt(cols[1]!.split(':').pop()!, 16);
      const remote = Number.parseInt(cols[2]!.split(':').pop()!, 16);
      if (remote === remotePort) ports.add(local);
    }
  }
  return ports;
}

// ---- the API, over HTTP -------------------------------------------------------------------------

/** A JSON call to herald's API with a bearer token. */
export async function callApi(
  baseUrl: string,
  token: string,
  method: string,
  path: string,
  body?: unknown,
  headers: Record<string, string> = {},
  // biome-ignore lint/suspicious/noExplicitAny: tests inspect JSON responses loosely
): Promise<{ status: number; body: any }> {
  const response = await fetch(baseUrl + path, {
    method,
    headers: {
      authorization: `Bearer ${token}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      ...headers,
    },
    body: body === undefined ? null : JSON.stringify(body),
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}

/** The samples of one Prometheus counter at `metricsUrl`, summed over the series whose labels match. */
export async function scrapeCounter(
  metricsUrl: string,
  name: string,
  labels: Record<string, string> = {},
): Promise<number> {
  const text = await (await fetch(metricsUrl)).text();
  let total = 0;
  for (const line of text.split('\n')) {
    const sample = /^([a-z_]+)(\{[^}]*\})? (\S+)$/.exec(line);
    if (!sample || sample[1] !== name) continue;
    const set = sample[2] ?? '';
    if (Object.entries(labels).every(([k, v]) => set.includes(`${k}="${v}"`))) total += Number(sample[3]);
  }
  return total;
}

/** Runs `task(i)` for i in [0, n) with at most `width` at once; the first error rejects. */
export async function inParallel(
  n: number,
  width: number,
  task: (i: number) => Promise<void>,
): Promise<void> {
  let next = 0;
  const lanes = Array.from({ length: Math.min(width, n) }, async () => {
    while (next < n) await task(next++);
  });
  await Promise.all(lanes);
}

// ---- database snapshots -------------------------------------------------------------------------

export interface DeliveryRow {
  id: string;
  messageId: string;
  endpointId: string;
  state: string;
  attemptsTotal: number;
  leaseToken: string | null;
}

/** An attempt as the soak's checker reads it, without the cycle (every delivery here has one). */
export type AttemptRow = Omit<SoakAttemptRow, 'cycle'>;

/** The leases held right after the worker died, read from the database. */
export interface KillSnapshot {
  /** Database time read after the process was seen to exit: it was dead by then. */
  killedAt: number;
  /** Attempts open (no outcome) under their delivery's current lease, by lease token. */
  open: Map<
    string,
    { attemptId: string; deliveryId: string; claimId: string; startedAt: number; leaseExpiresAt: number }
  >;
}

export async function takeKillSnapshot(db: Queryable): Promise<KillSnapshot> {
  const now = await db.query<{ at: Date }>('select clock_timestamp() as at');
  const open = await db.query<{
    id: string;
    delivery_id: string;
    claim_id: string;
    lease_token: string;
    started_at: Date;
    lease_expires_at: Date;
  }>(
    `select a.id, a.delivery_id, a.claim_id, a.lease_token, a.started_at, d.lease_expires_at
       from attempt a join delivery d on d.id = a.delivery_id and d.lease_token = a.lease_token
      where a.outcome is null and d.state = 'sending'`,
  );
  return {
    killedAt: now.rows[0]!.at.getTime(),
    open: new Map(
      open.rows.map((r) => [
        r.lease_token,
        {
          attemptId: r.id,
          deliveryId: r.delivery_id,
          claimId: r.claim_id,
          startedAt: r.started_at.getTime(),
          leaseExpiresAt: r.lease_expires_at.getTime(),
        },
      ]),
    ),
  };
}

export async function readDeliveries(db: Queryable): Promise<DeliveryRow[]> {
  const { rows } = await db.query<DeliveryRow>(
    `select id, message_id as "messageId", endpoint_id as "endpointId", state,
            attempts_total as "attemptsTotal", lease_token as "leaseToken"
       from delivery order by id`,
  );
  return rows;
}

export async function readAttempts(db: Queryable): Promise<AttemptRow[]> {
  const { rows } = await db.query<{
    id: string;
    delivery_id: string;
    message_id: string;
    endpoint_id: string;
    lease_token: string;
    started_at: Date;
    finished_at: Date | null;
    outcome: AttemptRow['outcome'];
    status_code: number | null;
    response_class: string | null;
  }>(
    `select id, delivery_id, message_id, endpoint_id, lease_token, started_at, finished_at, outcome,
            status_code, response_class
       from attempt order by started_at, id`,
  );
  return rows.map((r) => ({
    id: r.id,
    deliveryId: r.delivery_id,
    messageId: r.message_id,
    endpointId: r.endpoint_id,
    leaseToken: r.lease_token,
    startedAt: r.started_at.getTime(),
    finishedAt: r.finished_at?.getTime() ?? null,
    outcome: r.outcome,
    statusCode: r.status_code,
    responseClass: r.response_class,
  }));
}

// ---- the checker --------------------------------------------------------------------------------

export interface ScaleOutHistory {
  /** Each published message → the endpoints it must have a delivery for. */
  expected: Map<string, Set<string>>;
  /** Receiver path → endpoint id. */
  endpointOfPath: Map<string, string>;
  requests: readonly HeldRequest[];
  deliveries: readonly DeliveryRow[];
  attempts: readonly AttemptRow[];
  kill: KillSnapshot;
  leaseMs: number;
  /** Deliveries whose lease a worker still alive at the end lost with a result in hand (its logs). */
  leasesLostByLiveWorkers: ReadonlySet<string>;
  /**
   * Deliveries (by id) and whole claims (by claim id) a live worker gave back unsent, from its logs:
   * herald removes the attempt row of a request it never sent (lease too short to start, its origin
   * congested past the start limit, a claim whose answer was lost).
   */
  givenBackByLiveWorkers: ReadonlySet<string>;
}

export interface Violation {
  check: 'a' | 'b' | 'c' | 'd';
  detail: string;
}

export interface ScaleOutResult {
  violations: Violation[];
  counts: Record<string, number>;
  /** Worth reading, breaking no promise. */
  notes: string[];
  /** Which attempt accounts for each receiver request (by seq). */
  attemptOfRequest: Map<number, AttemptRow>;
}

/**
 * Slack when a database time (PostgreSQL's now()) is compared with the receiver's clock: same host,
 * same wall clock, but the two are read by different processes.
 */
export const CLOCK_TOLERANCE_MS = 50;

const iso = (t: number | null): string => (t === null ? '—' : new Date(t).toISOString().slice(11, 23));

/**
 * (a) every expected delivery exists, once, and succeeded, its row agreeing with its attempts;
 * (b) every recorded success matches one answered request, every request is accounted for by one
 *     attempt (a success, or an unknown one), and nothing else was recorded;
 * (c) no endpoint ever had two requests in flight (receiver start/end intervals never overlap);
 * (d) every lease recovered as `lease_expired` was recovered only after it expired, nothing claimed
 *     its delivery again before that, and those the killed worker held only after it died.
 */
export function checkScaleOut(history: ScaleOutHistory): ScaleOutResult {
  const violations: Violation[] = [];
  const counts: Record<string, number> = {};
  const count = (name: string, by = 1) => {
    counts[name] = (counts[name] ?? 0) + by;
  };
  const fail = (check: Violation['check'], detail: string) => violations.push({ check, detail });
  const notes: string[] = [];
  const attemptOfRequest = new Map<number, AttemptRow>();
  const attemptsByDelivery = Map.groupBy(history.attempts, (a) => a.deliveryId);

  // The receiver's times are compared with the database's below, within CLOCK_TOLERANCE_MS. Should
  // the system's time be adjusted during the run, the two clocks part: a failure then says so.
  let [lowest, highest] = [Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY];
  for (const r of history.requests) {
    lowest = Math.min(lowest, r.wallAt - r.startedAt);
    highest = Math.max(highest, r.wallAt - r.startedAt);
  }
  const drift = history.requests.length === 0 ? 0 : highest - lowest;
  count('receiver_clock_drift_ms', Math.round(drift));
  if (drift > CLOCK_TOLERANCE_MS / 2) {
    notes.push(
      `the wall clock (PostgreSQL's now()) and the receiver's clock moved ${drift.toFixed(1)} ms apart during the run: times compared across them may be off by as much`,
    );
  }

  // ---- (a) every delivery there, and succeeded ----------------------------------------------------
  const deliveriesByPair = Map.groupBy(history.deliveries, (d) => `${d.endpointId}|${d.messageId}`);
  for (const [messageId, endpoints] of history.expected) {
    for (const endpointId of endpoints) {
      const found = deliveriesByPair.get(`${endpointId}|${messageId}`) ?? [];
      if (found.length !== 1)
        fail(
          'a',
          `message ${messageId} has ${found.length} deliveries for endpoint ${endpointId}, expected 1`,
        );
    }
  }
  for (const d of history.deliveries) {
    count('deliveries');
    count(`deliveries.${d.state}`);
    if (!history.expected.get(d.messageId)?.has(d.endpointId)) {
      fail('a', `delivery ${d.id}: message ${d.messageId} was not meant for endpoint ${d.endpointId}`);
    }
    const attempts = attemptsByDelivery.get(d.id) ?? [];
    const successes = attempts.filter((a) => a.outcome === 'success');
    if (d.state !== 'succeeded') {
      fail(
        'a',
        `delivery ${d.id} (message ${d.messageId}, endpoint ${d.endpointId}) is ${d.state}, not succeeded; ` +
          `attempts: ${attempts.map((a) => `${a.id} ${a.outcome ?? 'open'}/${a.responseClass ?? ''}`).join(', ') || 'none'}`,
      );
    }
    if (d.state === 'succeeded' && (successes.length !== 1 || attempts.at(-1)?.outcome !== 'success')) {
      fail(
        'a',
        `delivery ${d.id} (endpoint ${d.endpointId}) succeeded with ${successes.length} success attempts, last ${attempts.at(-1)?.outcome ?? 'none'}`,
      );
    }
    if (d.attemptsTotal !== attempts.length) {
      fail(
        'a',
        `delivery ${d.id} (endpoint ${d.endpointId}) counts ${d.attemptsTotal} attempts but has ${attempts.length} rows`,
      );
    }
  }

  // ---- (b) attempts and receiver requests account for each other, one to one ----------------------
  const requestsByPair = Map.groupBy(
    history.requests,
    (r) => `${history.endpointOfPath.get(r.path) ?? `unknown path ${r.path}`}|${r.webhookId}`,
  );
  const attemptsByPair = Map.groupBy(history.attempts, (a) => `${a.endpointId}|${a.messageId}`);
  for (const pair of new Set([...attemptsByPair.keys(), ...requestsByPair.keys()])) {
    const attempts = attemptsByPair.get(pair) ?? [];
    const requests = [...(requestsByPair.get(pair) ?? [])].sort((x, y) => x.startedAt - y.startedAt);
    const used = new Set<HeldRequest>();
    const within = (a: AttemptRow) => (r: HeldRequest) =>
      r.startedAt <= (a.finishedAt ?? Number.POSITIVE_INFINITY) + CLOCK_TOLERANCE_MS;
    const take = (
      a: AttemptRow,
      fits: (r: HeldRequest) => boolean,
      late = false,
    ): HeldRequest | undefined => {
      const found = requests.find(
        (r) =>
          !used.has(r) &&
          r.startedAt >= a.startedAt - CLOCK_TOLERANCE_MS &&
          (late || within(a)(r)) &&
          fits(r),
      );
      if (found) {
        used.add(found);
        attemptOfRequest.set(found.seq, a);
      }
      return found;
    };
    for (const a of attempts) {
      count(`attempts.${a.outcome ?? 'open'}`);
      if (a.outcome === 'success') {
        if (!take(a, (r) => r.answered && r.status === a.statusCode)) {
          fail(
            'b',
            `success attempt ${a.id} (delivery ${a.deliveryId}, endpoint ${a.endpointId}, ${iso(a.startedAt)}–${iso(a.finishedAt)}, status ${a.statusCode}) matches no answered request at the receiver`,
          );
        }
      } else if (a.outcome === 'failure' && a.statusCode === null) {
        // herald says this request never left (e.g. its deadline passed while it waited for a
        // connection): it explains no request, so one the receiver saw in its window stays unexplained.
        count(`attempts.failure_not_sent.${a.responseClass}`);
      } else if (a.outcome === 'failure' || a.outcome === null) {
        fail(
          'b',
          `attempt ${a.id} (delivery ${a.deliveryId}, endpoint ${a.endpointId}) is ${a.outcome ?? 'still open'} (status ${a.statusCode}, ${a.responseClass}); the receiver only answers 2xx`,
        );
      }
    }
    // Unknown outcomes: the request may or may not have arrived; each explains at most one. Bytes
    // that left before herald gave up may still be read by a busy receiver after that, so a
    // request later than the attempt's end is taken when none arrived within it.
    const unknowns = attempts.filter((a) => a.outcome === 'unknown');
    for (const a of unknowns) count(`attempts.unknown.${a.responseClass}`);
    const reachedBy = new Set<AttemptRow>();
    for (const a of unknowns) if (take(a, () => true)) reachedBy.add(a);
    for (const a of unknowns) {
      if (reachedBy.has(a)) continue;
      const late = take(a, () => true, true);
      if (late) {
        reachedBy.add(a);
        count('requests.read_after_herald_gave_up');
      }
    }
    count('attempts.unknown_that_reached_the_receiver', reachedBy.size);
    for (const r of requests) {
      count('requests');
      if (!r.answered) count('requests.unanswered');
      if (used.has(r)) continue;
      fail(
        'b',
        `the receiver saw request #${r.seq} (${r.path}, webhook-id ${r.webhookId}, ${iso(r.startedAt)}, ${r.answered ? `answered ${r.status}` : 'unanswered'}) that no attempt accounts for`,
      );
    }
    if (requests.length > 1) count('endpoint_message_pairs_requested_more_than_once');
  }
  const reached =
    (counts['attempts.success'] ?? 0) + (counts['attempts.unknown_that_reached_the_receiver'] ?? 0);
  if ((counts['requests'] ?? 0) !== reached) {
    fail('b', `the receiver saw ${counts['requests'] ?? 0} requests, the attempts account for ${reached}`);
  }

  // ---- (c) one request in flight per endpoint -----------------------------------------------------
  // A request is in flight from its arrival until the receiver answers or the connection closes —
  // or until herald recorded it as unknown (it had closed the connection by then; a busy receiver
  // may notice later, and a request it reads only after that was never in flight for herald).
  // With no tolerance: an answer is logged before it is written, so whatever herald does next
  // arrives after it on the receiver's monotonic clock.
  const endOf = (r: HeldRequest): number => {
    const end = r.endedAt ?? Number.POSITIVE_INFINITY;
    const a = attemptOfRequest.get(r.seq);
    return a?.outcome === 'unknown' && a.finishedAt !== null ? Math.min(end, a.finishedAt) : end;
  };
  for (const [path, requests] of Map.groupBy(history.requests, (r) => r.path)) {
    const sorted = [...requests]
      .filter((r) => endOf(r) > r.startedAt)
      .sort((x, y) => x.startedAt - y.startedAt || x.seq - y.seq);
    let latest: HeldRequest | null = null;
    for (const r of sorted) {
      const latestEnd = latest ? endOf(latest) : Number.NEGATIVE_INFINITY;
      if (latest && r.startedAt < latestEnd) {
        fail(
          'c',
          `endpoint ${history.endpointOfPath.get(path) ?? path} (${path}) had two requests in flight: #${latest.seq} (${latest.webhookId}) ${iso(latest.startedAt)}–${iso(latestEnd)} and #${r.seq} (${r.webhookId}) from ${iso(r.startedAt)}`,
        );
      }
      if (!latest || endOf(r) > latestEnd) latest = r;
    }
  }

  // ---- (d) leases recovered only after they expired, and the dead worker's only after its death -----
  // The claim sets lease_expires_at = now() + lease and the attempt's started_at = now() in one
  // statement, so a lease runs until started_at + lease; the snapshot taken at the kill shows it.
  const { kill } = history;
  const byId = new Map(history.attempts.map((a) => [a.id, a]));
  for (const held of kill.open.values()) {
    if (held.leaseExpiresAt !== held.startedAt + history.leaseMs) {
      fail(
        'd',
        `attempt ${held.attemptId}: its lease ran until ${iso(held.leaseExpiresAt)}, not its start ${iso(held.startedAt)} + ${history.leaseMs} ms`,
      );
    }
  }
  for (const a of history.attempts) {
    if (a.responseClass !== 'lease_expired') continue;
    count('leases.recovered');
    const where = `attempt ${a.id} (delivery ${a.deliveryId}, endpoint ${a.endpointId})`;
    if (a.outcome !== 'unknown')
      fail('d', `${where} was recovered from an expired lease but is ${a.outcome}`);
    const held = kill.open.get(a.leaseToken);
    const expiresAt = held?.leaseExpiresAt ?? a.startedAt + history.leaseMs;
    if (a.finishedAt === null || a.finishedAt < expiresAt) {
      fail(
        'd',
        `${where} was recovered at ${iso(a.finishedAt)}, while its lease ran until ${iso(expiresAt)}`,
      );
    }
    for (const b of attemptsByDelivery.get(a.deliveryId) ?? []) {
      if (b.id !== a.id && b.startedAt >= a.startedAt && b.startedAt < expiresAt) {
        fail(
          'd',
          `${where}: attempt ${b.id} claimed the delivery at ${iso(b.startedAt)}, before the lease ran out at ${iso(expiresAt)}`,
        );
      }
    }
    if (held) {
      count('leases.recovered_from_the_dead_worker');
      if (a.finishedAt !== null && a.finishedAt < kill.killedAt) {
        fail('d', `${where} was recovered at ${iso(a.finishedAt)}, before the worker holding it died`);
      }
      if (history.leasesLostByLiveWorkers.has(a.deliveryId)) {
        fail('d', `${where} was held by the dead worker, yet a live worker reported losing its lease`);
      }
    } else {
      // Not open at the death, so a live worker's: herald's contract allows it (a worker stalled
      // past its lease loses it, and fencing discards its result), but on a healthy host it is news.
      count('leases.recovered_from_live_workers');
      notes.push(
        `${where}, claimed ${iso(a.startedAt)} and not held by the dead worker at its death, lost its lease and was recovered at ${iso(a.finishedAt)}` +
          (history.leasesLostByLiveWorkers.has(a.deliveryId) ? ' (its worker logged the loss)' : ''),
      );
    }
  }
  // Every lease open at the death was either finished by a live worker (the dead one could not have
  // recorded anything after the snapshot), recovered as unknown, or given back unsent by the live
  // worker holding it (its attempt row removed; (b) shows no request went out under it): nothing
  // else, and none left open.
  for (const [token, held] of kill.open) {
    count('leases.open_at_kill');
    const a = byId.get(held.attemptId);
    const where = `attempt ${held.attemptId} (delivery ${held.deliveryId}), open when the worker died`;
    if (!a || a.leaseToken !== token) {
      const givenBack = history.givenBackByLiveWorkers;
      if (givenBack.has(held.deliveryId) || givenBack.has(held.claimId))
        count('leases.open_at_kill_given_back_unsent');
      else fail('d', `${where}, is gone, and no live worker gave it back unsent`);
    } else if (a.responseClass === 'lease_expired') {
      count('leases.open_at_kill_recovered');
    } else if (a.outcome === null) {
      fail('d', `${where}, is still open`);
    } else {
      count('leases.open_at_kill_finished_by_live_workers');
    }
  }
  return { violations, counts, notes, attemptOfRequest };
}
