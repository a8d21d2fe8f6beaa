// The contract between the ingest route and the verifiers: raw request in, verdict out. A verifier
// decides authenticity from the bytes as received and never throws for anything a caller sends,
// so the route can map every outcome to a status without a try/catch per scheme.

import type { SnsCertificates } from './aws-sns.ts';

export interface InboundRequest {
  method: string;
  /** Header names lower-cased, as node:http gives them; a repeated header joined by ", ". */
  headers: Readonly<Record<string, string | undefined>>;
  /** The body exactly as received: every signature is computed over these bytes. */
  rawBody: Buffer;
}

export type RejectionCode =
  | 'missing_delivery_id'
  /** Authentic, but its body lacks what its kind needs (a Slack handshake without its challenge). */
  | 'bad_request'
  | 'malformed'
  | 'bad_signature'
  | 'stale_timestamp'
  | 'missing_signature'
  /** Keys or certificates could not be fetched: nobody can tell yet whether the request is authentic. */
  | 'verification_unavailable';

export type Verdict =
  | {
      ok: true;
      deliveryId: string;
      /** The body parsed as JSON after verification, or null when it is not JSON. */
      payload: unknown;
    }
  | {
      ok: false;
      status: 400 | 401 | 503;
      code: RejectionCode;
      /** Told to the sender. */
      reason: string;
      /** Why herald could not verify (a fetch's error): for the operator's log, never the sender. */
      cause?: string;
    };

export interface Verifier {
  /** Resolves to a verdict for any request; `now` is injected so tolerances are testable. */
  verify(request: InboundRequest, now: Date): Promise<Verdict>;
}

/** A GET that returns the body as text and rejects on anything but a bounded 200 response. */
export type FetchText = (url: string) => Promise<string>;

export interface VerifierDeps {
  /**
   * Used for JWKS (gcp-pubsub) and signing certificates (aws-sns) only. It must be SSRF-safe
   * (see createSafeFetchText): the URLs come from configuration or, for SNS, from the request.
   */
  fetchText?: FetchText;
  /**
   * SNS signing certificates kept for every verifier built with them (the ingestor's); without
   * them an aws-sns verifier keeps its own, fetched with `fetchText`.
   */
  snsCertificates?: SnsCertificates;
}
