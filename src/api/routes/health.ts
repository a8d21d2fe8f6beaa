// Liveness (Svix-compatible, unauthenticated) and herald's readiness check.

import type { FastifyPluginAsync } from 'fastify';
import { migrationState } from '../../db/migrate.ts';
import type { Core } from '../../engine/core.ts';
import { HeraldError } from '../../errors.ts';

export const healthRoutes =
  (core: Core): FastifyPluginAsync =>
  async (app) => {
    const live = async (_request: unknown, reply: { status(n: number): { send(): unknown } }) =>
      reply.status(204).send();
    app.route({ method: ['GET', 'HEAD'], url: '/api/v1/health', handler: live });
    app.route({ method: ['GET', 'HEAD'], url: '/api/v1/health/ping', handler: live });

    // Ready = the database answers and every migration this build knows is applied.
    app.get('/api/v1/health/ready', async () => {
      let state: Awaited<ReturnType<typeof migrationState>>;
      try {
        state = await migrationState(core.db);
      } catch {
        throw new HeraldError('store_unavailable', 'the database is unreachable');
      }
      if (state.pending.length > 0) {
        throw new HeraldError('store_unavailable', `migrations pending: ${state.pending.join(', ')}`);
      }
      return { database: 'ok', migrations: state.applied };
    });
  };
