// The delivery state machine (migrations/0002_delivery_functions.sql, src/db/deliveries.ts) against
// a small in-memory model. On a fresh database (one app, 2–3 endpoints, a few messages) random
// sequences of claims, outcomes, lease expiries, disables and enables, resends and stale outcomes
// run against real PostgreSQL; after every step the database must equal the model: states, cycles,
// attempt counters, leases, attempts and their outcomes, endpoint health.
//
// Deterministic: a fixed seed (PROPERTY_SEED overrides it); PROPERTY_RUNS overrides numRuns for
// longer local runs. A failure prints the seed and the shrunk command sequence.

import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import fc from 'fast-check';
import {
  claimDeliveries,
  recordOutcomes,
  recoverExpiredLeases,
  resendDelivery,
} from '../src/db/deliveries.ts';
import { findEndpoint, updateEndpoint } from '../src/db/endpoints.ts';
import type { Db } from '../src/db/port.ts';
import { freshDatabase, type TestDatabase } from './support/database.ts';
import { noWaits } from './support/outcomes.ts';
import { MISQUEUED_SQL } from './support/queue.ts';
import { seedApp, seedEndpoint, seedMessage } from './support/seed.ts';

const SEED = Number(process.env['PROPERTY_SEED'] ?? 0x57a7e);
const RUNS = process.env['PROPERTY_RUNS'] === undefined ? undefined : Number(process.env['PROPERTY_RUNS']);

/** Attempts per cycle (a schedule of two waits), and known failures before auto-disable. */
const MAX_ATTEMPTS = 3;
const DISABLE_AFTER = 3;
const LEASE_SECONDS = 600;

type State = 'pending' | 'sending' | 'succeeded' | 'failed';
type Outcome = 'success' | 'failure' | 'unknown';

interface ModelDelivery {
  id: string;
  messageId: string;
  endpointId: string;
  state: State;
  cycle: number;
  attemptsInCycle: number;
  attemptsTotal: number;
  /** Pending and due now (next_attempt_at <= now()). */
  due: boolean;
  leaseToken: string | null;
  trigger: 'scheduled' | 'manual';
  /** A resend asked for while in flight: a new cycle starts as the attempt ends. */
  resendQueued: boolean;
}

interface ModelEndpoint {
  id: string;
  idempotent: boolean;
  disabled: boolean;
  reason: 'operator' | 'failures' | 'gone' | null;
  failures: number;
  credentialsFlagged: boolean;
}

interface ModelAttempt {
  leaseToken: string;
  deliveryId: string;
  cycle: number;
  trigger: 'scheduled' | 'manual';
  outcome: Outcome | null;
  responseClass: string | null;
}

interface Model {
  appId: string;
  /** In the database's order of ids, which is the claim's round-robin order. */
  endpoints: ModelEndpoint[];
  deliveries: Map<string, ModelDelivery>;
  attempts: Map<string, ModelAttempt>;
  /** Every message × endpoint, including endpoints created after the message (no delivery yet). */
  pairs: { messageId: string; endpointId: string }[];
}

interface Real {
  db: Db;
}

type Command = fc.AsyncCommand<Model, Real>;

let database: TestDatabase;

before(async () => {
  database = await freshDatabase('prop_state');
});
after(async () => {
  await database.drop();
});

// ---------------------------------------------------------------------------------------------
// Setup: a fresh state for each run.

interface Setup {
  endpoints: boolean[];
  messages: number;
  lateEndpoint: boolean | null;
}

