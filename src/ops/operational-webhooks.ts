// Operational webhooks: herald tells its operator about itself — endpoints created, updated,
// deleted or auto-disabled, deliveries failing, exhausted or recovered — as signed webhooks in
// Svix's event shapes (`{type, timestamp, data}`, reference/svix-oss-openapi.json: x-webhooks).
//
// They are not a side channel. Each event is an ordinary message published into herald's own
// operator application (uid `herald-operator`, one endpoint at HERALD_OPERATOR_WEBHOOK_URL), in the
// same transaction as the change it reports: the change and its event commit together or not at
// all, and the event then gets everything a message gets (retries, history, replay). Changes to the
// operator application's own endpoint report nothing, or every failed event would beget another.

import type { AttemptResult, RecordedOutcome, RecoveredLease } from '../db/deliveries.ts';
import { publishMessage } from '../db/messages.ts';
import type { Queryable } from '../db/port.ts';
import { firstIdAt } from '../db/time-ids.ts';
import { HERALD_ACTOR_ID, OPERATOR_APP_UID } from '../engine/apps.ts';
import { DEFAULT_RETENTION_DAYS } from '../engine/publish.ts';

/** Svix sends `message.attempt.failing` on a delivery's fourth failure. */
export const FAILING_AFTER = 4;

export type EndpointEventType = 'endpoint.created' | 'endpoint.updated' | 'endpoint.deleted';
export type OperationalEventType =
  | EndpointEventType
  | 'endpoint.disabled'
  | 'message.attempt.failing'
  | 'message.attempt.exhausted'
  | 'message.attempt.recovered';

interface OperatorApp {
  id: string;
  retentionDays: number | null;
}

/** Svix's MessageAttempetLast (sic). */
interface LastAttempt {
  id: string;
  responseStatusCode: number;
  timestamp: string;
}

async function publishEvent(
  tx: Queryable,
  operator: OperatorApp,
  type: OperationalEventType,
  data: Record<string, unknown>,
  idempotencyKey: string | null,
): Promise<void> {
  // A key already used means this very event was published by an earlier commit of the same
  // outcome (a repeated write whose first reply was lost): nothing more is inserted.
  await publishMessage(
    tx,
    {
      appId: operator.id,
      eventType: type,
      eventId: null,
      payload: JSON.stringify({ type, timestamp: new Date().toISOString(), data }),
      channels: null,
      tags: null,
      idempotencyKey,
      requestHash: null,
      retentionDays: operator.retentionDays ?? DEFAULT_RETENTION_DAYS,
    },
    HERALD_ACTOR_ID,
  );
}

/**
 * Publishes endpoint.created/updated/deleted about `endpoint` in `tx`, the transaction that made
 * the change. Nothing when the operator app does not exist (operational webhooks are off: no
 * process's HERALD_OPERATOR_WEBHOOK_URL made it), or the endpoint is the operator's own.
 *
 * The operator app is looked up `for key share skip locked`, here and for attempts' events: one
 * being deleted (its row locked by the deletion, for as long as its history takes to cascade)
 * reports nothing, where every outcome write and endpoint change waited for that deletion.
 */
export async function emitEndpointEvent(
  tx: Queryable,
  type: EndpointEventType,
  endpoint: { id: string; appId: string; uid: string | null },
): Promise<void> {
  const operator = await operatorReportingOn(tx, endpoint.appId);
  if (operator) await publishEvent(tx, operator, type, endpointEventData(endpoint, operator.appUid), null);
}

/**
 * endpoint.deleted for each endpoint an app's deletion took with it (deleteApp), in its
 * transaction: whoever mirrors the endpoints from these events would otherwise keep them. The
 * app's row is gone by then: its uid comes as the deletion found it.
 */
export async function emitAppEndpointsDeleted(
  tx: Queryable,
  app: { id: string; uid: string | null },
  endpoints: readonly { id: string; uid: string | null }[],
): Promise<void> {
  if (endpoints.length === 0) return;
  const operator = await operatorReportingOn(tx, app.id);
  if (!operator) return;
  for (const endpoint of endpoints) {
    const data = endpointEventData({ ...endpoint, appId: app.id }, app.uid);
    await publishEvent(tx, operator, 'endpoint.deleted', data, null);
  }
}

