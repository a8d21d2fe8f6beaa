// The outbound HTTP sender: one attempt of one delivery, as the worker's step (b) — outside any
// transaction, never touching the database, never logging headers or bodies.

import { Agent } from 'undici';
import {
  type AttemptOutcome,
  classifyError,
  classifyStatus,
  errorCodeOf,
  type ResponseClass,
  takesRetryAfter,
} from './classify.ts';
import {
  type ConnectionsUnderway,
  createConnectionsUnderway,
  createPinnedConnector,
  originKey,
} from './connector.ts';
import { type AddressPolicy, checkUrlOffline, createAddressPolicy } from './destination.ts';
import { DeadlineExceededError, DnsTimeoutError } from './errors.ts';
import { decodeStoredBody, Exchange } from './exchange.ts';
import { createOriginGate, type OriginGate } from './origin-gate.ts';
import { type Resolver, systemResolver } from './resolve.ts';
import { parseRetryAfter } from './retry-after.ts';

export { checkDestination } from './check-destination.ts';
export { RESPONSE_CLASSES } from './classify.ts';
export type { AttemptOutcome, Resolver, ResponseClass };

/** The request was attempted: the receiver answered, or it ended in an error, sent or not. */
export interface SendAttempt {
  kind: 'attempted';
  outcome: AttemptOutcome;
  statusCode: number | null;
  responseClass: ResponseClass;
  /** At most `storedResponseBytes` of the body, UTF-8 lossy. */
  responseBody: string;
  /** From the moment the request was let through to its origin (its deadline's start) to its end. */
  durationMs: number;
  /** Retry-After in seconds, on 429/502/503/504 only. */
  retryAfterSeconds: number | null;
  /** Whether the request may have reached the receiver. */
  requestSent: boolean;
  /** When no status arrived: the underlying error code (e.g. CERT_HAS_EXPIRED), if any. */
  errorCode: string | null;
  /** How long it waited for a free place at its origin before its deadline started. */
  queuedMs: number;
}

/**
 * The request was never started: its `startBy` passed while it waited for a free place at its
 * origin (herald's own congestion). Nothing was sent, no connection was asked for, and it says
 * nothing about the receiver: it is no outcome of any kind, and must not be recorded as one.
 */
export interface SendNotStarted {
  kind: 'not_started';
  requestSent: false;
  queuedMs: number;
  /** Its `stillWanted` said no when its place came: the caller withdrew it, not the clock. */
  withdrawn: boolean;
}

export type SendResult = SendAttempt | SendNotStarted;

export interface OutboundRequest {
  url: string;
  headers: Record<string, string>;
  /**
   * Headers made when the request leaves, once it has its place at its origin, and sent over
   * `headers`: a signature's timestamp then says when the request was sent, not when it began to
   * wait (for as long as its lease allows) behind other requests to the same origin.
   */
  headersAtSend?: (() => Record<string, string>) | undefined;
  /**
   * Asked once the request has its place at its origin, right before it leaves: false withdraws
   * it, unsent (`not_started`, `withdrawn`) — what it was made from has changed while it waited.
   */
  stillWanted?: (() => boolean) | undefined;
  body: string | Buffer;
}

/**
 * A request that may start no later than `startBy` (on the steady clock of domain/steady-clock.ts):
 * its whole deadline must fit before a limit.
 */
export interface OutboundRequestBy extends OutboundRequest {
  startBy: Date;
}

export interface SenderOptions {
  /** CIDRs destinations may resolve to despite the private-range guard. */
  allowPrivateNetworks: readonly string[];
  /** ONE deadline for DNS + connect + TLS + response headers + body. */
  timeoutMs: number;
  /** Read at most this much of a response body (default 64 KiB); the status still decides. */
  maxResponseBytes?: number;
  /** Keep this much of it in the result (default 4096). */
  storedResponseBytes?: number;
  /** Extra trusted CA certificates (PEM), added to Node's default trust. */
  extraCaPem?: string | undefined;
  resolve?: Resolver;
  userAgent?: string;
  /**
   * Keep-alive connections per receiver origin (default 8). Many endpoints may share one origin
   * (one receiving service behind many URLs): this bounds what herald opens against it. Requests
   * beyond it wait in herald's gate (origin-gate.ts), FIFO, with their deadlines not yet running.
   */
  connectionsPerOrigin?: number;
}