async function setUp(db: Db, setup: Setup): Promise<Model> {
  // Deletes, not TRUNCATE: on tables this small they are ten times faster. Deleting the apps
  // cascades to endpoints, messages, deliveries and attempts.
  await db.query('delete from app');
  await db.query('delete from audit_entry');
  const app = await seedApp(db, 'prop');
  const endpoint = (idempotent: boolean, i: number) =>
    seedEndpoint(db, app.id, `http://127.0.0.1:9/${i}`, idempotent);
  for (const [i, idempotent] of setup.endpoints.entries()) await endpoint(idempotent, i);
  for (let m = 0; m < setup.messages; m++) await seedMessage(db, app.id, `{"n":${m}}`);
  // Subscribed after the messages: they have no delivery for it until a resend creates one.
  if (setup.lateEndpoint !== null) await endpoint(setup.lateEndpoint, setup.endpoints.length);

  const endpoints = await db.query<{ id: string; idempotent: boolean }>(
    'select id, idempotent from endpoint where app_id = $1 order by id',
    [app.id],
  );
  const deliveries = await db.query<{ id: string; message_id: string; endpoint_id: string }>(
    'select id, message_id, endpoint_id from delivery where app_id = $1',
    [app.id],
  );
  const messages = await db.query<{ id: string }>('select id from message where app_id = $1 order by id', [
    app.id,
  ]);
  const model: Model = {
    appId: app.id,
    endpoints: endpoints.rows.map((e) => ({
      id: e.id,
      idempotent: e.idempotent,
      disabled: false,
      reason: null,
      failures: 0,
      credentialsFlagged: false,
    })),
    deliveries: new Map(
      deliveries.rows.map((d) => [
        d.id,
        {
          id: d.id,
          messageId: d.message_id,
          endpointId: d.endpoint_id,
          state: 'pending',
          cycle: 1,
          attemptsInCycle: 0,
          attemptsTotal: 0,
          due: true,
          leaseToken: null,
          trigger: 'scheduled',
          resendQueued: false,
        },
      ]),
    ),
    attempts: new Map(),
    pairs: messages.rows.flatMap((m) => endpoints.rows.map((e) => ({ messageId: m.id, endpointId: e.id }))),
  };
  await compare(model, db, 'after setup');
  return model;
}

// ---------------------------------------------------------------------------------------------
// The comparison made after every step.

interface Snapshot {
  deliveries: {
    id: string;
    state: State;
    cycle: number;
    attemptsInCycle: number;
    attemptsTotal: number;
    due: boolean;
    leaseToken: string | null;
    leaseExpires: boolean;
    trigger: 'scheduled' | 'manual';
  }[];
  attempts: {
    leaseToken: string;
    deliveryId: string;
    cycle: number;
    trigger: 'scheduled' | 'manual';
    outcome: Outcome | null;
    responseClass: string | null;
  }[];
  endpoints: {
    id: string;
    disabled: boolean;
    reason: ModelEndpoint['reason'];
    failures: number;
    flagged: boolean;
  }[];
  /** Endpoints with more than one delivery in flight. */
  doubled: number;
  /** Sending deliveries without an open attempt under their lease. */
  leaseless: number;
  /** Open attempts whose lease has ended. */
  orphans: number;
  /** Rows of the queue tables (due, in flight, failed) that differ from the deliveries' states. */
  misqueued: number;
}

// One round trip: the whole state of the app, and the invariants that span rows.
const SNAPSHOT = `
  select
    (select coalesce(json_agg(json_build_object(
        'id', id, 'state', state, 'cycle', cycle, 'attemptsInCycle', attempts_in_cycle,
        'attemptsTotal', attempts_total, 'leaseToken', lease_token, 'leaseExpires', lease_expires_at is not null,
        'trigger', trigger, 'due', coalesce(state = 'pending' and next_attempt_at <= now(), false))), '[]')
       from delivery where app_id = $1) as deliveries,
    (select coalesce(json_agg(json_build_object(
        'leaseToken', lease_token, 'deliveryId', delivery_id, 'cycle', cycle, 'trigger', trigger,
        'outcome', outcome, 'responseClass', response_class)), '[]')
       from attempt where app_id = $1) as attempts,
    (select coalesce(json_agg(json_build_object(
        'id', id, 'disabled', disabled, 'reason', disabled_reason, 'failures', consecutive_failures,
        'flagged', credentials_rejected_at is not null)), '[]')
       from endpoint where app_id = $1) as endpoints,
    (select count(*)::int from (select 1 from delivery where state = 'sending'
                                 group by endpoint_id having count(*) > 1) x) as doubled,
    (select count(*)::int from delivery d
      where d.state = 'sending'
        and not exists (select 1 from attempt a
                         where a.lease_token = d.lease_token and a.delivery_id = d.id and a.outcome is null)) as leaseless,
    (select count(*)::int from attempt a
      where a.outcome is null
        and not exists (select 1 from delivery d where d.lease_token = a.lease_token and d.state = 'sending')) as orphans,
    ${MISQUEUED_SQL} as misqueued`;

