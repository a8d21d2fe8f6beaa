// The HTTP face: a fastify server with the Svix-compatible API under /api/v1. Every error leaves
// as { code, detail } with a status from the one catalogue in errors.ts; no stack traces.

import rateLimit from '@fastify/rate-limit';
import Fastify, {
  type FastifyBaseLogger,
  type FastifyError,
  type FastifyInstance,
  type FastifyReply,
  LogController,
} from 'fastify';
import { coalesced } from '../db/group-commit.ts';
import { listSources, SOURCE_CHANGED_CHANNEL } from '../db/sources.ts';
import { isStoreUnavailable } from '../db/store-unavailable.ts';
import type { Actor, Core } from '../engine/core.ts';
import { type ErrorKind, HeraldError } from '../errors.ts';
import { createIngestor } from '../inbound/ingest.ts';
import { createSafeFetchText } from '../inbound/verifiers/index.ts';
import { sourceLabel } from '../ops/metrics.ts';
import { assertPathIdentifier } from '../schemas/validate.ts';
import { warnOfPrivateNetworks } from '../sender/destination.ts';
import { assertReach, assertScope, createAuthenticator, requiredScope } from './auth.ts';
import { createAuthFailureLimiter } from './auth-failures.ts';
import { createHistoryReads, historyReadLimits } from './history-reads.ts';
import { useApiJsonParser } from './json-body.ts';
import { openApiRoutes } from './openapi/routes.ts';
import { requestDeadline } from './request-deadline.ts';
import { apiKeyRoutes } from './routes/api-keys.ts';
import { appRoutes } from './routes/apps.ts';
import { attemptRoutes } from './routes/attempts.ts';
import { endpointRoutes } from './routes/endpoints.ts';
import { eventTypeRoutes } from './routes/event-types.ts';
import { healthRoutes } from './routes/health.ts';
import { ingestRoutes } from './routes/ingest.ts';
import { messageRoutes } from './routes/messages.ts';
import { metricsRoutes } from './routes/metrics.ts';
import { replayRoutes } from './routes/replay.ts';
import { sourceRoutes } from './routes/sources.ts';

declare module 'fastify' {
  interface FastifyRequest {
    actor: Actor;
  }
}

const PUBLIC_PATHS = new Set(['/api/v1/health', '/api/v1/health/ping']);

/** Errors the caller cannot mend, logged for whoever runs the process. */
const OPERATORS_TO_KNOW = new Set<ErrorKind>(['internal', 'store_unavailable', 'secret_unavailable']);

/**
 * Characters of one path segment, as sent: a 256-character uid, event id or event type name,
 * each character percent-encoded (up to 12 for one outside the BMP). Fastify's default (100)
 * would refuse identifiers that the API accepts in bodies.
 */
const MAX_PATH_PARAM_LENGTH = 256 * 12;

function toHeraldError(error: FastifyError | Error): HeraldError {
  if (error instanceof HeraldError) return error;
  const fastifyCode = (error as FastifyError).code;
  switch (fastifyCode) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new HeraldError('payload_too_large', error.message);
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new HeraldError('unsupported_media_type', 'expected content-type application/json');
    case 'FST_ERR_CTP_INVALID_JSON_BODY':
      return new HeraldError('bad_request', 'the request body is not valid JSON');
  }
  if ((error as FastifyError).statusCode === 400) return new HeraldError('bad_request', error.message);
  // Safety nets for input the schemas let through: the database's verdict on the caller's data.
  switch (fastifyCode as string | undefined) {
    case '23505': // unique_violation: e.g. two creators racing on one uid
      return new HeraldError('conflict', 'this conflicts with an existing object');
    case '23503': // foreign_key_violation: what the request names was deleted while it ran
      return new HeraldError('not_found', 'an object this request names no longer exists');
    case '22021': // a text value with U+0000 (character_not_in_repertoire)
    case '22P05': // the same inside jsonb (untranslatable_character)
      return bodyInvalid('a text value contains a NUL character, which cannot be stored');
    case '22003': // numeric_value_out_of_range
      return bodyInvalid('a number is out of range');
  }
  if (isStoreUnavailable(error))
    return new HeraldError('store_unavailable', 'the database is unavailable; retry later');
  return new HeraldError('internal', 'internal error');
}

