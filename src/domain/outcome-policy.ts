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

export interface AttemptFacts {
  outcome: 'success' | 'failure' | 'unknown';
  statusCode: number | null;
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
}

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
  };
}