/** Row by row, so that a difference names the row and shows it whole. */
function sameRows<T>(
  where: string,
  what: string,
  actual: readonly T[],
  expected: readonly T[],
  key: (row: T) => string,
) {
  const actualByKey = new Map(actual.map((row) => [key(row), row]));
  const expectedByKey = new Map(expected.map((row) => [key(row), row]));
  for (const k of new Set([...actualByKey.keys(), ...expectedByKey.keys()])) {
    assert.deepEqual(actualByKey.get(k), expectedByKey.get(k), `${where}: ${what} ${k}`);
  }
}

async function compare(model: Model, db: Db, step: string): Promise<void> {
  const where = `after ${step}`;
  const snapshot = (await db.query<Snapshot>(SNAPSHOT, [model.appId])).rows[0]!;
  assert.equal(snapshot.doubled, 0, `${where}: two deliveries in flight for one endpoint`);
  assert.equal(snapshot.leaseless, 0, `${where}: a sending delivery without an open attempt under its lease`);
  assert.equal(snapshot.orphans, 0, `${where}: an open attempt whose lease has ended`);
  assert.equal(snapshot.misqueued, 0, `${where}: the queue tables differ from the deliveries' states`);
  sameRows(
    where,
    'delivery',
    snapshot.deliveries,
    [...model.deliveries.values()].map((d) => ({
      id: d.id,
      state: d.state,
      cycle: d.cycle,
      attemptsInCycle: d.attemptsInCycle,
      attemptsTotal: d.attemptsTotal,
      due: d.due,
      leaseToken: d.leaseToken,
      // A lease exists exactly while the delivery is sending.
      leaseExpires: d.state === 'sending',
      trigger: d.trigger,
    })),
    (d) => d.id,
  );
  // An outcome, once set, is never rewritten: the model sets each one once.
  sameRows(
    where,
    'attempt under lease',
    snapshot.attempts,
    [...model.attempts.values()],
    (a) => a.leaseToken,
  );
  sameRows(
    where,
    'endpoint',
    snapshot.endpoints,
    model.endpoints.map((e) => ({
      id: e.id,
      disabled: e.disabled,
      reason: e.reason,
      failures: e.failures,
      flagged: e.credentialsFlagged,
    })),
    (e) => e.id,
  );
}

// ---------------------------------------------------------------------------------------------
// Commands.

const sending = (m: Readonly<Model>) => [...m.deliveries.values()].filter((d) => d.state === 'sending');
const endpointOf = (m: Readonly<Model>, id: string) => m.endpoints.find((e) => e.id === id)!;
/** Attempts whose lease has ended (recorded or recovered): any outcome under them is stale. */
const ended = (m: Readonly<Model>) =>
  [...m.attempts.values()].filter((a) => m.deliveries.get(a.deliveryId)!.leaseToken !== a.leaseToken);

const claim = (batch: number, afterPick: number | null): Command => ({
  check: () => true,
  async run(m, r) {
    const after = afterPick === null ? '' : m.endpoints[afterPick % m.endpoints.length]!.id;
    // Round robin: the endpoints after `after` in id order, then wrapping around.
    const start = after === '' ? 0 : m.endpoints.findIndex((e) => e.id === after) + 1;
    const order = [...m.endpoints.slice(start), ...m.endpoints.slice(0, start)];
    const ready = (e: ModelEndpoint) => {
      const own = [...m.deliveries.values()].filter((d) => d.endpointId === e.id);
      return (
        !e.disabled &&
        !own.some((d) => d.state === 'sending') &&
        own.some((d) => d.state === 'pending' && d.due)
      );
    };
    const expected = order
      .filter(ready)
      .slice(0, batch)
      .map((e) => e.id);
    // Which delivery an endpoint leases: its earliest due one (ties may go either way).
    const earliest = await r.db.query<{ id: string; endpoint_id: string }>(
      `select id, endpoint_id from (
         select id, endpoint_id, next_attempt_at, min(next_attempt_at) over (partition by endpoint_id) as first
           from delivery where app_id = $1 and state = 'pending' and next_attempt_at <= now()) due
        where next_attempt_at = first`,
      [m.appId],
    );
    const claimed = await claimDeliveries(r.db, { batch, leaseSeconds: LEASE_SECONDS, afterEndpoint: after });
    assert.deepEqual(
      claimed.map((c) => c.endpointId),
      expected,
      `claim(batch ${batch}, after ${after || "''"}): endpoints leased, in order`,
    );
    for (const c of claimed) {
      assert.ok(
        earliest.rows.some((e) => e.id === c.deliveryId && e.endpoint_id === c.endpointId),
        `claim leased ${c.deliveryId}, not the earliest due delivery of ${c.endpointId}`,
      );
      const d = m.deliveries.get(c.deliveryId)!;
      assert.equal(c.cycle, d.cycle);
      assert.equal(c.attemptsInCycle, d.attemptsInCycle + 1);
      assert.equal(c.trigger, d.trigger);
      d.state = 'sending';
      d.due = false;
      d.leaseToken = c.leaseToken;
      d.attemptsInCycle += 1;
      d.attemptsTotal += 1;
      m.attempts.set(c.leaseToken, {
        leaseToken: c.leaseToken,
        deliveryId: d.id,
        cycle: d.cycle,
        trigger: d.trigger,
        outcome: null,
        responseClass: null,
      });
    }
    await compare(m, r.db, this.toString());
  },
  toString: () => `claim(${batch}, ${afterPick})`,
});

