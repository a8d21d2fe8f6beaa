// One attempt: build the signed Standard Webhooks request, send it with no transaction open, and
// turn what happened into the delivery's next state. Nothing here touches the database.

import type { AttemptResult, ClaimedDelivery } from '../db/deliveries.ts';
import { judgeAttempt } from '../domain/outcome-policy.ts';
import { boundedRetryAfter, nextAttemptAt, type RetryPolicy } from '../domain/retry-policy.ts';
import { steadyNow } from '../domain/steady-clock.ts';
import { failpoint } from '../ops/failpoints.ts';
import type { Sender } from '../sender/send.ts';
import { signPayload } from '../signing/standard-webhooks.ts';

export interface AttemptContext {
  sender: Sender;
  policy: RetryPolicy;
  /** Whether the id, timestamp and signature go under Svix's names too (Config.svixHeaders). */
  svixHeaders?: boolean | undefined;
  /** An endpoint whose failures never count towards auto-disable (WorkerOptions). */
  operatorEndpointId?: string | null;
  /** The clock retries are scheduled and signatures timestamped by; the database's by default. */
  now?: () => Date;
  random?: () => number;
}

/**
 * What an attempt's request carries whenever it leaves: the endpoint's headers, then herald's. The
 * signature's go over all of these (the sender spreads `headersAtSend` last).
 */
function requestHeaders(
  claim: ClaimedDelivery,
  endpointHeaders: Readonly<Record<string, string>>,
  svixHeaders: boolean,
): Record<string, string> {
  return {
    // Endpoint headers first, so that herald's own headers always win.
    ...endpointHeaders,
    'content-type': 'application/json',
    'webhook-id': claim.messageId,
    ...(svixHeaders ? { 'svix-id': claim.messageId } : {}),
    // One business key for every attempt of every cycle: the receiver can apply it once.
    ...(claim.businessKey === null ? {} : { 'idempotency-key': asHeaderValue(claim.businessKey) }),
  };
}

/**
 * Visible ASCII, spaces inside only — what every HTTP stack carries in a header unchanged — and no
 * `%`: a key that holds one is encoded too, so that no key sent as it is reads like another one
 * encoded (`Caf%C3%A9` sent as it is, and `Café` encoded, would be one key at the receiver).
 */
const HEADER_SAFE = /^[\x21-\x24\x26-\x7e](?:[\x20-\x24\x26-\x7e]*[\x21-\x24\x26-\x7e])?$/;

/**
 * A business key as a header value. A key is read from what a provider sent (business-key.ts) and
 * may hold what a header cannot carry — a line break, a control character, text beyond Latin-1 —
 * which would fail every attempt before it left (the request refused by the HTTP client) and
 * could disable a healthy endpoint; text in Latin-1 would arrive as other characters. Such a key
 * goes out percent-encoded (its UTF-8 bytes), the same for every attempt; any other, as it is:
 * two keys never go out alike.
 */
function asHeaderValue(key: string): string {
  return HEADER_SAFE.test(key) ? key : encodeURIComponent(key);
}

/**
 * The timestamp and the signature over it, made as the request leaves (after any wait for its
 * origin): a receiver checks the timestamp against its clock to refuse replays of old requests.
 * Under Svix's names too, when asked: the same values, signed once.
 */
function signatureHeaders(
  messageId: string,
  body: string | Buffer,
  keys: readonly Buffer[],
  timestampSeconds: number,
  svixHeaders: boolean,
): Record<string, string> {
  const timestamp = String(timestampSeconds);
  const signature = signPayload({ msgId: messageId, timestampSeconds, body, keys });
  return {
    'webhook-timestamp': timestamp,
    'webhook-signature': signature,
    ...(svixHeaders ? { 'svix-timestamp': timestamp, 'svix-signature': signature } : {}),
  };
}

/**
 * The database's time, read on this process's steady clock: the claim's lease expiry (the
 * database's now() at the claim, plus the lease) less its local end (the steady clock as the
 * claim left, plus the lease) is the clocks' difference, to within the claim's trip to the
 * database; a step of this host's wall clock does not enter. Retries are due
 * by the database's clock (claims compare them with its now()), so they are scheduled by it: a
 * worker host whose clock is off neither hurries nor delays them. Signatures are timestamped by it
 * too: one clock to keep right, the database's, however many worker hosts there are.
 */
function databaseClock(claim: ClaimedDelivery): () => Date {
  const offsetMs = claim.leaseExpiresAt.getTime() - claim.leaseEndsBy.getTime();
  return () => new Date(steadyNow() + offsetMs);
}

