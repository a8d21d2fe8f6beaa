// Replay windows. A signed timestamp limits how long a captured request can be replayed; the
// window is checked both ways, so a sender with a fast clock cannot mint long-lived requests.

/** Five minutes: the window Standard Webhooks, Stripe and Slack each document. */
export const DEFAULT_TOLERANCE_SECONDS = 300;

const UNIX_SECONDS = /^\d{1,12}$/;

/** Whole seconds since the epoch, or null; "1.5", "-3", "1e9" and " 12" are not timestamps. */
export function parseUnixSeconds(text: string): number | null {
  return UNIX_SECONDS.test(text) ? Number(text) : null;
}

export function isWithinTolerance(timestampSeconds: number, now: Date, toleranceSeconds: number): boolean {
  return Math.abs(now.getTime() / 1000 - timestampSeconds) <= toleranceSeconds;
}