interface Finish {
  outcome: Outcome;
  /** 'auto': the retry policy decides (budget left → scheduled); 'spent': the cycle stops now. */
  budget: 'auto' | 'spent';
  dueNow: boolean;
  gone: boolean;
  credentials: boolean;
  /** A failure of herald's own (the payload expired): not the endpoint's, it counts for nothing. */
  heralds: boolean;
}

const RESPONSE_CLASS: Record<Outcome, string> = {
  success: 'http_2xx',
  failure: 'http_5xx',
  unknown: 'connection_lost',
};

const finish = (pick: number, f: Finish): Command => ({
  check: (m) => sending(m).length > 0,
  async run(m, r) {
    const list = sending(m);
    const d = list[pick % list.length]!;
    const e = endpointOf(m, d.endpointId);
    const failed = f.outcome === 'failure';
    const budgetLeft = f.budget === 'auto' && d.attemptsInCycle < MAX_ATTEMPTS;
    const next =
      f.outcome === 'success' || !budgetLeft
        ? null
        : new Date(f.dueNow ? Date.now() - 60_000 - pick : Date.now() + 3_600_000 + pick);
    const heralds = failed && f.heralds;
    const gone = failed && f.gone && !heralds;
    const credentials = failed && f.credentials && !heralds;
    const responseClass = heralds ? 'payload_expired' : gone ? 'http_4xx' : RESPONSE_CLASS[f.outcome];
    const [result] = await recordOutcomes(
      r.db,
      [
        {
          deliveryId: d.id,
          leaseToken: d.leaseToken!,
          outcome: f.outcome,
          statusCode:
            f.outcome === 'success' ? 200 : gone ? 410 : credentials ? 401 : failed && !heralds ? 503 : null,
          responseClass,
          responseBody: '',
          durationMs: 5,
          nextAttemptAt: next,
          disableEndpoint: gone ? 'gone' : null,
          credentialsRejected: credentials,
          endpointAtFault: !heralds,
        },
      ],
      DISABLE_AFTER,
    );
    // The model's transition.
    const attempt = m.attempts.get(d.leaseToken!)!;
    assert.equal(attempt.outcome, null, 'the model only finishes open attempts');
    attempt.outcome = f.outcome;
    attempt.responseClass = responseClass;
    d.state = f.outcome === 'success' ? 'succeeded' : next === null ? 'failed' : 'pending';
    d.due = next !== null && f.dueNow;
    d.leaseToken = null;
    d.trigger = 'scheduled';
    startQueuedResend(d);
    let disabledNow = false;
    if (credentials) e.credentialsFlagged = true;
    if (f.outcome === 'success') {
      e.failures = 0;
      e.credentialsFlagged = false;
    } else if (failed && !heralds) {
      e.failures += 1;
      if (!e.disabled && (gone || e.failures >= DISABLE_AFTER)) {
        e.disabled = true;
        e.reason = gone ? 'gone' : 'failures';
        disabledNow = true;
      }
    }
    assert.deepEqual(
      result,
      { deliveryId: d.id, recorded: true, endpointDisabled: disabledNow },
      'recordOutcomes',
    );
    await compare(m, r.db, this.toString());
  },
  toString: () => `finish(${pick}, ${JSON.stringify(f)})`,
});

