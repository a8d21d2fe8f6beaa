// GET /metrics: the Prometheus text exposition. Unauthenticated, like /api/v1/health, because
// scrapers rarely carry bearer tokens and a metrics port is normally reachable only from the
// monitoring network. It is safe to expose that way because it holds counts only: no ids, no
// payloads, no URLs — labels are bounded enums and operator-chosen source names (see ops/metrics).

import type { FastifyPluginAsync } from 'fastify';
import type { Core } from '../../engine/core.ts';

export const metricsRoutes =
  (core: Core): FastifyPluginAsync =>
  async (app) => {
    app.get('/metrics', async (_request, reply) => {
      const text = await core.metrics.scrape();
      return reply.header('content-type', core.metrics.contentType).send(text);
    });
  };
