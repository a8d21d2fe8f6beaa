// The history checker. From the client's log, the receivers' logs and the database it checks:
//  1. every publish or ingest answered 2xx exists exactly once (one message per idempotency key,
//     one intake per inbound delivery id, one message per business key);
//  2. every such message reached each endpoint subscribed at publish time at least once, or its
//     delivery is visibly failed, waiting on a disabled endpoint, or its last attempt is unknown;
//  3. no endpoint ever had two requests in flight at once (receiver start/end times);
//  4. every recorded success or failure matches a request the receiver saw (webhook-id, endpoint,
//     time window, status), and every request the receiver saw is accounted for by an attempt;
//  5. no outcome was written under a lease that had been taken over, and each delivery's row
//     agrees with its attempts;
//  6. every outbound request of a relayed inbound message carried its business key as
//     Idempotency-Key;
// plus: every request was correctly signed, and no herald process died on its own.

import type pg from 'pg';
import type { FaultRecord } from './faults.ts';
import type { BusinessEvent, ClientRequest, PublishOp } from './load.ts';
import type { ProcessEvent } from './processes.ts';
import type { ReceivedRequest } from './receivers.ts';
import type { EndpointModel, SoakModel } from './setup.ts';

export interface MessageRow {
  id: string;
  eventType: string;
  idempotencyKey: string | null;
  businessKey: string | null;
  payload: string | null;
  createdAt: number;
}
export interface DeliveryRow {
  id: string;
  messageId: string;
  endpointId: string;
  state: 'pending' | 'sending' | 'succeeded' | 'failed';
  cycle: number;
  attemptsInCycle: number;
  attemptsTotal: number;
  nextAttemptAt: number | null;
  leaseToken: string | null;
  leaseExpiresAt: number | null;
  endpointDisabled: boolean;
  disabledReason: string | null;
}
export interface AttemptRow {
  id: string;
  deliveryId: string;
  messageId: string;
  endpointId: string;
  cycle: number;
  leaseToken: string;
  startedAt: number;
  finishedAt: number | null;
  outcome: 'success' | 'failure' | 'unknown' | null;
  statusCode: number | null;
  responseClass: string | null;
}
export interface IntakeRow {
  id: string;
  sourceId: string;
  deliveryId: string;
  businessKey: string;
  messageId: string | null;
  observations: number;
  duplicates: number;
}
export interface Snapshot {
  takenAt: number;
  messages: MessageRow[];
  deliveries: DeliveryRow[];
  attempts: AttemptRow[];
  intakes: IntakeRow[];
}

export interface Violation {
  check: string;
  title: string;
  detail: string;
  messageIds?: string[];
  endpointId?: string | undefined;
  keys?: string[];
  window?: [number, number];
}

export interface CheckInput {
  model: SoakModel;
  publishes: readonly PublishOp[];
  events: readonly BusinessEvent[];
  clientRequests: readonly ClientRequest[];
  received: readonly ReceivedRequest[];
  faults: readonly FaultRecord[];
  processEvents: readonly ProcessEvent[];
  leaseSeconds: number;
  snapshot: Snapshot;
}

export interface CheckResult {
  counts: Record<string, number>;
  violations: Violation[];
  /** Observations worth reading that break no promise. */
  notes: string[];
}

/** Slack for comparing the soak's clock with PostgreSQL's (same host) and event-loop lag. */
const TIME_TOLERANCE_MS = 100;
/** Two requests overlapping by less than this are event-loop ordering, not concurrency. */
const OVERLAP_TOLERANCE_MS = 20;
/** A delivery due this long before the snapshot, on an enabled endpoint, was left behind. */
const STUCK_AFTER_MS = 10_000;

const ms = (d: Date | null): number | null => (d === null ? null : d.getTime());

