// The one catalogue of errors herald reports. Every error that leaves the process (HTTP
// response, CLI exit) carries one of these codes; the HTTP status lives here and nowhere else.
// Response bodies follow Svix's shape: { code, detail }.

export const ERRORS = {
  validation: { status: 422, code: 'validation' },
  bad_request: { status: 400, code: 'bad_request' },
  unauthorized: { status: 401, code: 'authentication_failed' },
  forbidden: { status: 403, code: 'insufficient_access' },
  not_found: { status: 404, code: 'not_found' },
  method_not_allowed: { status: 405, code: 'method_not_allowed' },
  conflict: { status: 409, code: 'conflict' },
  // As Svix answers a rotation past its limit of old secrets still signing.
  limit_reached: { status: 400, code: 'limit_reached' },
  idempotency_conflict: { status: 409, code: 'idempotency_conflict' },
  payload_expired: { status: 409, code: 'payload_expired' },
  payload_too_large: { status: 413, code: 'payload_too_large' },
  unsupported_media_type: { status: 415, code: 'unsupported_media_type' },
  rate_limited: { status: 429, code: 'rate_limited' },
  store_unavailable: { status: 503, code: 'store_unavailable' },
  // A secret sealed under a master key this process does not hold (a rotation rolling out).
  secret_unavailable: { status: 503, code: 'secret_unavailable' },
  // More writes wait for the database than herald holds: refused at once, to be retried.
  overloaded: { status: 503, code: 'overloaded' },
  // Inbound verification (POST /ingest/{source}): nothing is stored for any of these.
  missing_delivery_id: { status: 400, code: 'missing_delivery_id' },
  missing_business_key: { status: 400, code: 'missing_business_key' },
  malformed: { status: 401, code: 'malformed_signature' },
  bad_signature: { status: 401, code: 'bad_signature' },
  stale_timestamp: { status: 401, code: 'stale_timestamp' },
  missing_signature: { status: 401, code: 'missing_signature' },
  verification_unavailable: { status: 503, code: 'verification_unavailable' },
  internal: { status: 500, code: 'internal_error' },
} as const;

export type ErrorKind = keyof typeof ERRORS;

/** One field-level complaint, shaped like Svix's HTTPValidationError items (`loc` of strings). */
export interface ValidationIssue {
  loc: string[];
  msg: string;
  type: string;
}

export class HeraldError extends Error {
  readonly kind: ErrorKind;
  readonly status: number;
  readonly code: string;
  readonly issues: ValidationIssue[] | undefined;
  /** When the caller may try again (the Retry-After header), where herald knows it. */
  readonly retryAfterSeconds: number | undefined;

  constructor(
    kind: ErrorKind,
    detail: string,
    issues?: ValidationIssue[],
    options: { retryAfterSeconds?: number } = {},
  ) {
    super(detail);
    this.name = 'HeraldError';
    this.kind = kind;
    this.status = ERRORS[kind].status;
    this.code = ERRORS[kind].code;
    this.issues = issues;
    this.retryAfterSeconds = options.retryAfterSeconds;
  }

  /** The response body. Validation errors use Svix's `detail: [{loc, msg, type}]` form. */
  toBody(): { code: string; detail: string | ValidationIssue[] } {
    return { code: this.code, detail: this.issues ?? this.message };
  }
}

export const notFound = (what: string): HeraldError => new HeraldError('not_found', `${what} not found`);

export const invalidField = (
  path: (string | number)[],
  msg: string,
  where: 'body' | 'query' = 'body',
): HeraldError =>
  new HeraldError('validation', `${path.join('.')}: ${msg}`, [
    { loc: [where, ...path.map(String)], msg, type: 'value_error' },
  ]);

/** The idempotency-key header of any POST (a publish's is kept on its message, unique per app). */
export const MAX_IDEMPOTENCY_KEY_LENGTH = 256;

export const invalidIdempotencyKey = (msg: string): HeraldError =>
  new HeraldError('validation', `idempotency-key: ${msg}`, [
    { loc: ['header', 'idempotency-key'], msg, type: 'value_error' },
  ]);

/** Refuses an idempotency-key too long to keep (an index entry has its limits), naming the header. */
export function assertIdempotencyKeyLength(key: string): void {
  if (key.length > MAX_IDEMPOTENCY_KEY_LENGTH)
    throw invalidIdempotencyKey(`at most ${MAX_IDEMPOTENCY_KEY_LENGTH} characters`);
}

/** A configuration value that cannot be used; start-up stops with this message. */
export class ConfigError extends Error {
  /** The setting at fault (`HERALD_LEASE_SECONDS`), for a program that starts herald to report. */
  readonly variable: string;
  readonly code = 'configuration';
  constructor(variable: string, expected: string, got?: string) {
    super(`${variable}: expected ${expected}${got === undefined ? '' : `, got ${JSON.stringify(got)}`}`);
    this.name = 'ConfigError';
    this.variable = variable;
  }
}
