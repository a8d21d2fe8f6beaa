// Deliveries: the state machine's transitions (see migrations/0002_delivery_functions.sql for
// claim, outcome recording and lease recovery) and the manual ones: resend and recover.

import type { StoredHeaders } from '../crypto/sealed-headers.ts';
import type { DeliveryState } from '../domain/message-status.ts';
import type { RetryPolicy } from '../domain/retry-policy.ts';
import { steadyNow } from '../domain/steady-clock.ts';
import { SENT_AS_EXAMPLE } from './audit.ts';
import { payloadKept } from './messages.ts';
import type { Queryable } from './port.ts';
import { createdBetween } from './time-ids.ts';

export interface ClaimedDelivery {
  deliveryId: string;
  attemptId: string;
  leaseToken: string;
  /** The lease's expiry by the database's clock. */
  leaseExpiresAt: Date;
  /**
   * The lease's end on this process's steady clock (domain/steady-clock.ts), never later than the
   * real one whatever the skew between the hosts or a step of this host's wall clock: the time
   * the claim was sent, plus the lease. The database took its now() after the claim arrived, so
   * its lease runs at least this long. Whatever the worker times against the lease (may a
   * request still start? may an outcome write still be retried?) it times against this.
   */
  leaseEndsBy: Date;
  appId: string;
  messageId: string;
  endpointId: string;
  cycle: number;
  attemptsInCycle: number;
  trigger: 'scheduled' | 'manual';
  url: string;
  /** Sealed: the worker opens them (worker/endpoint-headers.ts). */
  headers: StoredHeaders;
  secretVersion: number;
  /** The endpoint applies a repeated request once: unknown outcomes may be retried. */
  idempotent: boolean;
  clientErrorPolicy: 'retry' | 'dead-letter';
  eventType: string;
  /** The message's bytes as sent (UTF-8); one Buffer per message in a claim. null: expired. */
  payload: Buffer | null;
  messageCreatedAt: Date;
  /** Relayed messages only: sent as Idempotency-Key on every attempt. */
  businessKey: string | null;
  /**
   * A throttled endpoint's (throttleRate), else null: `until`, on this process's steady clock, a
   * moment by which its next request may start (the claim's answer came after the database's
   * now(), which the spacing counts from); `spacingMs`, 1 / throttleRate, which the outcome write
   * counts again from when the request left (migration 0040).
   */
  throttle: { until: Date; spacingMs: number } | null;
}

const CLAIM_COLUMNS = `delivery_id as "deliveryId", attempt_id as "attemptId", lease_token as "leaseToken",
  lease_expires_at as "leaseExpiresAt", app_id as "appId", message_id as "messageId",
  endpoint_id as "endpointId", cycle, attempts_in_cycle as "attemptsInCycle", trigger, url, sealed_headers as headers,
  secret_version as "secretVersion", idempotent, client_error_policy as "clientErrorPolicy",
  event_type as "eventType", payload, message_created_at as "messageCreatedAt", business_key as "businessKey",
  payload_shared as "payloadShared", next_start_at as "nextStartAt"`;

/** A claim's row: each message's payload comes on its first row only, as herald asks (migrations/0018). */
type ClaimedRow = Omit<ClaimedDelivery, 'payload' | 'leaseEndsBy' | 'throttle'> & {
  payload: string | null;
  payloadShared: boolean;
  /** When a throttled endpoint's next request may start, by the database's clock (0028). */
  nextStartAt: Date | null;
};

/** The lease's two ends of one claim: on the steady clock as it was sent, and its length. */
interface LeaseTiming {
  leaseEndsBy: Date;
  leaseMs: number;
}

/**
 * A claim's rows as deliveries, each with its lease's local end and its message's payload as the
 * bytes every attempt sends and signs: the claim sends it once per message (a fan-out claims many
 * deliveries of one message), and it is encoded once, instead of at every request and every
 * signature; a Buffer's bytes also stay out of the young generation the worker's garbage
 * collector copies.
 */
