// The bytes of inbound bodies one API process receives and holds at once, bounded. `/ingest`
// takes bodies of up to HERALD_INGEST_MAX_BODY_BYTES from anyone who knows a source's name; each
// is held from its first byte until its answer. Without a bound, enough concurrent senders of
// large bodies (slow ones, within the request deadline) would hold more memory than the process
// has, and stop every tenant's intake and the API with it; with one, past it a sender is answered
// 503 with Retry-After before its body is read, and providers retry.

/** Bodies as large as the limit that may be in flight at once (the budget is this many of them). */
export const MAX_BODIES_IN_FLIGHT = 32;

export interface BodiesInFlight {
  /** Reserves `bytes`; false when that would pass the budget (nothing is reserved then). */
  take(bytes: number): boolean;
  give(bytes: number): void;
}

/** `held` is told the bytes held after every change (a gauge). */
export function createBodiesInFlight(budgetBytes: number, held: (bytes: number) => void): BodiesInFlight {
  let bytesHeld = 0;
  return {
    take(bytes) {
      if (bytesHeld + bytes > budgetBytes) return false;
      bytesHeld += bytes;
      held(bytesHeld);
      return true;
    },
    give(bytes) {
      bytesHeld -= bytes;
      held(bytesHeld);
    },
  };
}