export interface Sender {
  /**
   * Sends once a place at the request's origin is free, and only if that happens by `startBy`;
   * otherwise it comes back `not_started`, unsent. Rejects only with what `headersAtSend` throws.
   */
  send(req: OutboundRequestBy): Promise<SendResult>;
  /** With no `startBy` the request waits for its origin as long as it takes: it is always attempted. */
  send(req: OutboundRequest & { startBy?: undefined }): Promise<SendAttempt>;
  /**
   * From now on no request with a `startBy` starts: those waiting for their origin come back
   * `not_started` at once, as do later ones (the worker is stopping). Those under way finish.
   */
  stopStarting(): void;
  /** Undoes stopStarting (a worker started again). */
  resumeStarting(): void;
  /** Waits for in-flight attempts, then closes every connection. */
  close(): Promise<void>;
}

const DEFAULT_CONNECTIONS_PER_ORIGIN = 8;
const MAX_HEADER_BYTES = 16 * 1024;

interface Settings {
  agent: Agent;
  gate: OriginGate;
  underway: ConnectionsUnderway;
  policy: AddressPolicy;
  /** Each URL's route (routeOf), oldest dropped first beyond MAX_ROUTES. */
  routes: Map<string, Route>;
  timeoutMs: number;
  maxResponseBytes: number;
  storedResponseBytes: number;
  userAgent: string;
}

function positiveInteger(name: string, value: number): number {
  if (!Number.isSafeInteger(value) || value <= 0) {
    throw new RangeError(`sender option ${name} must be a positive integer, got ${value}`);
  }
  return value;
}

/** Validates every option now, so a bad configuration fails at start-up, not at a delivery. */
export function createSender(opts: SenderOptions): Sender {
  const policy = createAddressPolicy(opts.allowPrivateNetworks);
  const timeoutMs = positiveInteger('timeoutMs', opts.timeoutMs);
  const connectionsPerOrigin = positiveInteger(
    'connectionsPerOrigin',
    opts.connectionsPerOrigin ?? DEFAULT_CONNECTIONS_PER_ORIGIN,
  );
  const underway = createConnectionsUnderway();
  const settings: Settings = {
    // One Agent per Sender: keep-alive connections are reused across attempts, at most
    // connectionsPerOrigin per receiver. undici follows no redirects unless told to.
    agent: new Agent({
      connections: connectionsPerOrigin,
      maxHeaderSize: MAX_HEADER_BYTES,
      connect: createPinnedConnector({
        policy,
        resolve: opts.resolve ?? systemResolver,
        underway,
        timeoutMs,
        extraCaPem: opts.extraCaPem,
      }),
    }),
    // As many requests of one origin inside undici as it has connections to it: none waits in
    // undici's pool queue, where its deadline would run although it cannot be sent.
    gate: createOriginGate(connectionsPerOrigin),
    underway,
    policy,
    routes: new Map(),
    timeoutMs,
    maxResponseBytes: positiveInteger('maxResponseBytes', opts.maxResponseBytes ?? 64 * 1024),
    storedResponseBytes: positiveInteger('storedResponseBytes', opts.storedResponseBytes ?? 4096),
    userAgent: opts.userAgent ?? 'herald-webhooks/0.1',
  };
  function send(req: OutboundRequestBy): Promise<SendResult>;
  function send(req: OutboundRequest & { startBy?: undefined }): Promise<SendAttempt>;
  function send(req: OutboundRequest & { startBy?: Date | undefined }): Promise<SendResult> {
    return sendOnce(settings, req);
  }
  return {
    send,
    stopStarting() {
      settings.gate.closeDoors();
    },
    resumeStarting() {
      settings.gate.openDoors();
    },
    async close() {
      // As undici's close() waits for its queued requests, this waits for those at the gate.
      await settings.gate.idle();
      await settings.agent.close();
    },
  };
}

/** Where a URL sends an attempt, or why nothing may be sent to it. */
type Route =
  | {
      ok: true;
      origin: string;
      hostname: string;
      /** The origin as the connector names it (ConnectionsUnderway), its port spelled out. */
      connectsTo: string;
      path: string;
    }
  | { ok: false; responseClass: 'invalid_url' | 'destination_forbidden' };

/** URLs whose route a sender remembers: the endpoints in use, not every URL ever seen. */
const MAX_ROUTES = 10_000;

/**
 * The checks of a URL that need no network (checkUrlOffline) worked out once per URL: their
 * verdict depends on nothing else, so every attempt still gets it. The addresses a host name
 * resolves to are judged at every new connection (connector.ts).
 */