function asClaimed(rows: readonly ClaimedRow[], { leaseEndsBy, leaseMs }: LeaseTiming): ClaimedDelivery[] {
  const answeredAt = steadyNow();
  // next_start_at less the lease's expiry is the spacing after the database's now(), which came
  // before the answer: counted from the answer, the slot is surely open again.
  const throttle = (row: ClaimedRow) => {
    if (row.nextStartAt === null) return null;
    const spacingMs = leaseMs + row.nextStartAt.getTime() - row.leaseExpiresAt.getTime();
    return { until: new Date(answeredAt + spacingMs), spacingMs };
  };
  const bytes = new Map<string, Buffer | null>();
  // One object per delivery: the row's copy with its bytes. The row's other columns ride along
  // unread (payloadShared; on an outcome write's answer, its outcome columns, null).
  return rows.map((row) => {
    if (!row.payloadShared) {
      const payload = row.payload === null ? null : Buffer.from(row.payload, 'utf8');
      bytes.set(row.messageId, payload);
      return { ...row, payload, leaseEndsBy, throttle: throttle(row) };
    }
    const payload = bytes.get(row.messageId);
    // The claim puts a message's first row before the ones that share its payload.
    if (payload === undefined)
      throw new Error(`claim: a shared payload came before its message ${row.messageId}`);
    return { ...row, payload, leaseEndsBy, throttle: throttle(row) };
  });
}

/** What a claim asks for: up to `batch` deliveries, round-robin after the endpoint `afterEndpoint`. */
export interface ClaimRequest {
  batch: number;
  leaseSeconds: number;
  afterEndpoint: string;
  /** Kept on the attempts it starts, so that a claim whose answer was lost can be given back. */
  claimId?: string;
}

export async function claimDeliveries(db: Queryable, claim: ClaimRequest): Promise<ClaimedDelivery[]> {
  const lease = leaseTiming(claim);
  const result = await db.query<ClaimedRow>(
    `select ${CLAIM_COLUMNS} from herald_claim($1, make_interval(secs => $2), $3, $4::uuid, share_payloads => true)`,
    [claim.batch, claim.leaseSeconds, claim.afterEndpoint, claim.claimId ?? null],
    'claim_deliveries',
  );
  return asClaimed(result.rows, lease);
}

/** Taken just before a claim is sent: see ClaimedDelivery.leaseEndsBy. */
function leaseTiming(claim: ClaimRequest): LeaseTiming {
  const leaseMs = claim.leaseSeconds * 1000;
  return { leaseEndsBy: new Date(steadyNow() + leaseMs), leaseMs };
}

export interface AttemptResult {
  deliveryId: string;
  leaseToken: string;
  outcome: 'success' | 'failure' | 'unknown';
  statusCode: number | null;
  responseClass: string;
  responseBody: string;
  durationMs: number;
  /** null on a non-success: the cycle's budget is spent and the delivery fails. */
  nextAttemptAt: Date | null;
  /** Disable the endpoint now, whatever its failure count (a 410 Gone). */
  disableEndpoint: 'gone' | null;
  /** The receiver refused herald's credentials (401/403): flag the endpoint. */
  credentialsRejected: boolean;
  /**
   * Whether a failure is the endpoint's, and counts towards auto-disable: false for herald's own
   * (nothing to send: the payload expired; no readable signing secret).
   */
  endpointAtFault: boolean;
  /**
   * For a failure the endpoint is at fault for: how long its slot closes after the n-th failure
   * in a row (steps[n - 1], from the second; migration 0032), and the receiver's Retry-After
   * (seconds, bounded), which holds back the endpoint's every delivery. Absent: no pause.
   */
  endpointPause?: { steps: readonly number[]; retryAfterSeconds: number | null };
}

export interface RecordedOutcome {
  deliveryId: string;
  recorded: boolean;
  endpointDisabled: boolean;
}

export async function recordOutcomes(
  db: Queryable,
  results: readonly AttemptResult[],
  disableAfter: number,
): Promise<RecordedOutcome[]> {
  const result = await db.query<RecordedOutcome>(
    `select delivery_id as "deliveryId", recorded, endpoint_disabled as "endpointDisabled"
       from herald_record_outcomes($1::jsonb, $2)`,
    [outcomeItems(results), disableAfter],
    'record_outcomes',
  );
  return result.rows;
}