export async function takeSnapshot(db: pg.Client, appId: string): Promise<Snapshot> {
  const takenAt = Date.now();
  const messages = await db.query(
    `select id, event_type, idempotency_key, business_key, payload, created_at
       from message where app_id = $1 order by id`,
    [appId],
  );
  const deliveries = await db.query(
    `select d.id, d.message_id, d.endpoint_id, d.state, d.cycle, d.attempts_in_cycle, d.attempts_total,
            d.next_attempt_at, d.lease_token, d.lease_expires_at, e.disabled, e.disabled_reason
       from delivery d join endpoint e on e.id = d.endpoint_id
      where d.app_id = $1 order by d.id`,
    [appId],
  );
  const attempts = await db.query(
    `select id, delivery_id, message_id, endpoint_id, cycle, lease_token, started_at, finished_at, outcome,
            status_code, response_class
       from attempt where app_id = $1 order by started_at, id`,
    [appId],
  );
  const intakes = await db.query(
    `select i.id, i.source_id, i.delivery_id, i.business_key, i.message_id,
            (select count(*) from intake_observation o where o.intake_id = i.id)::int as observations,
            (select count(*) from intake_observation o where o.intake_id = i.id and o.duplicate)::int as duplicates
       from intake i where i.app_id = $1 order by i.id`,
    [appId],
  );
  return {
    takenAt,
    messages: messages.rows.map((r) => ({
      id: r.id,
      eventType: r.event_type,
      idempotencyKey: r.idempotency_key,
      businessKey: r.business_key,
      payload: r.payload,
      createdAt: ms(r.created_at)!,
    })),
    deliveries: deliveries.rows.map((r) => ({
      id: r.id,
      messageId: r.message_id,
      endpointId: r.endpoint_id,
      state: r.state,
      cycle: r.cycle,
      attemptsInCycle: r.attempts_in_cycle,
      attemptsTotal: r.attempts_total,
      nextAttemptAt: ms(r.next_attempt_at),
      leaseToken: r.lease_token,
      leaseExpiresAt: ms(r.lease_expires_at),
      endpointDisabled: r.disabled,
      disabledReason: r.disabled_reason,
    })),
    attempts: attempts.rows.map((r) => ({
      id: r.id,
      deliveryId: r.delivery_id,
      messageId: r.message_id,
      endpointId: r.endpoint_id,
      cycle: r.cycle,
      leaseToken: r.lease_token,
      startedAt: ms(r.started_at)!,
      finishedAt: ms(r.finished_at),
      outcome: r.outcome,
      statusCode: r.status_code,
      responseClass: r.response_class,
    })),
    intakes: intakes.rows.map((r) => ({
      id: r.id,
      sourceId: r.source_id,
      deliveryId: r.delivery_id,
      businessKey: r.business_key,
      messageId: r.message_id,
      observations: r.observations,
      duplicates: r.duplicates,
    })),
  };
}

const subscribes = (endpoint: EndpointModel, eventType: string) =>
  endpoint.filterTypes === null || endpoint.filterTypes.includes(eventType);

/** An acknowledged message, as the client knows it. */
interface AckedMessage {
  messageId: string;
  eventType: string;
  /** The client's first request for it, and the first 2xx. */
  firstSentAt: number;
  acceptedAt: number;
  keys: string[];
  relayed: boolean;
}

