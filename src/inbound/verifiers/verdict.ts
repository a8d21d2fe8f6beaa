// Building verdicts. The status of a rejection follows from its code, so no scheme can pair a
// code with the wrong status.

import { errorCodeOf } from '../../sender/classify.ts';
import type { RejectionCode, Verdict } from './types.ts';

const STATUS_OF = {
  // The request is authentic (or its signature could not even be located without the id) but
  // cannot be deduplicated: a client error, and retrying it unchanged will not help.
  missing_delivery_id: 400,
  bad_request: 400,
  malformed: 401,
  bad_signature: 401,
  stale_timestamp: 401,
  missing_signature: 401,
  // 503 makes the provider retry later, which is right when our key fetch failed, not their request.
  verification_unavailable: 503,
} as const satisfies Record<RejectionCode, 400 | 401 | 503>;

type Rejection = Extract<Verdict, { ok: false }>;

export function reject(code: RejectionCode, reason: string): Rejection {
  return { ok: false, status: STATUS_OF[code], code, reason };
}

/**
 * A key or certificate fetch failed: the sender is told only that (the error could describe the
 * network herald sees), the operator's log gets the error.
 */
export function unavailable(reason: string, error: unknown): Rejection {
  // With the condition's code from deep in the chain: "TLS handshake failed" alone does not say
  // that the certificate is self-signed (DEPTH_ZERO_SELF_SIGNED_CERT) or expired.
  const condition = errorCodeOf(error);
  const cause = `${(error as Error).message}${condition ? ` (${condition})` : ''}`;
  return { ...reject('verification_unavailable', reason), cause };
}

// Visible ASCII only: the id becomes part of a unique key and of log lines, where whitespace,
// control characters or megabytes of text would do harm. Every provider here fits easily.
const DELIVERY_ID = /^[\x21-\x7e]{1,255}$/;

/** The verdict for a request whose signature has been verified. */
export function accept(deliveryId: unknown, payload: unknown, idSource: string): Verdict {
  if (deliveryId === undefined || deliveryId === null || deliveryId === '') {
    return reject('missing_delivery_id', `no delivery id in ${idSource}`);
  }
  if (typeof deliveryId !== 'string' || !DELIVERY_ID.test(deliveryId)) {
    return reject('missing_delivery_id', `${idSource} is not 1–255 visible ASCII characters`);
  }
  return { ok: true, deliveryId, payload };
}

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

/**
 * Parsed only after the signature has been checked on the raw bytes. Invalid UTF-8 is "not JSON"
 * rather than replaced with U+FFFD, so the payload never differs from what was signed.
 */
export function parseJsonBody(rawBody: Buffer, reviver?: Parameters<typeof JSON.parse>[1]): unknown {
  try {
    return JSON.parse(strictUtf8.decode(rawBody), reviver);
  } catch {
    return null;
  }
}

/** `value[key]` when value is a plain JSON object, else undefined. */
export function field(value: unknown, key: string): unknown {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  return Object.hasOwn(value, key) ? (value as Record<string, unknown>)[key] : undefined;
}