/**
 * recordOutcomes, then claimDeliveries, in one call and one commit (herald_record_and_claim,
 * migrations/0007): the endpoints the outcomes free can be claimed again at once.
 */
export async function recordOutcomesAndClaim(
  db: Queryable,
  results: readonly AttemptResult[],
  disableAfter: number,
  claim: ClaimRequest,
): Promise<{ recorded: RecordedOutcome[]; claimed: ClaimedDelivery[] }> {
  const lease = leaseTiming(claim);
  const result = await db.query<
    // A recorded outcome's row or a claimed delivery's: each leaves the other's columns null.
    ClaimedRow & {
      recordedDeliveryId: string | null;
      recorded: boolean | null;
      endpointDisabled: boolean | null;
    }
  >(
    `select recorded_delivery_id as "recordedDeliveryId", recorded, endpoint_disabled as "endpointDisabled",
            ${CLAIM_COLUMNS}
       from herald_record_and_claim($1::jsonb, $2, $3, make_interval(secs => $4), $5, $6::uuid, share_payloads => true)`,
    [
      outcomeItems(results),
      disableAfter,
      claim.batch,
      claim.leaseSeconds,
      claim.afterEndpoint,
      claim.claimId ?? null,
    ],
    'record_and_claim',
  );
  const recorded: RecordedOutcome[] = [];
  const claimed: ClaimedRow[] = [];
  for (const row of result.rows) {
    if (row.recordedDeliveryId === null) claimed.push(row);
    else
      recorded.push({
        deliveryId: row.recordedDeliveryId,
        recorded: row.recorded === true,
        endpointDisabled: row.endpointDisabled === true,
      });
  }
  return { recorded, claimed: asClaimed(claimed, lease) };
}

function outcomeItems(results: readonly AttemptResult[]): string {
  const items = results.map((r) => ({
    delivery_id: r.deliveryId,
    lease_token: r.leaseToken,
    outcome: r.outcome,
    status_code: r.statusCode,
    response_class: r.responseClass,
    response_body: r.responseBody,
    duration_ms: r.durationMs,
    next_attempt_at: r.nextAttemptAt?.toISOString() ?? null,
    disable_endpoint: r.disableEndpoint,
    credentials_rejected: r.credentialsRejected,
    endpoint_at_fault: r.endpointAtFault,
    ...(r.endpointPause && r.outcome === 'failure'
      ? { pause_steps: r.endpointPause.steps, retry_after: r.endpointPause.retryAfterSeconds }
      : {}),
  }));
  return JSON.stringify(items);
}

/** Gives back a lease whose attempt was never sent; false when recovery took it already. */
export async function releaseUnsent(
  db: Queryable,
  lease: Pick<ClaimedDelivery, 'leaseToken' | 'deliveryId'>,
): Promise<boolean> {
  const result = await db.query<{ released: boolean }>('select herald_release_unsent($1, $2) as released', [
    lease.leaseToken,
    lease.deliveryId,
  ]);
  return result.rows[0]?.released ?? false;
}

/**
 * Whether a lease that a give-back did not find was taken by lease recovery, which keeps its
 * attempt (as unknown); a give-back removes it. So when an earlier try of the give-back committed
 * and its answer was lost, the retry finds no lease and no attempt: given back after all.
 */
export async function attemptRecovered(db: Queryable, attemptId: string): Promise<boolean> {
  const result = await db.query('select 1 from attempt where id = $1', [attemptId]);
  return result.rows.length > 0;
}

/** Which of these deliveries exist (those not deleted, with their endpoint, app or message). */
export async function existingDeliveries(db: Queryable, ids: readonly string[]): Promise<Set<string>> {
  const result = await db.query<{ id: string }>('select id from delivery where id = any($1)', [ids]);
  return new Set(result.rows.map((r) => r.id));
}

/**
 * Gives back, unsent, every lease of a claim its worker never started (the claim's answer was
 * lost after it committed, or its signing keys could not be read); returns how many there were.
 */
export async function releaseClaim(db: Queryable, claimId: string): Promise<number> {
  const result = await db.query<{ released: number }>('select herald_release_claim($1) as released', [
    claimId,
  ]);
  return result.rows[0]?.released ?? 0;
}

