// What a worker has heard of changes to endpoints (migration 0045: a new URL, headers, disabled or
// enabled, a secret rotated, deleted), so that a request claimed before a change does not leave
// after it, made from what the endpoint no longer is. Kept on the steady clock for as long as a
// lease lasts: a claim older than that holds no lease any more.

import { steadyNow } from '../domain/steady-clock.ts';

/** The channel the database announces endpoint changes on, with the endpoint's id. */
export const ENDPOINT_CHANGED_CHANNEL = 'herald_endpoint_changed';

export interface EndpointChanges {
  /** The database announced a change to this endpoint. */
  heard(endpointId: string): void;
  /**
   * Whether a change to the endpoint was heard at or after `since` (steady clock): a claim sent
   * then may have read the endpoint before the change committed.
   */
  changedSince(endpointId: string, since: number): boolean;
  /** Forgets what no lease can still be affected by. */
  forgetOld(): void;
}

export function createEndpointChanges(leaseMs: number): EndpointChanges {
  const lastHeard = new Map<string, number>();
  /**
   * When the listening connection came back after a loss (an empty payload: pg-listener.ts):
   * whatever changed while it was away went unheard, so every endpoint counts as changed then.
   */
  let allHeardAt = Number.NEGATIVE_INFINITY;
  return {
    heard(endpointId) {
      if (endpointId === '') {
        allHeardAt = steadyNow();
        return;
      }
      // Moved to the end, so that the map stays in the order changes were heard.
      lastHeard.delete(endpointId);
      lastHeard.set(endpointId, steadyNow());
    },
    changedSince(endpointId, since) {
      return Math.max(allHeardAt, lastHeard.get(endpointId) ?? Number.NEGATIVE_INFINITY) >= since;
    },
    forgetOld() {
      const before = steadyNow() - leaseMs;
      for (const [endpointId, at] of lastHeard) {
        if (at >= before) return;
        lastHeard.delete(endpointId);
      }
    },
  };
}
