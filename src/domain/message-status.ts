// Svix's integer status codes for deliveries and attempts, derived from herald's states.

export type DeliveryState = 'pending' | 'sending' | 'succeeded' | 'failed';
export type AttemptOutcome = 'success' | 'failure' | 'unknown';

/** Svix MessageStatus: Success = 0, Pending = 1, Fail = 2, Sending = 3. */
const DELIVERY_STATUS: Record<DeliveryState, { status: 0 | 1 | 2 | 3; statusText: string }> = {
  succeeded: { status: 0, statusText: 'success' },
  pending: { status: 1, statusText: 'pending' },
  failed: { status: 2, statusText: 'fail' },
  sending: { status: 3, statusText: 'sending' },
};

export const deliveryStatus = (state: DeliveryState) => DELIVERY_STATUS[state];

const STATE_OF_STATUS = new Map(
  Object.entries(DELIVERY_STATUS).map(([state, s]) => [s.status as number, state as DeliveryState]),
);

/**
 * The delivery state a Svix MessageStatus filter (0 to 4) names: `canceled` for Canceled (4, in
 * the Svix SDKs' enum though not the OSS contract), which no herald delivery ever is — a filter
 * on it matches nothing.
 */
export const deliveryStateOf = (status: number): DeliveryState | 'canceled' =>
  STATE_OF_STATUS.get(status) ?? 'canceled';

/**
 * An attempt still running is Sending; an `unknown` one is reported as Fail to Svix clients
 * (whose enum has no "unknown"), and herald's own `outcome` field beside it says `unknown`.
 */
export function attemptStatus(outcome: AttemptOutcome | null) {
  if (outcome === null) return DELIVERY_STATUS.sending;
  return outcome === 'success' ? DELIVERY_STATUS.succeeded : DELIVERY_STATUS.failed;
}
