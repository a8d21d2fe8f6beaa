// Tells "the request may have reached the receiver" from "it cannot have" (invariant 6).
//
// The rule: a request counts as sent from the moment undici hands it to an established
// connection — onRequestStart, returning without an abort. With HTTP/1.1 undici calls it on a
// connected (and, for https, fully handshaken) socket and writes the request bytes right
// after. Everything before it — DNS, TCP connect, TLS handshake — cannot deliver a single byte
// of the request, so an error there is a known failure. (Waiting for a free connection happens
// before the deadline starts, at the sender's origin gate, so undici's pool queue stays empty and
// a request that only waited is never blamed on its receiver; see origin-gate.ts.) Any
// error after it (reset, close, timeout before the status) may follow a request the receiver
// processed, so it is 'unknown', never 'failure'.

import type { Dispatcher } from 'undici';

// undici's IncomingHttpHeaders, which its package index does not export.
type IncomingHeaders = Record<string, string | string[] | undefined>;

export interface SendTracker {
  requestSent: boolean;
}

/** Forwards the callbacks undici's request() handler implements, watching the start. */
class StartWatchingHandler implements Dispatcher.DispatchHandler {
  readonly #inner: Dispatcher.DispatchHandler;
  readonly #tracker: SendTracker;

  constructor(inner: Dispatcher.DispatchHandler, tracker: SendTracker) {
    this.#inner = inner;
    this.#tracker = tracker;
  }

  onRequestStart(controller: Dispatcher.DispatchController, context: unknown): void {
    this.#inner.onRequestStart?.(controller, context);
    // The inner handler aborts here when the deadline passed before the connection was ready;
    // undici then writes nothing.
    if (!controller.aborted) this.#tracker.requestSent = true;
  }

  onResponseStart(
    controller: Dispatcher.DispatchController,
    statusCode: number,
    headers: IncomingHeaders,
    statusMessage?: string,
  ): void {
    this.#inner.onResponseStart?.(controller, statusCode, headers, statusMessage);
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    this.#inner.onResponseData?.(controller, chunk);
  }

  onResponseEnd(controller: Dispatcher.DispatchController, trailers: IncomingHeaders): void {
    this.#inner.onResponseEnd?.(controller, trailers);
  }

  onResponseError(controller: Dispatcher.DispatchController, error: Error): void {
    this.#inner.onResponseError?.(controller, error);
  }
}

/**
 * An interceptor for one attempt, recording into `tracker` whether its request went out. It
 * wraps undici's own request() handler rather than replacing it, so request()'s abort signal
 * keeps its power to take a request that still waits for a connection out of the queue.
 */
export function trackRequestStart(tracker: SendTracker): Dispatcher.DispatcherComposeInterceptor {
  return (dispatch) => (opts, handler) => dispatch(opts, new StartWatchingHandler(handler, tracker));
}