/**
 * When a due delivery's wait for service began, as SQL over `q` (its `delivery_queued` row), `s`
 * (its endpoint's `delivery_lease` slot) and `e` (its endpoint): its due time; for a throttled
 * endpoint the later moment its slot opened again (0028: the last start plus 1 / throttleRate) —
 * a throttled backlog waits its turn by design; not before the endpoint was last enabled (0030) —
 * a disabled endpoint's backlog waited on purpose; and not before the endpoint's last attempt
 * started — a backlog that drains one request at a time to a slow receiver is served, at the
 * receiver's pace, which is no worker's fault (the attempts' index by endpoint and id: one entry).
 * What the doctor's overdue check and the oldest-due gauge (and its alert) measure.
 */
export const UNSERVED_SINCE = `greatest(q.next_attempt_at, s.next_start_at, e.enabled_at,
  (select a.started_at from attempt a where a.endpoint_id = e.id order by a.id desc limit 1))`;

/**
 * SQL over `s`, an endpoint's `delivery_lease` slot: the endpoint rests after failures or a
 * Retry-After (0032) — its slot closed past a throttle's spacing, which is at most a second. By the
 * statement's clock, not the transaction's: a claim committed while a longer transaction waited (a
 * change of the endpoint, on DNS) sets a throttle's next start past that transaction's start.
 */
export const SLOT_RESTING = "s.next_start_at > statement_timestamp() + interval '1 second'";

export interface RecoveredLease {
  deliveryId: string;
  endpointId: string;
  leaseToken: string;
}

/**
 * Ends leases past their expiry (their worker died or lost the database): each attempt becomes
 * `unknown` and its delivery waits the schedule's next step (migration 0031), or fails once the
 * cycle's budget is spent or its endpoint is not idempotent.
 */
export async function recoverExpiredLeases(
  db: Queryable,
  policy: RetryPolicy,
  batch = 500,
): Promise<RecoveredLease[]> {
  const result = await db.query<RecoveredLease>(
    `select delivery_id as "deliveryId", endpoint_id as "endpointId", lease_token as "leaseToken"
       from herald_recover_expired_leases($1::float8[], $2, $3)`,
    [policy.schedule, policy.jitter, batch],
  );
  return result.rows;
}

/**
 * A restart's hold on its delivery's message, until its transaction ends: history retention
 * (retention.ts) neither deletes the message under a restart nor misses one that committed. A
 * message whose payload is not kept (payloadKept) is not restarted: each attempt would fail at
 * once (payload_expired), and count as work done.
 */
const messageHeld = (messageId: string) =>
  `exists (select 1 from message m where m.id = ${messageId} and ${payloadKept('m.')} for key share)`;
const MESSAGE_HELD = messageHeld('delivery.message_id');

/**
 * Starts a new cycle: the same delivery id and message id (so the same webhook-id), a fresh
 * budget, due now. A pending delivery that has made attempts in its cycle (a retry waiting) starts
 * one too, as one in flight does (migration 0034): a resend one retry short of the budget would
 * otherwise get one request, and its failure would end the cycle at once, the retries it had left
 * gone. One not yet attempted only becomes due now. The lifetime history — attempts_total and the
 * attempt rows — is never touched. Resend, recover and replay all restart deliveries with this,
 * so they cannot drift apart.
 */
const RESTART = `cycle = cycle + case when state = 'pending' and attempts_in_cycle = 0 then 0 else 1 end,
    attempts_in_cycle = 0,
    state = 'pending', next_attempt_at = now(), trigger = 'manual', updated_at = now()`;

/**
 * What a resend did: started a cycle now, queued one behind the attempt in flight, or nothing (the
 * payload is gone).
 */
export type Resend = 'resent' | 'queued' | 'payload_gone';

/** Statements a resend tries before it gives up on a delivery that keeps changing under it. */
const RESEND_ROUNDS = 5;

/**
 * Starts a new cycle for one message × endpoint, keeping its id and lifetime history. A delivery
 * that is already pending starts a new cycle due now (if it made attempts in its own). One in flight is marked (`queued`): its attempt ends as
 * it will, and then the delivery starts its new cycle (migration 0034) — one request in flight per
 * endpoint stays. The state guards sit in the UPDATEs' WHERE clauses, which PostgreSQL re-checks
 * on the latest row version, so competing resends start exactly one new cycle. A message that was
 * never routed to the endpoint (subscribed later) gets its delivery created here: an explicit
 * resend is a request. Nothing starts when the message's payload is gone (retention):
 * `payload_gone`.
 */
