// What an attempt's ending means for herald: the outcome the worker acts on, and a stable
// class stored with the attempt.

import { errors } from 'undici';
import {
  DeadlineExceededError,
  DestinationForbiddenError,
  DnsFailureError,
  TlsHandshakeError,
} from './errors.ts';

export type AttemptOutcome = 'success' | 'failure' | 'unknown';

/**
 * Every `responseClass` the sender reports. Stable machine-readable names: they are stored in
 * attempt rows and shown to operators. "nothing was sent" classes are known failures.
 */
export const RESPONSE_CLASSES = {
  http_2xx: 'the receiver answered 2xx (success)',
  http_3xx_redirect: 'the receiver answered 3xx; redirects are never followed (failure)',
  http_4xx: 'the receiver answered 4xx other than 410 and 429 (failure)',
  http_410_gone: 'the receiver answered 410 Gone (failure)',
  http_429: 'the receiver answered 429 Too Many Requests; see retryAfterSeconds (failure)',
  http_5xx: 'the receiver answered 5xx; 502/503/504 carry retryAfterSeconds (failure)',
  http_other: 'the receiver answered a status outside 200-599 (failure)',
  invalid_url: 'the URL failed the syntax check; nothing was sent (failure)',
  invalid_request:
    'a header was refused (a Host header, or a value undici rejects); nothing was sent (failure)',
  dns_failure: 'the host name did not resolve; nothing was sent (failure)',
  destination_forbidden:
    'the URL or an address it resolves to is private or reserved; nothing was sent (failure)',
  connect_failed: 'no connection could be made (refused, unreachable, reset); nothing was sent (failure)',
  tls_error:
    'the TLS handshake failed (untrusted, expired or misnamed certificate); nothing was sent (failure)',
  timeout:
    'the deadline (started once a connection to the origin was free) passed: before the request was written (failure) or after, with no status (unknown)',
  connection_lost: 'the connection broke after the request was written, before a status arrived (unknown)',
  response_too_large: 'the response headers exceeded the size limit, so no status was read (unknown)',
  invalid_response: 'the receiver answered something that is not HTTP/1.1 (unknown)',
} as const;

export type ResponseClass = keyof typeof RESPONSE_CLASSES;

export interface Classification {
  outcome: AttemptOutcome;
  responseClass: ResponseClass;
}

export function classifyStatus(statusCode: number): Classification {
  if (statusCode >= 200 && statusCode <= 299) return { outcome: 'success', responseClass: 'http_2xx' };
  const failure = (responseClass: ResponseClass): Classification => ({ outcome: 'failure', responseClass });
  if (statusCode >= 300 && statusCode <= 399) return failure('http_3xx_redirect');
  if (statusCode === 410) return failure('http_410_gone');
  if (statusCode === 429) return failure('http_429');
  if (statusCode >= 400 && statusCode <= 499) return failure('http_4xx');
  if (statusCode >= 500 && statusCode <= 599) return failure('http_5xx');
  return failure('http_other');
}

/** Statuses whose Retry-After herald honours: throttled (429) or unavailable (502/503/504). */
export function takesRetryAfter(statusCode: number): boolean {
  return statusCode === 429 || statusCode === 502 || statusCode === 503 || statusCode === 504;
}

/**
 * An error before any status arrived. `requestSent` (see exchange.ts) decides between
 * a known failure and 'unknown': herald never calls an outcome it cannot know a failure.
 */
export function classifyError(err: unknown, requestSent: boolean): Classification {
  const timedOut = err instanceof DeadlineExceededError;
  if (requestSent) {
    const unknown = (responseClass: ResponseClass): Classification => ({ outcome: 'unknown', responseClass });
    if (timedOut) return unknown('timeout');
    if (err instanceof errors.HeadersOverflowError) return unknown('response_too_large');
    if (err instanceof errors.HTTPParserError) return unknown('invalid_response');
    return unknown('connection_lost');
  }
  const failure = (responseClass: ResponseClass): Classification => ({ outcome: 'failure', responseClass });
  if (timedOut) return failure('timeout');
  if (err instanceof DestinationForbiddenError) return failure('destination_forbidden');
  if (err instanceof DnsFailureError) return failure('dns_failure');
  if (err instanceof TlsHandshakeError) return failure('tls_error');
  if (err instanceof errors.InvalidArgumentError) return failure('invalid_request');
  return failure('connect_failed');
}

/**
 * The most specific code in an error's cause chain (CERT_HAS_EXPIRED, ECONNREFUSED,
 * ENOTFOUND, HPE_INVALID_CONSTANT, …): tells an operator which kind of `tls_error` or
 * `connect_failed` it was. Codes name conditions, never data, so they are safe to store.
 */
export function errorCodeOf(err: unknown): string | null {
  let code: string | null = null;
  // Bounded, because nothing stops a cause chain from being circular.
  for (
    let current = err, depth = 0;
    current instanceof Error && depth < 5;
    current = current.cause, depth++
  ) {
    if ('code' in current && typeof current.code === 'string') code = current.code;
  }
  return code;
}
