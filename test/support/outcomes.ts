// The result a worker would record for a claimed delivery, for tests that write outcomes below the
// worker: a 204 for a success, a 500 for a failure (retried at `retryAt`, or final when null).

import type { AttemptResult, ClaimedDelivery } from '../../src/db/deliveries.ts';
import type { RetryPolicy } from '../../src/domain/retry-policy.ts';

/** A cycle of `attempts` attempts with no wait between them: what lease recovery retries at once. */
export const noWaits = (attempts: number): RetryPolicy => ({
  schedule: Array<number>(attempts - 1).fill(0),
  jitter: 0,
});

export const attemptResult = (
  claim: Pick<ClaimedDelivery, 'deliveryId' | 'leaseToken'>,
  outcome: 'success' | 'failure' = 'success',
  retryAt: Date | null = null,
): AttemptResult => ({
  deliveryId: claim.deliveryId,
  leaseToken: claim.leaseToken,
  outcome,
  statusCode: outcome === 'success' ? 204 : 500,
  responseClass: outcome === 'success' ? 'http_2xx' : 'http_5xx',
  responseBody: '',
  durationMs: 1,
  nextAttemptAt: retryAt,
  disableEndpoint: null,
  credentialsRejected: false,
  endpointAtFault: true,
});