export async function resendDelivery(
  db: Queryable,
  appId: string,
  messageId: string,
  endpointId: string,
): Promise<Resend> {
  for (let round = 0; round < RESEND_ROUNDS; round++) {
    const result = await db.query<{ sendable: boolean; started: boolean; queued: boolean }>(
      `with sendable as (
         select 1 where ${messageHeld('$2')}
       ), created as (
         insert into delivery (app_id, message_id, endpoint_id, next_attempt_at, trigger)
         select $1, $2, $3, now(), 'manual' from sendable
         on conflict (message_id, endpoint_id) do nothing
         returning 1
       ), restarted as (
         update delivery set ${RESTART}
          where message_id = $2 and endpoint_id = $3 and state <> 'sending' and exists (select 1 from sendable)
         returning 1
       ), queued as (
         update delivery set resend_requested_at = now()
          where message_id = $2 and endpoint_id = $3 and state = 'sending' and exists (select 1 from sendable)
         returning 1
       )
       select exists (select 1 from sendable) as sendable,
              exists (select 1 from created) or exists (select 1 from restarted) as started,
              exists (select 1 from queued) as queued`,
      [appId, messageId, endpointId],
    );
    const row = result.rows[0];
    if (!row?.sendable) return 'payload_gone';
    if (row.queued) return 'queued';
    if (row.started) {
      await db.query(`select pg_notify('herald_work', $1)`, [appId]);
      return 'resent';
    }
    // Neither: between this statement's snapshot and its row lock, the delivery moved — its
    // attempt ended, a claim took it, a publish created it. The next statement sees where it is.
  }
  throw new Error(
    `the delivery of ${messageId} to ${endpointId} kept changing under ${RESEND_ROUNDS} resends`,
  );
}

/** How many of an endpoint's waiting retries an enable makes due now (as many as it releases). */
const RETRIES_DUE_AT_ENABLE = 10_000;

/**
 * An endpoint enabled again: its deliveries waiting to retry (hours ahead, some, when failures
 * disabled it) are due now, with the budgets they have left — someone has asked for a send. Its
 * deliveries never tried are due already. Found in the queue tables by the endpoint's due times
 * (their keys), never in its history; the first 10,000, as the enable releases its held rows: the
 * rest keep their times, and so do those another transaction holds at that moment (they are tried
 * on their schedule): the enable holds the endpoint's row, and waiting for the endpoint's deletion
 * (history-purge.ts), which holds its retries, held up every publish to the app, and deadlocked
 * with the deletion.
 */
export async function retriesDueNow(db: Queryable, endpointId: string): Promise<void> {
  await db.query(
    `update delivery d set next_attempt_at = now(), updated_at = now()
      where d.id = any(array(
              select p.id from delivery p
               where p.id in (
                       (select q.delivery_id from delivery_due q
                         where q.endpoint_id = $1 and q.next_attempt_at > now() order by q.next_attempt_at limit $2)
                       union all
                       (select q.delivery_id from delivery_deferred q
                         where q.endpoint_id = $1 and q.next_attempt_at > now() order by q.next_attempt_at limit $2))
                 and p.state = 'pending' and p.next_attempt_at > now()
                 for no key update skip locked))`,
    [endpointId, RETRIES_DUE_AT_ENABLE],
  );
}

/**
 * Opens an endpoint's slot that failures or a Retry-After closed (migration 0032), for an
 * operator who asks for a send now: a resend, a recovery, an enable; and brings back the backlog
 * that a long rest held out of the claims' walk (0033). A throttle's spacing, at most a second,
 * stays.
 */
export async function liftEndpointPause(
  db: Queryable,
  endpointId: string,
  /** The caller holds the endpoint's row lock (an enable): the lift must not wait for its slot. */
  holdsEndpoint = false,
): Promise<void> {
  await db.query('select herald_lift_endpoint_pause($1, $2)', [endpointId, holdsEndpoint]);
}