/** The attempt ran and has an outcome, to be recorded under its lease. */
export interface FinishedAttempt extends AttemptResult {
  kind: 'finished';
}

/**
 * The attempt never started: its request waited for a free connection to its origin until its
 * deadline no longer fitted in the lease (herald's congestion). Nothing was sent and there is no
 * outcome: the lease is given back unsent, and the endpoint's record is untouched.
 */
export interface UnstartedAttempt {
  kind: 'not_started';
  deliveryId: string;
  leaseToken: string;
  /** How long the request waited for its origin. */
  queuedMs: number;
  /** `stillWanted` withdrew it when its place came (its endpoint changed), not its start limit. */
  withdrawn: boolean;
}

export type AttemptRun = FinishedAttempt | UnstartedAttempt;

/** What a request needs of the endpoint's secrets, opened: its signing keys and its headers. */
export interface EndpointSecrets {
  /** Current first; none: none could be opened. */
  keys: readonly Buffer[];
  /** null: sealed under a master key this worker lacks (or damaged). */
  headers: Readonly<Record<string, string>> | null;
}

/**
 * `startBy`: the latest moment the request may start, so that its whole deadline fits in the lease.
 * `stillWanted`: asked right before the request leaves (see OutboundRequest.stillWanted).
 */
export async function runAttempt(
  ctx: AttemptContext,
  claim: ClaimedDelivery,
  { keys, headers }: EndpointSecrets,
  startBy: Date,
  stillWanted?: () => boolean,
): Promise<AttemptRun> {
  const now = ctx.now ?? databaseClock(claim);
  const base = { deliveryId: claim.deliveryId, leaseToken: claim.leaseToken };
  const onSchedule = (retryAfterSeconds: number | null) =>
    nextAttemptAt(ctx.policy, {
      attemptsInCycle: claim.attemptsInCycle,
      now: now(),
      random: (ctx.random ?? Math.random)(),
      retryAfterSeconds,
    });
  if (claim.payload === null || keys.length === 0 || headers === null) {
    // Nothing can be sent, and it is herald's doing, not the endpoint's: the attempt fails without
    // counting towards the endpoint's auto-disable. A payload past its retention (or expunged) is
    // gone for good: the cycle ends. An unreadable secret or set of headers (a worker with another
    // master key) may be readable by another worker, or once it is fixed: the attempt is retried
    // on the schedule.
    const expired = claim.payload === null;
    return {
      kind: 'finished',
      ...base,
      outcome: 'failure',
      statusCode: null,
      responseClass: expired
        ? 'payload_expired'
        : keys.length === 0
          ? 'no_signing_secret'
          : 'headers_unreadable',
      responseBody: '',
      durationMs: 0,
      nextAttemptAt: expired ? null : onSchedule(null),
      disableEndpoint: null,
      credentialsRejected: false,
      endpointAtFault: false,
    };
  }
  const body = claim.payload;
  const svixHeaders = ctx.svixHeaders === true;
  const sent = await ctx.sender.send({
    url: claim.url,
    headers: requestHeaders(claim, headers, svixHeaders),
    headersAtSend: () =>
      signatureHeaders(claim.messageId, body, keys, Math.floor(now().getTime() / 1000), svixHeaders),
    body,
    startBy,
    stillWanted,
  });
  if (sent.kind === 'not_started')
    return { kind: 'not_started', ...base, queuedMs: sent.queuedMs, withdrawn: sent.withdrawn };
  // The request left and was answered; a crash here leaves the attempt open for lease recovery.
  failpoint('attempt.after_send');
  const verdict = judgeAttempt(sent, claim);
  const next = sent.outcome === 'success' || verdict.stopCycle ? null : onSchedule(sent.retryAfterSeconds);
  return {
    kind: 'finished',
    ...base,
    outcome: sent.outcome,
    statusCode: sent.statusCode,
    responseClass: sent.responseClass,
    responseBody: sent.responseBody,
    durationMs: sent.durationMs,
    nextAttemptAt: next,
    disableEndpoint: verdict.disableEndpoint,
    credentialsRejected: verdict.credentialsRejected,
    endpointAtFault: verdict.endpointAtFault && claim.endpointId !== ctx.operatorEndpointId,
    endpointPause: {
      steps: ctx.policy.schedule,
      retryAfterSeconds: boundedRetryAfter(ctx.policy, sent.retryAfterSeconds),
    },
  };
}