/** Whatever ended the attempt in flight, a resend queued behind it starts its new cycle now. */
function startQueuedResend(d: ModelDelivery): void {
  if (!d.resendQueued) return;
  d.resendQueued = false;
  d.state = 'pending';
  d.cycle += 1;
  d.attemptsInCycle = 0;
  d.due = true;
  d.trigger = 'manual';
}

const expire = (pick: number): Command => ({
  check: (m) => sending(m).length > 0,
  async run(m, r) {
    const list = sending(m);
    const d = list[pick % list.length]!;
    await r.db.query(`update delivery set lease_expires_at = now() - interval '1 second' where id = $1`, [
      d.id,
    ]);
    const recovered = await recoverExpiredLeases(r.db, noWaits(MAX_ATTEMPTS));
    assert.deepEqual(recovered, [{ deliveryId: d.id, endpointId: d.endpointId, leaseToken: d.leaseToken }]);
    const attempt = m.attempts.get(d.leaseToken!)!;
    attempt.outcome = 'unknown';
    attempt.responseClass = 'lease_expired';
    // Retried when the budget allows and the endpoint applies repeats once; else parked as failed.
    const retry = d.attemptsInCycle < MAX_ATTEMPTS && endpointOf(m, d.endpointId).idempotent;
    d.state = retry ? 'pending' : 'failed';
    d.due = retry;
    d.leaseToken = null;
    d.trigger = 'scheduled';
    startQueuedResend(d);
    await compare(m, r.db, this.toString());
  },
  toString: () => `expire(${pick})`,
});

const toggle = (pick: number, disabled: boolean): Command => ({
  check: () => true,
  async run(m, r) {
    const e = m.endpoints[pick % m.endpoints.length]!;
    // As the API's PATCH/PUT does: the whole row, with `disabled` changed.
    const row = (await findEndpoint(r.db, m.appId, e.id))!;
    await updateEndpoint(r.db, e.id, {
      uid: row.uid,
      url: row.url,
      description: row.description,
      version: row.version,
      throttleRate: row.throttleRate,
      filterTypes: row.filterTypes,
      channels: row.channels,
      metadata: row.metadata,
      disabled,
      idempotent: row.idempotent,
      clientErrorPolicy: row.clientErrorPolicy,
    });
    if (disabled && !e.disabled) e.reason = 'operator';
    if (!disabled) {
      // Re-enabling starts the failure count afresh (budgets are kept), and sends now.
      if (e.disabled) {
        e.failures = 0;
        for (const d of m.deliveries.values())
          if (d.endpointId === e.id && d.state === 'pending') d.due = true;
      }
      e.reason = null;
    }
    e.disabled = disabled;
    await compare(m, r.db, this.toString());
  },
  toString: () => `${disabled ? 'disable' : 'enable'}(${pick})`,
});

const resend = (pick: number): Command => ({
  check: () => true,
  async run(m, r) {
    const pair = m.pairs[pick % m.pairs.length]!;
    const resent = await resendDelivery(r.db, m.appId, pair.messageId, pair.endpointId);
    const existing = [...m.deliveries.values()].find(
      (d) => d.messageId === pair.messageId && d.endpointId === pair.endpointId,
    );
    // In flight, the new cycle is queued behind the attempt, and the caller is told so.
    assert.equal(resent, existing?.state === 'sending' ? 'queued' : 'resent', this.toString());
    if (existing?.state === 'sending') existing.resendQueued = true;
    if (existing === undefined) {
      // A message never routed to the endpoint gets its delivery now (an explicit request).
      const created = await r.db.query<{ id: string }>(
        'select id from delivery where message_id = $1 and endpoint_id = $2',
        [pair.messageId, pair.endpointId],
      );
      assert.equal(created.rowCount, 1, 'resend creates the missing delivery');
      const id = created.rows[0]!.id;
      m.deliveries.set(id, {
        id,
        ...pair,
        state: 'pending',
        cycle: 1,
        attemptsInCycle: 0,
        attemptsTotal: 0,
        due: true,
        leaseToken: null,
        trigger: 'manual',
        resendQueued: false,
      });
    } else if (existing.state === 'pending') {
      // Already waiting: due now, with a fresh budget in a new cycle if it was waiting to retry.
      if (existing.attemptsInCycle > 0) existing.cycle += 1;
      existing.attemptsInCycle = 0;
      existing.due = true;
      existing.trigger = 'manual';
    } else if (existing.state !== 'sending') {
      // Finished: a new cycle with a fresh budget; lifetime history kept.
      existing.state = 'pending';
      existing.cycle += 1;
      existing.attemptsInCycle = 0;
      existing.due = true;
      existing.trigger = 'manual';
    }
    await compare(m, r.db, this.toString());
  },
  toString: () => `resend(${pick})`,
});