/**
 * The operator app that changes to `appId`'s endpoints report to, with that app's uid; null when
 * there is none (operational webhooks are off: no process's HERALD_OPERATOR_WEBHOOK_URL made it),
 * or the app is the operator's own.
 */
async function operatorReportingOn(
  tx: Queryable,
  appId: string,
): Promise<(OperatorApp & { appUid: string | null }) | null> {
  const found = await tx.query<OperatorApp & { appUid: string | null }>(
    `select o.id, o.retention_days as "retentionDays", (select a.uid from app a where a.id = $2) as "appUid"
       from app o where o.uid = $1
        for key share of o skip locked`,
    [OPERATOR_APP_UID, appId],
  );
  const operator = found.rows[0];
  return operator && operator.id !== appId ? operator : null;
}

/** Svix's EndpointCreatedEventData (and its updated and deleted twins). */
const endpointEventData = (
  endpoint: { id: string; appId: string; uid: string | null },
  appUid: string | null,
) => ({
  appId: endpoint.appId,
  appUid,
  endpointId: endpoint.id,
  endpointUid: endpoint.uid,
});

interface OutcomeFacts {
  attemptId: string;
  outcome: 'success' | 'failure' | 'unknown';
  statusCode: number | null;
  startedAt: Date;
  state: string;
  appId: string;
  appUid: string | null;
  endpointId: string;
  endpointUid: string | null;
  msgId: string;
  msgEventId: string | null;
  /** Known failures in this attempt's cycle up to it, this attempt included. */
  failuresInCycle: number;
  /** A later attempt of the delivery exists: this is a repeated write, and the delivery moved on. */
  superseded: boolean;
}

/**
 * Publishes the events that recorded attempt outcomes call for. Runs inside the transaction that
 * recorded them (the finalizer's), so only outcomes that were really written — recorded = true,
 * the lease still held — can emit, and an outcome write that rolls back takes its events with it.
 */
export async function emitOutcomeEvents(
  tx: Queryable,
  results: readonly AttemptResult[],
  recorded: readonly RecordedOutcome[],
): Promise<void> {
  const written = new Map(recorded.filter((r) => r.recorded).map((r) => [r.deliveryId, r]));
  const leases = results.filter((r) => written.has(r.deliveryId));
  const disabled = new Set(recorded.filter((r) => r.recorded && r.endpointDisabled).map((r) => r.deliveryId));
  await emitAttemptEvents(tx, leases, disabled);
}

/**
 * The same for leases that expired with no outcome, inside the recovery's transaction: an attempt
 * that ends `unknown` with its cycle's budget spent (or parked for review) ends the cycle too.
 */
export async function emitRecoveryEvents(tx: Queryable, recovered: readonly RecoveredLease[]): Promise<void> {
  await emitAttemptEvents(tx, recovered, new Set());
}

/**
 * For each attempt (by its delivery and lease token), as things stood when its outcome was first
 * written. A repeated write (its first reply lost) may come after later attempts of the delivery:
 * so failures are counted up to this attempt (attempt ids follow time, and a delivery has one
 * attempt at a time), and an attempt that a later one followed ends no cycle. Then:
 * - message.attempt.failing: the cycle's FAILING_AFTER-th known failure (once per cycle);
 * - message.attempt.exhausted: the cycle ended without a success (budget spent, or the outcome
 *   policy stopped it): no further attempt will be made unless someone resends or replays;
 * - message.attempt.recovered: a success in a cycle that had sent its `failing` (FAILING_AFTER
 *   known failures);
 * - endpoint.disabled: this outcome auto-disabled the endpoint (failures, or a 410 Gone).
 */