/**
 * The database refused a value of the body that the schemas let through; which field it was, it
 * does not say. (Path and query values with a NUL are refused before: refuseNul.)
 */
const bodyInvalid = (msg: string) =>
  new HeraldError('validation', `body: ${msg}`, [{ loc: ['body'], msg, type: 'value_error' }]);

/** PostgreSQL text cannot hold U+0000: a path or query value with one is refused, named. */
function refuseNul(location: 'path' | 'query', values: unknown): void {
  for (const [name, value] of Object.entries((values ?? {}) as Record<string, unknown>)) {
    const texts = Array.isArray(value) ? value : [value];
    if (texts.some((text) => typeof text === 'string' && text.includes('\0'))) {
      const msg = 'contains a NUL character';
      throw new HeraldError('validation', `${name}: ${msg}`, [
        { loc: [location, name], msg, type: 'value_error' },
      ]);
    }
  }
}

/** The API's path parameters that name an object by its id or uid (or an event type by its name). */
const ID_PARAMS = Object.entries({
  app_id: 'id or uid',
  endpoint_id: 'id or uid',
  msg_id: 'id or event id',
  attempt_id: 'id',
  event_type_name: 'event type name',
  key_id: 'id',
  source_id: 'id or uid',
});

/**
 * An id, uid or name no object can have (the contract's pattern, at most 256 characters) is
 * refused by name, on every route as on the PUT that would create it, not looked up and answered
 * 404 as if such an object might exist.
 */
function refuseMalformedIds(params: unknown): void {
  for (const [name, what] of ID_PARAMS) {
    const value = (params as Record<string, unknown>)[name];
    if (typeof value === 'string') assertPathIdentifier(name, value, what);
  }
}

/**
 * Each source's intake series from the start, and from a source's creation wherever it is made (its
 * announcement): at 0, so that increase() sees a first refusal. A deleted or renamed source's
 * series go. A database away now is not a reason to refuse to start: those series then begin with
 * their first delivery, or the next announcement.
 */
async function followSourcesInMetrics(app: FastifyInstance, core: Core): Promise<void> {
  const sync = coalesced(() =>
    listSources(core.db, null).then(
      (sources) => core.metrics.sourcesAre(sources.map(sourceLabel)),
      (error: Error) => core.log.warn({ err: error.message }, 'metrics: the sources could not be listed'),
    ),
  );
  // Listening first: a source made between the list and the LISTEN would go unheard.
  const unlisten = await core.db
    .listen(SOURCE_CHANGED_CHANNEL, () => void sync())
    .catch((error: Error) => {
      core.log.warn({ err: error.message }, 'metrics: source changes cannot be followed');
      return null;
    });
  if (unlisten) app.addHook('onClose', () => unlisten());
  await sync();
}

/** Just /metrics and the liveness check: what a worker-only process serves. */
export async function buildMetricsServer(core: Core): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: core.log as FastifyBaseLogger,
    logController: new LogController({ disableRequestLogging: true }),
  });
  await app.register(healthRoutes(core));
  await app.register(metricsRoutes(core));
  return app;
}

