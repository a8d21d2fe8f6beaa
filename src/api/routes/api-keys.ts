// herald's addition: API key management under /api/v1/api-key (admin scope, see auth.ts). The
// token is in the creation response and nowhere else.

import type { FastifyPluginAsync } from 'fastify';
import { listApiKeys } from '../../db/api-keys.ts';
import { createApiKey, resolveAppIds, revokeKey } from '../../engine/api-keys.ts';
import type { Core } from '../../engine/core.ts';
import { HeraldError, notFound } from '../../errors.ts';
import { ApiKeyIn } from '../../schemas/svix.ts';
import { parseOrThrow } from '../../schemas/validate.ts';
import type { Authenticator } from '../auth.ts';
import { answerOnce } from '../idempotency.ts';

export const apiKeyRoutes =
  (core: Core, auth: Pick<Authenticator, 'forget'>): FastifyPluginAsync =>
  async (app) => {
    const { db } = core;

    app.post('/api/v1/api-key', async (request, reply) => {
      const input = parseOrThrow(ApiKeyIn, request.body);
      const appIds = input.apps ? await resolveAppIds(db, input.apps) : null;
      // With an idempotency-key, a retry after a lost answer must not mint a second key whose
      // token nobody saw; nor can the token be kept to answer it again. It is told which key its
      // first request made.
      return answerOnce(core, request, reply, async (tx) => {
        const created = await createApiKey(tx, request.actor.id, {
          name: input.name,
          scopes: input.scopes,
          appIds,
        });
        const repeated = new HeraldError(
          'idempotency_conflict',
          `this request created API key ${created.id} already; its token is shown once, in that answer: if it was lost, revoke the key (DELETE /api/v1/api-key/${created.id}) and create another`,
        );
        return { status: 201, body: created, keptAs: { status: repeated.status, body: repeated.toBody() } };
      });
    });

    app.get('/api/v1/api-key', async () => ({
      data: await listApiKeys(db),
      done: true,
      iterator: null,
      prevIterator: null,
    }));

    app.delete<{ Params: { key_id: string } }>('/api/v1/api-key/:key_id', async (request, reply) => {
      await db.transaction(async (tx) => {
        if (!(await revokeKey(tx, request.actor.id, request.params.key_id))) throw notFound('API key');
      });
      // Refused from the next request on, here; elsewhere once the commit is announced.
      auth.forget(request.params.key_id);
      return reply.status(204).send();
    });
  };