async function emitAttemptEvents(
  tx: Queryable,
  leases: readonly { deliveryId: string; leaseToken: string }[],
  disabledDeliveries: ReadonlySet<string>,
): Promise<void> {
  if (leases.length === 0) return;
  const operator = (
    await tx.query<OperatorApp>(
      `select id, retention_days as "retentionDays" from app where uid = $1 for key share skip locked`,
      [OPERATOR_APP_UID],
    )
  ).rows[0];
  if (!operator) return;
  const facts = await tx.query<OutcomeFacts & { deliveryId: string }>(
    `select a.id as "attemptId", a.outcome, a.status_code as "statusCode", a.started_at as "startedAt",
            d.id as "deliveryId", d.state, d.app_id as "appId", ap.uid as "appUid",
            d.endpoint_id as "endpointId", e.uid as "endpointUid",
            d.message_id as "msgId", m.event_id as "msgEventId",
            (select count(*) from attempt f
              where f.delivery_id = a.delivery_id and f.cycle = a.cycle and f.outcome = 'failure'
                and f.id <= a.id)::int as "failuresInCycle",
            exists (select 1 from attempt n where n.delivery_id = a.delivery_id and n.id > a.id) as "superseded"
       from unnest($1::text[], $3::uuid[]) as l(delivery_id, lease_token)
       join attempt a on a.delivery_id = l.delivery_id and a.lease_token = l.lease_token
       join delivery d on d.id = a.delivery_id
       join message m on m.id = d.message_id
       join endpoint e on e.id = d.endpoint_id
       join app ap on ap.id = d.app_id
      where d.app_id <> $2
      order by a.id`,
    [leases.map((l) => l.deliveryId), operator.id, leases.map((l) => l.leaseToken)],
  );
  for (const f of facts.rows) {
    const lastAttempt: LastAttempt = {
      id: f.attemptId,
      responseStatusCode: f.statusCode ?? 0,
      timestamp: new Date(f.startedAt).toISOString(),
    };
    const data = {
      appId: f.appId,
      appUid: f.appUid,
      endpointId: f.endpointId,
      msgId: f.msgId,
      msgEventId: f.msgEventId,
      lastAttempt,
    };
    // Keyed by the attempt: one event of each kind per attempt, however often its outcome is written.
    const key = (type: OperationalEventType) => `herald:${type}:${f.attemptId}`;
    const emit = (type: OperationalEventType, body: Record<string, unknown>) =>
      publishEvent(tx, operator, type, body, key(type));
    if (f.outcome === 'failure' && f.failuresInCycle === FAILING_AFTER) {
      await emit('message.attempt.failing', data);
    }
    if (f.outcome !== 'success' && f.state === 'failed' && !f.superseded) {
      await emit('message.attempt.exhausted', data);
    }
    // Svix: a success "after an earlier failure op webhook has already been sent" — the cycle's
    // `failing`, sent at its FAILING_AFTER-th failure. A blip of fewer failures says nothing.
    if (f.outcome === 'success' && f.failuresInCycle >= FAILING_AFTER) {
      await emit('message.attempt.recovered', data);
    }
    if (disabledDeliveries.has(f.deliveryId)) {
      await emit('endpoint.disabled', {
        appId: f.appId,
        appUid: f.appUid,
        endpointId: f.endpointId,
        endpointUid: f.endpointUid,
        failSince: (await failingSince(tx, f.endpointId, f.startedAt)).toISOString(),
      });
    }
  }
}

/**
 * When the endpoint's run of failures began: its first known failure since its failure count last
 * started afresh — at its last success, or when an operator forgave its failures (enabled it again,
 * or gave it a new URL: the audit entry of that change). It runs in the outcome write's
 * transaction, so it reads the run, not the endpoint's history: attempt ids follow time, and one
 * endpoint has one attempt in flight at a time, so its attempts in id order are its attempts in
 * time order. The walk goes back from the newest attempt to the last success, then forward over
 * the attempts since the later of the two: as many as the run is long, never the history before it.
 * An attempt under way when its endpoint was forgiven counts towards the new run (its failure is
 * written after the reset) but did not start it: the run begins with the first attempt sent since.
 */
export async function failingSince(tx: Queryable, endpointId: string, fallback: Date): Promise<Date> {
  const forgivenAt = `(select a.at from audit_entry a
                        where a.target_id = $1
                          and (a.action = 'endpoint.enabled'
                               or (a.action = 'endpoint.updated' and a.details->'changed' ? 'url'))
                        order by a.id desc limit 1)`;
  const result = await tx.query<{ since: Date | null }>(
    `select min(f.started_at) as since from attempt f
      where f.endpoint_id = $1 and f.outcome = 'failure'
        and f.id > greatest(
          (select s.id from attempt s where s.endpoint_id = $1 and s.outcome = 'success' order by s.id desc limit 1),
          ${firstIdAt('atmpt', forgivenAt)})`,
    [endpointId],
  );
  return result.rows[0]?.since ?? fallback;
}
