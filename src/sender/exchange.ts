// One attempt's request and response, as an undici dispatch handler: it tells whether the request
// may have reached the receiver, takes the status, and keeps a bounded prefix of the body — with
// no response stream, no abort signal and no interceptor per request, whose garbage was most of
// what a worker with hundreds of requests in flight allocated.
//
// "Sent" (invariant 6): a request counts as sent from the moment undici hands it to an
// established connection — onRequestStart, returning without an abort. With HTTP/1.1 undici calls
// it on a connected (and, for https, fully handshaken) socket and writes the request bytes right
// after. Everything before it — DNS, TCP connect, TLS handshake — cannot deliver a single byte of
// the request, so an error there is a known failure. (Waiting for a free connection happens before
// the deadline starts, at the sender's origin gate, so undici's pool queue stays empty and a
// request that only waited is never blamed on its receiver; see origin-gate.ts.) Any error after
// it (reset, close, timeout before the status) may follow a request the receiver processed, so it
// is 'unknown', never 'failure'.

import type { Dispatcher } from 'undici';
import { DeadlineExceededError } from './errors.ts';

// undici's IncomingHttpHeaders, which its package index does not export.
type IncomingHeaders = Record<string, string | string[] | undefined>;

export interface ExchangeResponse {
  statusCode: number;
  headers: IncomingHeaders;
  /** At most `keepBytes` of the body: what arrived before its end, its size limit or an error. */
  body: Buffer;
}

/** Aborts a response whose body reached its size limit (never surfaces: the status decides). */
class BodyLimitReached extends Error {}

export class Exchange implements Dispatcher.DispatchHandler {
  /** Whether the request may have reached the receiver (see above). */
  requestSent = false;
  /** Settles once the status and the body (up to its limits) are in, or with the error before the status. */
  readonly response: Promise<ExchangeResponse>;
  /** Settles once undici is done with the request: its connection is free again. */
  readonly finished: Promise<void>;

  readonly #maxBytes: number;
  readonly #keepBytes: number;
  readonly #deadline: number;
  #settle!: (response: ExchangeResponse) => void;
  #fail!: (error: Error) => void;
  #finish!: () => void;
  #controller: Dispatcher.DispatchController | null = null;
  /** Why the attempt was ended before undici started it; it is aborted when it starts. */
  #endedBeforeStart: Error | null = null;
  #status: { statusCode: number; headers: IncomingHeaders } | null = null;
  #kept: Buffer[] = [];
  #keptBytes = 0;
  #readBytes = 0;

  /**
   * Reads at most about `maxBytes` of the body (whole chunks) and keeps its first `keepBytes`.
   * `deadline` (on performance.now()'s clock) is the attempt's end: a request that would start
   * after it is aborted then, even when the timer that ends the attempt has not run yet.
   */
  constructor(maxBytes: number, keepBytes: number, deadline = Number.POSITIVE_INFINITY) {
    this.#maxBytes = maxBytes;
    this.#keepBytes = keepBytes;
    this.#deadline = deadline;
    this.response = new Promise((resolve, reject) => {
      this.#settle = resolve;
      this.#fail = reject;
    });
    this.finished = new Promise((resolve) => {
      this.#finish = resolve;
    });
  }

  /**
   * Ends the attempt (its deadline passed): a request under way is aborted, and one undici has
   * not started yet ends now and is aborted when it starts, before a byte is written. Its
   * connection, if one is being made, runs on until it is made or the connector's own timeout
   * (the same deadline, started at dispatch) ends it; `finished` waits for that.
   */
  abort(reason: Error): void {
    if (this.#controller !== null) {
      this.#controller.abort(reason);
      return;
    }
    this.#endedBeforeStart = reason;
    this.#fail(reason);
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    // A connection made late, its callback run in the same turn of the event loop as a long stall
    // (a slow synchronous task, a pause of the host), comes before the deadline's timer: sent
    // then, the request could leave after the lease meant to cover it has ended.
    if (this.#endedBeforeStart === null && performance.now() >= this.#deadline) {
      this.abort(new DeadlineExceededError('attempt deadline passed before the request started'));
    }
    if (this.#endedBeforeStart !== null) {
      controller.abort(this.#endedBeforeStart);
      return;
    }
    this.#controller = controller;
    this.requestSent = true;
  }

  onResponseStart(
    _controller: Dispatcher.DispatchController,
    statusCode: number,
    headers: IncomingHeaders,
  ): void {
    // 1xx (informational) responses come before the real one.
    if (statusCode >= 200) this.#status = { statusCode, headers };
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    this.#readBytes += chunk.length;
    if (this.#keptBytes < this.#keepBytes) {
      const part = chunk.subarray(0, this.#keepBytes - this.#keptBytes);
      this.#kept.push(part);
      this.#keptBytes += part.length;
    }
    // At the limit the response is torn down, and its connection with it.
    if (this.#readBytes >= this.#maxBytes) controller.abort(new BodyLimitReached());
  }

  onResponseEnd(): void {
    this.#settleWithStatus();
    this.#finish();
  }

  onResponseError(_controller: Dispatcher.DispatchController | null, error: Error): void {
    // Once the status arrived it decides the outcome: an error mid-body (connection lost, the
    // deadline, the size limit) only ends the reading, and what arrived so far is kept.
    if (this.#status !== null) this.#settleWithStatus();
    else this.#fail(error);
    this.#finish();
  }

  #settleWithStatus(): void {
    const status = this.#status;
    if (status === null) {
      this.#fail(new Error('the response ended without a status'));
      return;
    }
    this.#settle({ ...status, body: Buffer.concat(this.#kept) });
  }
}

/**
 * A kept body as stored: UTF-8, lossy — invalid sequences (including a character cut at the byte
 * limit) become U+FFFD. So does NUL, which a PostgreSQL text column refuses.
 */
export function decodeStoredBody(bytes: Buffer): string {
  return bytes.toString('utf8').replaceAll('\u0000', '\uFFFD');
}
