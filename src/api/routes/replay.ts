// herald's addition: POST /api/v1/replay — a new delivery cycle for the finished deliveries a filter
// selects (see src/ops/replay.ts). A POST outside the publish route, so auth.ts asks for the admin
// scope; an admin key restricted to some apps replays within those apps only.

import type { FastifyPluginAsync } from 'fastify';
import type { Core } from '../../engine/core.ts';
import { liftRests, ReplayIn, replay } from '../../ops/replay.ts';
import { parseOrThrow } from '../../schemas/validate.ts';
import { answerOnce } from '../idempotency.ts';

export const replayRoutes =
  (core: Core): FastifyPluginAsync =>
  async (app) => {
    app.post('/api/v1/replay', async (request, reply) => {
      const input = parseOrThrow(ReplayIn, request.body);
      return answerOnce(core, request, reply, async (tx) => {
        const run = await replay(tx, request.actor, input);
        // A real run has restarted the deliveries by now; sending them is the workers' job (202),
        // once the endpoints' rests are lifted, after the commit.
        return {
          status: run.result.dryRun ? 200 : 202,
          body: run.result,
          afterCommit: () => liftRests(core.db, run.endpoints, core.log),
        };
      });
    });
  };