function routeOf(settings: Settings, raw: string): Route {
  const known = settings.routes.get(raw);
  if (known !== undefined) return known;
  const verdict = checkUrlOffline(raw, settings.policy);
  const route: Route = verdict.ok
    ? {
        ok: true,
        origin: verdict.url.origin,
        hostname: verdict.url.hostname,
        connectsTo: originKey(verdict.url.protocol, verdict.url.hostname, verdict.url.port),
        path: verdict.url.pathname + verdict.url.search,
      }
    : { ok: false, responseClass: verdict.forbidden ? 'destination_forbidden' : 'invalid_url' };
  if (settings.routes.size >= MAX_ROUTES) settings.routes.delete(settings.routes.keys().next().value!);
  settings.routes.set(raw, route);
  return route;
}

function hasHeader(headers: Record<string, string>, name: string): boolean {
  return Object.keys(headers).some((key) => key.toLowerCase() === name);
}

async function sendOnce(
  settings: Settings,
  req: OutboundRequest & { startBy?: Date | undefined },
): Promise<SendResult> {
  let startedAt = performance.now();
  let queuedMs = 0;
  const elapsedMs = () => Math.round(performance.now() - startedAt);
  /** A known failure with nothing sent: the request itself, or the way to its receiver, is bad. */
  const unsentFailure = (responseClass: ResponseClass): SendAttempt => ({
    kind: 'attempted',
    outcome: 'failure',
    statusCode: null,
    responseClass,
    responseBody: '',
    durationMs: elapsedMs(),
    retryAfterSeconds: null,
    requestSent: false,
    errorCode: null,
    queuedMs,
  });

  const route = routeOf(settings, req.url);
  if (!route.ok) return unsentFailure(route.responseClass);
  // The Host header must name the host we resolved and verified; undici would send a caller's.
  if (hasHeader(req.headers, 'host')) return unsentFailure('invalid_request');

  // Wait for a place at the origin; the deadline starts only once the request is let through.
  const entry = await settings.gate.enter(route.origin, req.startBy);
  queuedMs = entry.waitedMs;
  if (!entry.entered) return { kind: 'not_started', requestSent: false, queuedMs, withdrawn: false };
  if (req.stillWanted?.() === false) {
    entry.leave();
    return { kind: 'not_started', requestSent: false, queuedMs, withdrawn: true };
  }
  let atSend: Record<string, string> | undefined;
  try {
    atSend = req.headersAtSend?.();
  } catch (error) {
    entry.leave();
    throw error;
  }
  if (atSend !== undefined && hasHeader(atSend, 'host')) {
    entry.leave();
    return unsentFailure('invalid_request');
  }
  // One copy per request: its headers, those made as it leaves over them, and herald's user agent
  // unless the request names its own.
  const headers = { ...req.headers, ...atSend };
  if (!hasHeader(headers, 'user-agent')) headers['user-agent'] = settings.userAgent;
  startedAt = performance.now();
  const exchange = new Exchange(
    settings.maxResponseBytes,
    settings.storedResponseBytes,
    startedAt + settings.timeoutMs,
  );
  // The place is given back once undici is done with the request, which may be after the deadline
  // ended the attempt (a connection still being made runs on until it is made, or fails).
  void exchange.finished.then(entry.leave);
  const timer = setTimeout(
    () =>
      exchange.abort(
        // A request that left had its connection: whatever is looked up now is not its trouble.
        !exchange.requestSent && settings.underway.onlyLookingUp(route.connectsTo)
          ? new DnsTimeoutError(`${route.hostname} was still being looked up when the deadline passed`)
          : new DeadlineExceededError('attempt deadline passed'),
      ),
    settings.timeoutMs,
  );
  try {
    settings.agent.dispatch(
      {
        origin: route.origin,
        path: route.path,
        method: 'POST',
        headers,
        body: req.body,
      },
      exchange,
    );
    const response = await exchange.response;
    const { outcome, responseClass } = classifyStatus(response.statusCode);
    return {
      kind: 'attempted',
      outcome,
      statusCode: response.statusCode,
      responseClass,
      responseBody: decodeStoredBody(response.body),
      durationMs: elapsedMs(),
      retryAfterSeconds: takesRetryAfter(response.statusCode)
        ? parseRetryAfter(response.headers['retry-after'], Date.now())
        : null,
      requestSent: true,
      errorCode: null,
      queuedMs,
    };
  } catch (err) {
    const { outcome, responseClass } = classifyError(err, exchange.requestSent);
    return {
      ...unsentFailure(responseClass),
      outcome,
      requestSent: exchange.requestSent,
      errorCode: errorCodeOf(err),
    };
  } finally {
    clearTimeout(timer);
  }
}
