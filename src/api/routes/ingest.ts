// POST /ingest/{source id or uid}: public, authenticated only by the source's signature scheme.
// The body stays raw bytes (every signature is over them); the size limit is enforced before
// buffering. 204 only after the intake claim, the message and the observation are committed; a
// store failure is 503, so the sender delivers again later.

import type { FastifyPluginAsync, FastifyRequest } from 'fastify';
import type { SourceRow } from '../../db/sources.ts';
import type { Core } from '../../engine/core.ts';
import { HeraldError, notFound } from '../../errors.ts';
import { createBodiesInFlight, MAX_BODIES_IN_FLIGHT } from '../../inbound/bodies-in-flight.ts';
import type { Ingestor, IngestResult } from '../../inbound/ingest.ts';

type Params = { source: string };

/** The content type each request was sent with, before the plugin's hook replaced it. */
const sentContentType = new WeakMap<FastifyRequest, string | undefined>();
/** The source each POST names, found before its body was read. */
const sourceOf = new WeakMap<FastifyRequest, SourceRow>();

/** Source ids and uids: herald ids, or uids of letters, digits, '-', '_' and '.'. */
const SOURCE_NAME = /^[A-Za-z0-9._-]{1,256}$/;

export const ingestRoutes =
  (core: Core, ingestor: Ingestor): FastifyPluginAsync =>
  async (app) => {
    const maxBody = core.config.ingestMaxBodyBytes;
    const bodies = createBodiesInFlight(MAX_BODIES_IN_FLIGHT * maxBody, core.metrics.ingestBodiesHeld);
    // Encapsulated: inside this plugin every content type arrives as the bytes that were sent,
    // a malformed one too (`json`, or none at all): the signature is over the body, and a
    // sender's odd header must not turn a genuine delivery into a 415 it will not send again.
    // The verifiers see the header as it was sent.
    app.removeAllContentTypeParsers();
    app.addContentTypeParser(
      'application/octet-stream',
      { parseAs: 'buffer', bodyLimit: maxBody },
      (_request, body, done) => done(null, body),
    );
    app.addHook('onRequest', async (request, reply) => {
      sentContentType.set(request, request.headers['content-type']);
      request.headers['content-type'] = 'application/octet-stream';
      if (request.method !== 'POST') return;
      // An unknown source is refused before its body is read: the path is anyone's to send to,
      // and each such request would otherwise hold up to HERALD_INGEST_MAX_BODY_BYTES for nothing.
      // A name no source can have is simply unknown: never let it reach a query.
      const name = (request.params as Params).source;
      const source = SOURCE_NAME.test(name) ? await ingestor.find(name) : null;
      if (source === null) throw notFound('source');
      sourceOf.set(request, source);
      // What the body may take, held until the answer has gone (or the connection): a chunked
      // body, which says no length, may take the limit. One declared past it is refused anyway.
      const declared = Number(request.headers['content-length']);
      const bytes = Number.isSafeInteger(declared) && declared >= 0 ? Math.min(declared, maxBody) : maxBody;
      if (!bodies.take(bytes)) {
        core.metrics.ingestBodiesRefused();
        throw new HeraldError(
          'overloaded',
          'too many inbound bodies are being received now; retry in a second',
        );
      }
      reply.raw.once('close', () => bodies.give(bytes));
    });

    app.post<{ Params: Params }>('/ingest/:source', async (request, reply) => {
      const headers: Record<string, string | undefined> = {};
      for (const [name, value] of Object.entries(request.headers)) {
        headers[name] = Array.isArray(value) ? value.join(', ') : value;
      }
      headers['content-type'] = sentContentType.get(request);
      const rawBody = Buffer.isBuffer(request.body) ? request.body : Buffer.alloc(0);
      let result: IngestResult;
      try {
        result = await ingestor.ingest(
          request.params.source,
          { method: request.method, headers, rawBody },
          sourceOf.get(request),
        );
      } catch (error) {
        if (error instanceof HeraldError) throw error;
        // Past verification, any failure is the store's: the sender must retry, never give up.
        request.log.error({ err: (error as Error).message, source: request.params.source }, 'ingest failed');
        throw new HeraldError('store_unavailable', 'the delivery could not be recorded; retry later');
      }
      if (result.kind === 'challenge') return reply.status(200).send({ challenge: result.challenge });
      return reply.status(204).send();
    });

    app.route<{ Params: Params }>({
      method: ['GET', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'],
      url: '/ingest/:source',
      handler: async (_request, reply) => {
        const error = new HeraldError('method_not_allowed', 'ingest accepts POST only');
        return reply.status(error.status).header('allow', 'POST').send(error.toBody());
      },
    });
  };