export function check(input: CheckInput): CheckResult {
  const { snapshot, model } = input;
  const violations: Violation[] = [];
  const notes: string[] = [];
  const counts: Record<string, number> = {};
  const count = (name: string, by = 1) => {
    counts[name] = (counts[name] ?? 0) + by;
  };
  const fail = (v: Violation) => violations.push(v);

  const messagesById = new Map(snapshot.messages.map((m) => [m.id, m]));
  const messagesByKey = new Map(snapshot.messages.map((m) => [m.idempotencyKey, m]));
  const endpointsById = new Map(model.endpoints.map((e) => [e.id, e]));
  const endpointsByName = new Map(model.endpoints.map((e) => [e.name, e]));
  const deliveriesByMessage = Map.groupBy(snapshot.deliveries, (d) => d.messageId);
  const attemptsByDelivery = Map.groupBy(snapshot.attempts, (a) => a.deliveryId);
  const requestsOf = Map.groupBy(
    input.received,
    (r) => `${endpointsByName.get(r.receiver)?.id}|${r.webhookId}`,
  );

  // ---- 1. acceptance: one message per key, one intake per delivery id ---------------------------
  const acked: AckedMessage[] = [];
  const knownKeys = new Set<string>();
  for (const op of input.publishes) {
    knownKeys.add(op.key);
    count('publish.ops');
    if (op.doubleSubmit) count('publish.double_submitted');
    for (const refusal of op.refusals) {
      fail({
        check: '1',
        title: 'a publish retried with the same key and content was refused',
        detail: `key ${op.key}: HTTP ${refusal.status} ${refusal.body}`,
        keys: [op.key],
      });
    }
    const stored = messagesByKey.get(op.key);
    if (op.acks.length === 0) {
      count('publish.never_acked');
      if (stored) count('publish.never_acked_but_stored');
      continue;
    }
    count('publish.acked');
    const ids = [...new Set(op.acks.map((a) => a.messageId))];
    if (ids.length > 1) {
      fail({
        check: '1',
        title: 'one idempotency key was answered with different message ids',
        detail: `key ${op.key}: ${ids.join(', ')}`,
        keys: [op.key],
        messageIds: ids,
      });
    }
    if (!stored) {
      fail({
        check: '1',
        title: 'a publish answered 2xx is not in the database',
        detail: `key ${op.key} answered with ${ids.join(', ')}, no message has that key`,
        keys: [op.key],
        messageIds: ids,
      });
      continue;
    }
    if (!ids.includes(stored.id) || ids.length !== 1) {
      fail({
        check: '1',
        title: 'the acknowledged message id is not the stored one',
        detail: `key ${op.key}: answered ${ids.join(', ')}, stored ${stored.id}`,
        keys: [op.key],
        messageIds: [...ids, stored.id],
      });
    }
    const payloadMatches =
      stored.payload !== null && JSON.stringify(JSON.parse(stored.payload)) === JSON.stringify(op.payload);
    if (stored.eventType !== op.eventType || !payloadMatches) {
      fail({
        check: '1',
        title: 'the stored message differs from what was published',
        detail: `key ${op.key}: stored ${stored.eventType} ${stored.payload}, sent ${op.eventType} ${JSON.stringify(op.payload)}`,
        keys: [op.key],
        messageIds: [stored.id],
      });
    }
    if (op.acks.length > 1) count('publish.acked_more_than_once');
    acked.push({
      messageId: stored.id,
      eventType: op.eventType,
      firstSentAt: op.firstSentAt,
      acceptedAt: Math.min(...op.acks.map((a) => a.t)),
      keys: [op.key],
      relayed: false,
    });
  }

  const intakesByDeliveryId = Map.groupBy(snapshot.intakes, (i) => i.deliveryId);
  const sentDeliveryIds = new Set<string>();
  for (const event of input.events) {
    count('ingest.business_events');
    count(`ingest.pattern.${event.pattern}`);
    const messageKey = `intake:${model.sourceId}:${event.businessKey}`;
    knownKeys.add(messageKey);
    const message = messagesByKey.get(messageKey);
    let anyAck = false;
    const ackTimes: number[] = [];
    for (const delivery of event.deliveries) {
      sentDeliveryIds.add(delivery.deliveryId);
      count('ingest.delivery_ids');
      for (const refusal of delivery.refusals) {
        fail({
          check: '1',
          title: 'a correctly signed inbound delivery was refused',
          detail: `delivery ${delivery.deliveryId}: HTTP ${refusal.status} ${refusal.body}`,
          keys: [delivery.deliveryId],
        });
      }
      if (delivery.acks.length === 0) {
        count('ingest.delivery_ids_never_acked');
        continue;
      }
      anyAck = true;
      ackTimes.push(...delivery.acks);
      count('ingest.delivery_ids_acked');
      count('ingest.acks', delivery.acks.length);
      const intakes = intakesByDeliveryId.get(delivery.deliveryId) ?? [];
      if (intakes.length !== 1) {
        fail({
          check: '1',
          title: 'an acknowledged inbound delivery id does not have exactly one intake',
          detail: `delivery ${delivery.deliveryId}: ${intakes.length} intake rows`,
          keys: [delivery.deliveryId, event.businessKey],
          messageIds: message ? [message.id] : [],
        });
        continue;
      }
      const intake = intakes[0]!;
      if (intake.businessKey !== event.businessKey || !message || intake.messageId !== message.id) {
        fail({
          check: '1',
          title: 'an intake does not point at the one message of its business key',
          detail: `delivery ${delivery.deliveryId}: intake key ${intake.businessKey} → ${intake.messageId}; expected ${event.businessKey} → ${message?.id ?? 'no message'}`,
          keys: [delivery.deliveryId, event.businessKey],
          messageIds: [intake.messageId ?? '', message?.id ?? ''].filter(Boolean),
        });
      }
      count('ingest.observations', intake.observations);
      count('ingest.duplicate_observations', intake.duplicates);
    }
    if (!anyAck) continue;
    count('ingest.business_events_acked');
    if (!message) {
      fail({
        check: '1',
        title: 'an acknowledged business event produced no message',
        detail: `business key ${event.businessKey}`,
        keys: [event.businessKey, ...event.deliveries.map((d) => d.deliveryId)],
      });
      continue;
    }
    if (message.businessKey !== event.businessKey || message.payload !== event.body) {
      fail({
        check: '1',
        title: 'the relayed message differs from the inbound delivery',
        detail: `business key ${event.businessKey}: stored key ${message.businessKey}, payload ${message.payload}`,
        keys: [event.businessKey],
        messageIds: [message.id],
      });
    }
    acked.push({
      messageId: message.id,
      eventType: event.eventType,
      firstSentAt: Math.min(...event.deliveries.map((d) => d.firstSentAt)),
      acceptedAt: Math.min(...ackTimes),
      keys: [event.businessKey, ...event.deliveries.map((d) => d.deliveryId)],
      relayed: true,
    });
  }
  for (const intake of snapshot.intakes) {
    if (!sentDeliveryIds.has(intake.deliveryId)) {
      fail({
        check: '1',
        title: 'an intake for a delivery id the client never sent',
        detail: `intake ${intake.id} delivery ${intake.deliveryId}`,
        keys: [intake.deliveryId],
      });
    }
  }
  for (const message of snapshot.messages) {
    count('db.messages');
    if (message.businessKey !== null) count('db.relayed_messages');
    if (message.idempotencyKey === null || !knownKeys.has(message.idempotencyKey)) {
      fail({
        check: '1',
        title: 'a message nobody published',
        detail: `message ${message.id} key ${message.idempotencyKey}`,
        messageIds: [message.id],
      });
    }
  }

  // ---- 2. every acknowledged message reached every subscribed endpoint, or visibly did not -------
  const late = model.endpoints.find((e) => e.late);
  for (const message of acked) {
    const deliveries = deliveriesByMessage.get(message.messageId) ?? [];
    const byEndpoint = new Map(deliveries.map((d) => [d.endpointId, d]));
    for (const endpoint of model.endpoints) {
      const subscribed = subscribes(endpoint, message.eventType);
      // The late endpoint: messages accepted before it was asked for must not reach it, messages
      // first sent after it existed must; those in between may go either way.
      let expected: boolean | 'either' = subscribed;
      if (endpoint === late && subscribed) {
        expected =
          message.acceptedAt < endpoint.createSentAt
            ? false
            : message.firstSentAt > endpoint.createdAt
              ? true
              : 'either';
        if (expected === 'either') count('late_endpoint.undecided_messages');
      }
      const delivery = byEndpoint.get(endpoint.id);
      if (expected === true && !delivery) {
        fail({
          check: '2',
          title: 'an acknowledged message has no delivery for an endpoint subscribed at publish time',
          detail: `message ${message.messageId} (${message.eventType}) endpoint ${endpoint.name}`,
          messageIds: [message.messageId],
          endpointId: endpoint.id,
          keys: message.keys,
        });
      } else if (expected === false && delivery) {
        fail({
          check: '2',
          title: 'a message was delivered to an endpoint that was not subscribed when it was published',
          detail: `message ${message.messageId} (${message.eventType}) endpoint ${endpoint.name} (${endpoint.late ? 'subscribed later' : 'filtered out'})`,
          messageIds: [message.messageId],
          endpointId: endpoint.id,
          keys: message.keys,
        });
      }
    }
    for (const delivery of deliveries) {
      const endpoint = endpointsById.get(delivery.endpointId);
      if (!endpoint) continue;
      count('deliveries.checked');
      const seen = requestsOf.get(`${delivery.endpointId}|${delivery.messageId}`) ?? [];
      const attempts = attemptsByDelivery.get(delivery.id) ?? [];
      const last = attempts.at(-1);
      const answered2xx = seen.some((r) => r.status !== null && r.status >= 200 && r.status < 300);
      if (delivery.state === 'succeeded') {
        count('deliveries.succeeded');
        if (!answered2xx) {
          fail({
            check: '2',
            title: 'a delivery is succeeded but its receiver never answered 2xx to it',
            detail: `delivery ${delivery.id} message ${delivery.messageId} endpoint ${endpoint.name}`,
            messageIds: [delivery.messageId],
            endpointId: delivery.endpointId,
          });
        }
        continue;
      }
      if (delivery.state === 'failed') {
        count('deliveries.visibly_failed');
        if (last?.outcome === 'unknown') count('deliveries.failed_after_unknown');
        continue;
      }
      if (delivery.state === 'pending' && delivery.endpointDisabled) {
        count('deliveries.waiting_on_disabled_endpoint');
        continue;
      }
      if (last?.outcome === 'unknown') {
        count('deliveries.last_attempt_unknown');
        continue;
      }
      if (delivery.state === 'pending' && delivery.nextAttemptAt! > snapshot.takenAt - STUCK_AFTER_MS) {
        count('deliveries.scheduled');
        continue;
      }
      if (delivery.state === 'sending' && delivery.leaseExpiresAt! > snapshot.takenAt - STUCK_AFTER_MS) {
        count('deliveries.in_flight');
        continue;
      }
      fail({
        check: '2',
        title: 'a delivery is silently stuck (due long ago, nothing visible about it)',
        detail: `delivery ${delivery.id} ${delivery.state} next ${iso(delivery.nextAttemptAt)} lease ${iso(delivery.leaseExpiresAt)} endpoint ${endpoint.name} (disabled ${delivery.endpointDisabled}) last attempt ${last?.outcome ?? 'none'}`,
        messageIds: [delivery.messageId],
        endpointId: delivery.endpointId,
      });
    }
    const reachedAll = deliveries.every(
      (d) => (requestsOf.get(`${d.endpointId}|${d.messageId}`) ?? []).length > 0,
    );
    if (reachedAll) count('messages.reached_every_endpoint');
  }
  count('messages.acked', acked.length);

  // ---- 3. one request in flight per endpoint -----------------------------------------------------
  for (const [receiver, requests] of Map.groupBy(input.received, (r) => r.receiver)) {
    const sorted = [...requests].sort((a, b) => a.startedAt - b.startedAt || a.seq - b.seq);
    let open: ReceivedRequest | null = null;
    let maxConcurrent = 1;
    for (const request of sorted) {
      count('receivers.requests');
      if (open && request.startedAt < (open.endedAt ?? Number.POSITIVE_INFINITY) - OVERLAP_TOLERANCE_MS) {
        maxConcurrent = 2;
        const endpointId = endpointsByName.get(receiver)?.id;
        fail({
          check: '3',
          title: 'two requests were in flight at one endpoint at once',
          detail: `${receiver}: request #${open.seq} (${open.webhookId}) ${iso(open.startedAt)}–${iso(open.endedAt)} and #${request.seq} (${request.webhookId}) from ${iso(request.startedAt)}`,
          messageIds: [open.webhookId ?? '', request.webhookId ?? ''].filter(Boolean),
          endpointId,
          window: [open.startedAt, request.endedAt ?? request.startedAt],
        });
      }
      if (!open || (request.endedAt ?? Number.POSITIVE_INFINITY) > (open.endedAt ?? Number.POSITIVE_INFINITY))
        open = request;
    }
    counts[`receivers.${receiver}.requests`] = requests.length;
    if (maxConcurrent > 1) count('receivers.endpoints_with_overlap');
  }

  // ---- 4. attempts and receiver requests account for each other ----------------------------------
  const attemptsByPair = Map.groupBy(snapshot.attempts, (a) => `${a.endpointId}|${a.messageId}`);
  const pairs = new Set([...attemptsByPair.keys(), ...requestsOf.keys()]);
  const leaseMs = input.leaseSeconds * 1000;
  for (const pair of pairs) {
    const attempts = attemptsByPair.get(pair) ?? [];
    const requests = [...(requestsOf.get(pair) ?? [])].sort((a, b) => a.startedAt - b.startedAt);
    const used = new Set<ReceivedRequest>();
    const take = (a: AttemptRow, fits: (r: ReceivedRequest) => boolean): ReceivedRequest | undefined => {
      const found = requests.find(
        (r) => !used.has(r) && r.startedAt >= a.startedAt - TIME_TOLERANCE_MS && fits(r),
      );
      if (found) used.add(found);
      return found;
    };
    const within = (a: AttemptRow) => (r: ReceivedRequest) =>
      r.startedAt <= (a.finishedAt ?? Number.POSITIVE_INFINITY) + TIME_TOLERANCE_MS;
    // Known outcomes first: each needs the request it reports, with the status it reports.
    for (const a of attempts) {
      if (a.outcome === 'success' || a.outcome === 'failure') count(`attempts.${a.outcome}`);
      if ((a.outcome !== 'success' && a.outcome !== 'failure') || a.statusCode === null) continue;
      const matched = take(a, (r) => within(a)(r) && r.status === a.statusCode);
      if (matched) {
        count('attempts.matched_known');
        continue;
      }
      fail({
        check: '4',
        title: `a recorded ${a.outcome} matches no request the receiver saw`,
        detail: `attempt ${a.id} (${a.outcome} ${a.statusCode}) ${iso(a.startedAt)}–${iso(a.finishedAt)} message ${a.messageId} endpoint ${endpointsById.get(a.endpointId)?.name}`,
        messageIds: [a.messageId],
        endpointId: a.endpointId,
        window: [a.startedAt, a.finishedAt ?? a.startedAt],
      });
    }
    for (const a of attempts) {
      if ((a.outcome === 'success' || a.outcome === 'failure') && a.statusCode === null)
        count('attempts.not_sent');
    }
    // Unknown outcomes the worker recorded: the request may or may not have arrived.
    for (const a of attempts) {
      if (a.outcome !== 'unknown' || a.responseClass === 'lease_expired') continue;
      count('attempts.unknown_recorded');
      if (take(a, within(a))) count('attempts.unknown_with_request');
    }
    // Leases that expired (or are still open): their request may arrive late — a paused worker.
    for (const a of attempts) {
      if (a.outcome !== null && a.responseClass !== 'lease_expired') continue;
      count(a.outcome === null ? 'attempts.open' : 'attempts.unknown_lease_expired');
      const r = take(a, within(a)) ?? take(a, () => true);
      if (r && r.startedAt > a.startedAt + leaseMs) {
        count('requests.sent_after_lease_expired');
        notes.push(
          `request #${r.seq} to ${r.receiver} for ${r.webhookId} started ${r.startedAt - a.startedAt} ms after its claim (lease ${leaseMs} ms), attempt ${a.id}`,
        );
      }
    }
    for (const r of requests) {
      if (used.has(r)) continue;
      fail({
        check: '4',
        title: 'the receiver saw a request that no attempt accounts for',
        detail: `${r.receiver} request #${r.seq} for ${r.webhookId} at ${iso(r.startedAt)} (${r.action} ${r.status ?? ''})`,
        messageIds: r.webhookId ? [r.webhookId] : [],
        endpointId: endpointsByName.get(r.receiver)?.id,
        window: [r.startedAt, r.endedAt ?? r.startedAt],
      });
    }
  }
  count('attempts.total', snapshot.attempts.length);

  // ---- 5. fencing: no outcome under a lease that was taken over; rows agree with attempts --------
  for (const delivery of snapshot.deliveries) {
    const attempts = [...(attemptsByDelivery.get(delivery.id) ?? [])].sort(
      (a, b) => a.startedAt - b.startedAt || a.id.localeCompare(b.id),
    );
    const where = { messageIds: [delivery.messageId], endpointId: delivery.endpointId };
    for (let i = 0; i + 1 < attempts.length; i++) {
      const a = attempts[i]!;
      const next = attempts[i + 1]!;
      if (a.finishedAt === null) {
        fail({
          check: '5',
          title: 'an attempt was left open while a later lease was claimed',
          detail: `delivery ${delivery.id}: attempt ${a.id} has no outcome, attempt ${next.id} started ${iso(next.startedAt)}`,
          ...where,
        });
      } else if (a.finishedAt > next.startedAt + TIME_TOLERANCE_MS) {
        fail({
          check: '5',
          title: 'an outcome was written after its lease had been taken over',
          detail: `delivery ${delivery.id}: attempt ${a.id} (${a.outcome}, ${a.responseClass}) finished ${iso(a.finishedAt)}, after attempt ${next.id} claimed it at ${iso(next.startedAt)}`,
          ...where,
          window: [a.startedAt, a.finishedAt],
        });
      }
    }
    const last = attempts.at(-1);
    const open = attempts.filter((a) => a.outcome === null);
    const agrees =
      attempts.length === delivery.attemptsTotal &&
      (delivery.state === 'sending'
        ? open.length === 1 && open[0] === last && last?.leaseToken === delivery.leaseToken
        : open.length === 0) &&
      (delivery.state !== 'succeeded' || last?.outcome === 'success') &&
      (delivery.state !== 'failed' || last?.outcome === 'failure' || last?.outcome === 'unknown');
    if (!agrees) {
      fail({
        check: '5',
        title: "a delivery's state disagrees with its attempts",
        detail: `delivery ${delivery.id} ${delivery.state} attempts_total ${delivery.attemptsTotal}, ${attempts.length} attempt rows, last ${last?.outcome ?? 'none'}, ${open.length} open`,
        ...where,
      });
    }
  }

  // ---- 6. relayed messages carry their business key on every request ------------------------------
  for (const r of input.received) {
    const message = r.webhookId ? messagesById.get(r.webhookId) : undefined;
    if (!message?.businessKey) continue;
    count('relayed.requests');
    if (r.idempotencyKey !== message.businessKey) {
      fail({
        check: '6',
        title: 'a request of a relayed message did not carry its business key as Idempotency-Key',
        detail: `${r.receiver} request #${r.seq} for ${message.id}: Idempotency-Key ${r.idempotencyKey}, business key ${message.businessKey}`,
        messageIds: [message.id],
        endpointId: endpointsByName.get(r.receiver)?.id,
        keys: [message.businessKey],
      });
    }
  }

  // ---- signatures, crashes, and what the receivers absorbed --------------------------------------
  for (const r of input.received) {
    if (r.applied === 'duplicate') count('receivers.duplicates_absorbed');
    if (r.applied === 'new') count('receivers.effects_applied');
    if (!r.webhookId || !messagesById.has(r.webhookId) || !r.signatureOk) {
      fail({
        check: 'signature',
        title: 'a request was not a correctly signed message of this soak',
        detail: `${r.receiver} request #${r.seq}: webhook-id ${r.webhookId}, signature ${r.signatureOk ? 'ok' : 'invalid'}`,
        messageIds: r.webhookId ? [r.webhookId] : [],
        endpointId: endpointsByName.get(r.receiver)?.id,
      });
    }
  }
  for (const e of input.processEvents) {
    if (e.event === 'crashed') {
      fail({
        check: 'crash',
        title: 'a herald process exited on its own',
        detail: `${e.name} generation ${e.generation} (pid ${e.pid}) exited with code ${e.code} signal ${e.signal ?? 'none'}\n${e.detail ?? ''}`,
        window: [e.t - 5000, e.t],
      });
    }
    if (e.event === 'start-failed') count('processes.start_failures');
    if (e.event === 'started') count('processes.starts');
  }
  for (const f of input.faults) {
    count('faults.injected');
    count(`faults.${f.kind}`);
    if (!f.ok) count('faults.failed_to_inject');
  }
  for (const d of snapshot.deliveries) count(`db.deliveries.${d.state}`);
  for (const a of snapshot.attempts) count(`db.attempts.${a.outcome ?? 'open'}`);
  return { counts, violations, notes };
}

export const iso = (t: number | null): string => (t === null ? '—' : new Date(t).toISOString().slice(11, 23));