export async function buildApi(core: Core): Promise<FastifyInstance> {
  const app = Fastify({
    loggerInstance: core.log as FastifyBaseLogger,
    bodyLimit: core.config.maxBodyBytes,
    logController: new LogController({ disableRequestLogging: true }),
    routerOptions: { ignoreTrailingSlash: true, maxParamLength: MAX_PATH_PARAM_LENGTH },
    // The router's own refusals answer in the catalogue's shape, as every other error does.
    frameworkErrors: (error, _request, routerReply) => {
      const reply = routerReply as FastifyReply;
      const herald =
        error.code === 'FST_ERR_MAX_PARAM_LENGTH'
          ? new HeraldError('not_found', 'no object has an identifier this long')
          : new HeraldError('bad_request', 'the path is not valid percent-encoded UTF-8');
      return reply.status(herald.status).send(herald.toBody());
    },
  });
  app.decorateRequest('actor', null as unknown as Actor);
  requestDeadline(app, core.config.requestTimeoutMs);
  // The API speaks JSON only: anything else is 415, not a string that fails validation later.
  app.removeContentTypeParser('text/plain');
  useApiJsonParser(app);

  app.setErrorHandler((error: FastifyError, request, reply) => {
    const herald = toHeraldError(error);
    if (OPERATORS_TO_KNOW.has(herald.kind)) {
      request.log.error(
        { err: { message: error.message, code: (error as FastifyError).code }, url: request.url },
        'request failed',
      );
    }
    // Every 503 is worth a retry soon: the store back, a write queue drained, another process (or
    // this one restarted) holding the master key, a source mended.
    const retryAfter = herald.retryAfterSeconds ?? (herald.status === 503 ? 1 : undefined);
    if (retryAfter !== undefined) reply.header('retry-after', String(retryAfter));
    return reply.status(herald.status).send(herald.toBody());
  });
  app.setNotFoundHandler((request, reply) => {
    const error = new HeraldError('not_found', `no route for ${request.method} ${request.url.split('?')[0]}`);
    return reply.status(error.status).send(error.toBody());
  });

  const auth = createAuthenticator({
    db: core.db,
    adminKey: core.config.adminKey,
    log: core.log,
    failures: createAuthFailureLimiter({ limit: core.config.authFailureLimit }),
  });
  app.addHook('onClose', () => auth.close());
  app.addHook('onRequest', async (request) => {
    const path = request.routeOptions.url;
    if (!path?.startsWith('/api/v1/') || PUBLIC_PATHS.has(path)) return;
    request.actor = await auth.authenticate(request.headers.authorization, request.ip);
    assertScope(request.actor, requiredScope(request));
    assertReach(request.actor, request);
  });
  app.addHook('preValidation', async (request) => {
    refuseNul('path', request.params);
    refuseNul('query', request.query);
    if (request.routeOptions.url?.startsWith('/api/v1/')) refuseMalformedIds(request.params);
  });

  if (core.config.apiRateLimit > 0) {
    // Limited per API key, not per address: one client's burst must not starve another's, and
    // many clients behind one proxy are still told apart. Hence after authentication (the
    // onRequest hook above), and before any handler runs, so a refused request stores nothing.
    // Public routes carry no actor and are not limited. Registered before the routes, which is
    // when the plugin attaches its hook to them.
    await app.register(rateLimit, {
      hook: 'preHandler',
      max: core.config.apiRateLimit,
      timeWindow: 1000,
      keyGenerator: (request) => request.actor?.id ?? '',
      allowList: (request) => !request.actor,
      errorResponseBuilder: (_request, context) =>
        new HeraldError(
          'rate_limited',
          `more than ${context.max} requests per second with this API key; retry in ${context.after}`,
        ),
    });
  }

  await app.register(healthRoutes(core));
  // GET /openapi.json and GET /docs: public, outside /api/v1.
  await app.register(openApiRoutes());
  await app.register(appRoutes(core));
  await app.register(eventTypeRoutes(core));
  const historyReads = createHistoryReads(historyReadLimits(core.config.dbPoolSize), core.metrics);
  await app.register(endpointRoutes(core, historyReads));
  await app.register(messageRoutes(core, historyReads));
  await app.register(attemptRoutes(core, historyReads));
  await app.register(apiKeyRoutes(core, auth));
  await app.register(sourceRoutes(core));
  await app.register(replayRoutes(core));
  // Outside /api/v1, so the authentication hook above leaves it alone (see routes/metrics.ts).
  // With HERALD_METRICS_PORT, /metrics is served there only: the API's port is public wherever
  // it takes inbound deliveries, and a scrape runs queries.
  if (core.config.metricsPort === undefined) await app.register(metricsRoutes(core));

  // Inbound: JWKS and SNS certificates are fetched under the same SSRF rules as deliveries.
  warnOfPrivateNetworks(
    core.log,
    core.config.allowPrivateNetworks,
    "inbound sources' key fetches (JWKS, SNS certificates)",
  );
  const fetcher = createSafeFetchText({
    allowPrivateNetworks: core.config.allowPrivateNetworks,
    timeoutMs: core.config.attemptTimeoutMs,
    extraCaPem: core.extraCaPem,
  });
  app.addHook('onClose', () => fetcher.close());
  const ingestor = createIngestor({
    db: core.db,
    box: core.box,
    log: core.log,
    fetchText: fetcher.fetchText,
    metrics: core.metrics,
  });
  app.addHook('onClose', () => ingestor.close());
  await app.register(ingestRoutes(core, ingestor));
  await followSourcesInMetrics(app, core);
  return app;
}
