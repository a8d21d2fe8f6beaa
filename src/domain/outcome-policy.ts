// What an attempt's result means for its delivery, beyond the retry schedule. Pure.
//
// Defaults (per endpoint, see the endpoint's `idempotent` and `clientErrorPolicy`):
// - unknown (the request may have been applied): retried when the endpoint is idempotent (the
//   Standard Webhooks contract: receivers deduplicate on webhook-id), otherwise parked as failed
//   for review — retrying could apply the effect twice.
// - 4xx validation answers (400, 404, 405, 409, 413, 415, 422): retried by default, as Svix does;
//   with 'dead-letter' the delivery fails at once, since the same request cannot succeed.
// - 401/403: retried, and the endpoint is flagged: its credentials need attention.
// - 410: the endpoint is disabled. 429, 5xx and network failures back off on the schedule.
// - an error of the sending host's own (its resolver, its network) is retried but not held
//   against the endpoint.

export interface AttemptFacts {
  outcome: 'success' | 'failure' | 'unknown';
  statusCode: number | null;
  /** When no status arrived: the error's code (ECONNREFUSED, EAI_AGAIN, …). */
  errorCode?: string | null;
}

export interface EndpointContract {
  idempotent: boolean;
  clientErrorPolicy: 'retry' | 'dead-letter';
}

export interface Verdict {
  /** Stop this cycle now, whatever budget is left. */
  stopCycle: boolean;
  disableEndpoint: 'gone' | null;
  credentialsRejected: boolean;
  /**
   * Whether the failure is the endpoint's, and counts towards auto-disable: not when the error
   * is the sending host's — its resolver unreachable, no route out, no free port or file
   * descriptor — which would otherwise disable every endpoint with work during a blip of
   * herald's own network. Retried on the schedule all the same.
   */
  endpointAtFault: boolean;
}

/** Errors that say the sending host is in trouble, not the receiver. */
const HOST_SIDE_ERRORS = new Set([
  'EAI_AGAIN', // the resolver did not answer (getaddrinfo's "try again")
  'ENETUNREACH', // no route from this host to any such network
  'ENETDOWN',
  'EADDRNOTAVAIL', // no local address or port left
  'EMFILE', // out of file descriptors
  'ENFILE',
  'ENOBUFS',
  'ENOMEM',
]);

const UNRETRIABLE_CLIENT_ERRORS = new Set([400, 404, 405, 409, 413, 415, 422]);

export function judgeAttempt(facts: AttemptFacts, contract: EndpointContract): Verdict {
  const status = facts.statusCode;
  return {
    stopCycle:
      (facts.outcome === 'unknown' && !contract.idempotent) ||
      (facts.outcome === 'failure' &&
        contract.clientErrorPolicy === 'dead-letter' &&
        status !== null &&
        UNRETRIABLE_CLIENT_ERRORS.has(status)),
    disableEndpoint: status === 410 ? 'gone' : null,
    credentialsRejected: status === 401 || status === 403,
    endpointAtFault: !HOST_SIDE_ERRORS.has(facts.errorCode ?? ''),
  };
}
