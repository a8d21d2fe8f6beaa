// A client has a bounded time to send its request whole, headers and body. Without it a sender
// that trickles a body a byte at a time holds its connection, and what it has sent so far (up to
// the body limit: 8 MiB on /ingest, which anyone who knows a source's name may send to), for as
// long as it likes: enough such connections and the process runs out of memory. Node's own
// `requestTimeout` does this too, but fastify turns it off, and Node checks it only every 30 s.

import type { FastifyInstance } from 'fastify';

/** Destroys the connection of a request not received whole `ms` after it began. */
export function requestDeadline(app: FastifyInstance, ms: number): void {
  const deadlines = new WeakMap<object, NodeJS.Timeout>();
  app.addHook('onRequest', async (request, reply) => {
    const deadline = setTimeout(() => request.raw.destroy(), ms);
    deadline.unref();
    deadlines.set(request, deadline);
    reply.raw.once('close', () => clearTimeout(deadline));
  });
  // The body is read (or there was none): what the handler does next is the server's time.
  app.addHook('preValidation', async (request) => {
    clearTimeout(deadlines.get(request));
  });
}