interface Stale {
  repeat: boolean;
  outcome: Outcome;
  responseClass: string;
  gone: boolean;
  credentials: boolean;
  next: boolean;
}

const stale = (pick: number, s: Stale): Command => ({
  check: (m) => ended(m).length > 0,
  async run(m, r) {
    const list = ended(m);
    const a = list[pick % list.length]!;
    // A worker that lost its lease reports late: either a retry of what it already recorded
    // (recorded = true, invariant 7) or anything else (recorded = false). Nothing changes either way.
    const outcome = s.repeat ? a.outcome! : s.outcome;
    const responseClass = s.repeat ? a.responseClass! : s.responseClass;
    const [result] = await recordOutcomes(
      r.db,
      [
        {
          deliveryId: a.deliveryId,
          leaseToken: a.leaseToken,
          outcome,
          statusCode: s.gone ? 410 : null,
          responseClass,
          responseBody: 'late',
          durationMs: 1,
          nextAttemptAt: s.next ? new Date(Date.now() - 60_000) : null,
          disableEndpoint: s.gone ? 'gone' : null,
          credentialsRejected: s.credentials,
          endpointAtFault: true,
        },
      ],
      DISABLE_AFTER,
    );
    const sameAsRecorded = a.outcome === outcome && a.responseClass === responseClass;
    assert.deepEqual(
      result,
      { deliveryId: a.deliveryId, recorded: sameAsRecorded, endpointDisabled: false },
      `a stale outcome under ${a.leaseToken} (recorded ${a.outcome}/${a.responseClass}, late ${outcome}/${responseClass})`,
    );
    await compare(m, r.db, this.toString());
  },
  toString: () => `stale(${pick}, ${JSON.stringify(s)})`,
});

const outcomeArb = fc.constantFrom<Outcome>('success', 'failure', 'unknown');
const commandArbs = [
  fc.tuple(fc.integer({ min: 1, max: 3 }), fc.option(fc.nat(), { nil: null })).map(([b, a]) => claim(b, a)),
  fc.tuple(fc.integer({ min: 1, max: 3 }), fc.option(fc.nat(), { nil: null })).map(([b, a]) => claim(b, a)),
  fc
    .tuple(
      fc.nat(),
      fc.record({
        outcome: outcomeArb,
        budget: fc.constantFrom<Finish['budget']>('auto', 'auto', 'auto', 'spent'),
        dueNow: fc.boolean(),
        gone: fc.boolean(),
        credentials: fc.boolean(),
        heralds: fc.constantFrom(false, false, false, true),
      }),
    )
    .map(([p, f]) => finish(p, f)),
  fc.nat().map(expire),
  fc.tuple(fc.nat(), fc.boolean()).map(([p, d]) => toggle(p, d)),
  fc.nat().map(resend),
  fc
    .tuple(
      fc.nat(),
      fc.record({
        repeat: fc.boolean(),
        outcome: outcomeArb,
        responseClass: fc.constantFrom(
          'http_2xx',
          'http_5xx',
          'connection_lost',
          'lease_expired',
          'http_4xx',
        ),
        gone: fc.boolean(),
        credentials: fc.boolean(),
        next: fc.boolean(),
      }),
    )
    .map(([p, s]) => stale(p, s)),
];

const setupArb: fc.Arbitrary<Setup> = fc.record({
  endpoints: fc.array(fc.boolean(), { minLength: 2, maxLength: 3 }),
  messages: fc.integer({ min: 1, max: 4 }),
  lateEndpoint: fc.option(fc.boolean(), { nil: null }),
});

test('the delivery state machine follows its model under random command sequences', async () => {
  await fc.assert(
    fc.asyncProperty(
      setupArb,
      fc.commands(commandArbs, { maxCommands: 40, size: 'max' }),
      async (setup, commands) => {
        const model = await setUp(database.db, setup);
        await fc.asyncModelRun(() => ({ model, real: { db: database.db } }), commands);
      },
    ),
    { seed: SEED, numRuns: RUNS ?? 15 },
  );
});