/**
 * Whether the row `f` of delivery_failed awaits review: unknown outcomes not yet reviewed
 * (`herald reconcile --acknowledge`), to an endpoint that is not idempotent (one that is was
 * retried through them, and dedupes a request sent again). Recover and replay leave these unless
 * asked by name; `herald doctor` and herald_unknown_outcomes_parked count these, and only these.
 */
export const awaitsReview = (f: string) =>
  `(${f}.unknown_attempts > 0 and not (select e.idempotent from endpoint e where e.id = ${f}.endpoint_id))`;

/** A delivery `d` parked for review (awaitsReview). */
export const PARKED_FOR_REVIEW = `exists (select 1 from delivery_failed f
  where f.endpoint_id = d.endpoint_id and f.delivery_id = d.id and ${awaitsReview('f')})`;

/**
 * Endpoint recovery: every failed delivery of the endpoint in the window starts a new cycle, but,
 * on an endpoint that is not idempotent, those whose unknown outcomes await review (`herald
 * reconcile`): sent again, a request that may have been applied could apply twice — why they were
 * parked — and the restart would clear what the review waits on. A resend, or a replay that
 * includes them, sends one on purpose. Returns how many restarted, and how many were left so.
 */
export async function recoverFailedDeliveries(
  db: Queryable,
  endpointId: string,
  since: Date,
  until: Date | null,
): Promise<{ restarted: number; leftForReview: number }> {
  const failedInWindow = `d.id in (select f.delivery_id from delivery_failed f where f.endpoint_id = $1)
    and d.state = 'failed' and d.created_at >= $2 and ($3::timestamptz is null or d.created_at < $3)`;
  const result = await db.query(
    `update delivery d set ${RESTART}
      where ${failedInWindow} and not ${PARKED_FOR_REVIEW} and ${messageHeld('d.message_id')}`,
    [endpointId, since, until],
  );
  const left = await db.query<{ n: number }>(
    `select count(*)::int as n from delivery d where ${failedInWindow} and ${PARKED_FOR_REVIEW}`,
    [endpointId, since, until],
  );
  if (result.rowCount > 0) await db.query(`select pg_notify('herald_work', $1)`, [endpointId]);
  return { restarted: result.rowCount, leftForReview: left.rows[0]!.n };
}

/**
 * SQL: endpoint `e` is subscribed to message `m` — the fan-out's rule (herald_publish_messages,
 * migration 0039): its event types, if it names any, and a channel in common, if it names any.
 */
export const ENDPOINT_MATCHES = `(e.filter_types is null or m.event_type = any(e.filter_types))
  and (e.channels is null or e.channels && coalesce(m.channels, '{}'))`;

/** Deliveries one replay-missing call makes at most: a window of a busy app is done call by call. */
export const REPLAY_MISSING_CAP = 10_000;

/**
 * Svix's replay-missing: a delivery to the endpoint, due now, for each message of its app created
 * in the window that it matches today (event types, channels) and was never routed to it — one
 * published before the endpoint existed, or while its filters left it out. A message already
 * routed to it is not sent again (recover and resend restart those), nor one sent as an example
 * to another endpoint alone, nor one whose payload is gone: it has nothing left to send. The
 * messages are held for key share, as a restart holds its message, so that history retention
 * neither deletes one under the insert nor misses one that committed; a replay beside another
 * inserts each delivery once (the unique message × endpoint key). At most `cap` a call, the
 * oldest first: `more` says the cap was reached, and the next call goes on from there (what this
 * one made is no longer missing).
 */
