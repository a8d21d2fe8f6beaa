// Errors the sender raises inside undici's connect path (socket lookup, TLS handshake) or
// around a request. They carry no secrets: only a host name, never a URL path or a body.
// Classification (classify.ts) recognises them by class, not by message.

/** The host resolved to at least one address the policy refuses; no connection was made. */
export class DestinationForbiddenError extends Error {
  override readonly name = 'DestinationForbiddenError';
}

/** The host name did not resolve (NXDOMAIN, no usable answer, resolver error). */
export class DnsFailureError extends Error {
  override readonly name: string = 'DnsFailureError';
}

/**
 * The attempt's deadline passed while its host name was still being looked up: reported as the
 * resolver's "try again" (EAI_AGAIN), a failure of the sending host's name resolution.
 */
export class DnsTimeoutError extends DnsFailureError {
  override readonly name = 'DnsTimeoutError';
  readonly code = 'EAI_AGAIN';
}

/** The TCP connection was up but the TLS handshake failed (certificate or protocol). */
export class TlsHandshakeError extends Error {
  override readonly name = 'TlsHandshakeError';
}

/** The attempt's single deadline (DNS + connect + TLS + headers + body) passed. */
export class DeadlineExceededError extends Error {
  override readonly name = 'DeadlineExceededError';
}