export async function replayMissingDeliveries(
  db: Queryable,
  endpointId: string,
  since: Date,
  until: Date | null,
  cap = REPLAY_MISSING_CAP,
): Promise<{ made: number; more: boolean }> {
  const result = await db.query<{ made: number; picked: number }>(
    `with picked as (
       select m.app_id, m.id as message_id, e.id as endpoint_id
         from endpoint e join message m on m.app_id = e.app_id
        where e.id = $1
          and ${createdBetween({ prefix: 'msg', idColumn: 'm.id', timeColumn: 'm.created_at', after: '$2', before: '$3', includeAfter: true })}
          and m.payload is not null
          and ${ENDPOINT_MATCHES}
          and not exists (select 1 from delivery d where d.message_id = m.id and d.endpoint_id = e.id)
          and not ${SENT_AS_EXAMPLE}
        order by m.id
        limit $4
          for key share of m, e
     ), missing as (
       insert into delivery (app_id, message_id, endpoint_id, next_attempt_at, trigger)
       select app_id, message_id, endpoint_id, now(), 'manual' from picked order by message_id
       on conflict (message_id, endpoint_id) do nothing
       returning 1
     )
     select (select count(*) from missing)::int as made, (select count(*) from picked)::int as picked`,
    [endpointId, since, until, cap],
  );
  const { made, picked } = result.rows[0]!;
  if (made > 0) await db.query(`select pg_notify('herald_work', $1)`, [endpointId]);
  return { made, more: picked >= cap };
}

export interface RestartedDelivery {
  deliveryId: string;
  appId: string;
  messageId: string;
  endpointId: string;
  cycle: number;
}

/**
 * Replay: a new cycle for each of these deliveries, exactly as a resend would start it. One in
 * flight is left alone (its outcome is coming); the guard is re-checked on the latest row version.
 */
export async function restartDeliveries(
  db: Queryable,
  deliveryIds: readonly string[],
): Promise<RestartedDelivery[]> {
  if (deliveryIds.length === 0) return [];
  const result = await db.query<RestartedDelivery>(
    `update delivery set ${RESTART} where id = any($1) and state <> 'sending' and ${MESSAGE_HELD}
     returning id as "deliveryId", app_id as "appId", message_id as "messageId", endpoint_id as "endpointId", cycle`,
    [deliveryIds],
  );
  if (result.rowCount > 0) await db.query(`select pg_notify('herald_work', 'replay')`);
  return result.rows;
}

export interface DestinationRow {
  endpointId: string;
  state: DeliveryState;
  nextAttemptAt: Date | null;
}

export async function listDestinations(db: Queryable, messageId: string): Promise<DestinationRow[]> {
  const result = await db.query<DestinationRow>(
    `select endpoint_id as "endpointId", state, next_attempt_at as "nextAttemptAt"
       from delivery where message_id = $1 order by endpoint_id`,
    [messageId],
  );
  return result.rows;
}

/**
 * An operator has looked into a message's unknown attempts and decided to leave them (the
 * receiver applied them, or nothing is to be done): each is marked acknowledged (it stays
 * `unknown`, which is what herald knows of it), whatever its delivery's state — one retried to a
 * success since is as much in the report as one parked — and the message's parked deliveries no
 * longer count any as awaiting review (herald doctor, herald_unknown_outcomes_parked), nor does a
 * later parking (migration 0029); history retention may prune the message. Returns each delivery
 * with the unknown attempts acknowledged on it.
 */
export async function acknowledgeUnknownOutcomes(
  db: Queryable,
  messageId: string,
): Promise<{ deliveryId: string; appId: string; unknownAttempts: number }[]> {
  // The message's deliveries first, locked as the writes that park, resend or recover one lock
  // it: an acknowledgment made beside a parking would miss the failed row the parking is adding
  // (and the parking's count, this acknowledgment), leaving the delivery counted as awaiting
  // review for good. The statement after this one sees what such a write committed.
  await db.query('select 1 from delivery d where d.message_id = $1 order by d.id for no key update', [
    messageId,
  ]);
  const result = await db.query<{ deliveryId: string; appId: string; unknownAttempts: number }>(
    `with acknowledged as (
       update attempt a set acknowledged_at = now()
        where a.message_id = $1 and a.outcome = 'unknown' and a.acknowledged_at is null
       returning a.delivery_id, a.app_id
     ), unparked as (
       update delivery_failed f set unknown_attempts = 0
         from delivery d
        where d.message_id = $1 and (f.endpoint_id, f.delivery_id) = (d.endpoint_id, d.id)
          and f.unknown_attempts > 0
     )
     select k.delivery_id as "deliveryId", min(k.app_id) as "appId", count(*)::int as "unknownAttempts"
       from acknowledged k group by k.delivery_id order by k.delivery_id`,
    [messageId],
  );
  return result.rows;
}
