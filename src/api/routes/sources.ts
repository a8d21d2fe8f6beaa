// herald's inbound sources: /api/v1/source[/{id or uid}]. Secrets are write-only.

import type { FastifyPluginAsync } from 'fastify';
import { deletionTransaction, purgeSourceHistory } from '../../db/history-purge.ts';
import { deleteSource, listSources, type SourceRow } from '../../db/sources.ts';
import { assertAppAllowed } from '../../engine/apps.ts';
import type { Core } from '../../engine/core.ts';
import { audit, changeSource, createSource, requireSource } from '../../engine/sources.ts';
import { notFound } from '../../errors.ts';
import { sourceLabel } from '../../ops/metrics.ts';
import { SourceIn, SourcePatch } from '../../schemas/sources.ts';
import { parseOrThrow } from '../../schemas/validate.ts';
import { answerOnce } from '../idempotency.ts';
import { rethrowTakenUid, SOURCE_UID_TAKEN } from '../uid-conflict.ts';

type Params = { source_id: string };

export const presentSource = (s: SourceRow) => ({
  id: s.id,
  uid: s.uid,
  scheme: s.scheme,
  settings: s.settings,
  app: s.appId,
  eventType: s.eventType,
  businessKey: s.businessKey,
  retentionDays: s.retentionDays,
  ingestPath: `/ingest/${s.uid ?? s.id}`,
  createdAt: s.createdAt,
  updatedAt: s.updatedAt,
});

export const sourceRoutes =
  (core: Core): FastifyPluginAsync =>
  async (app) => {
    const { db } = core;
    const load = async (actor: Parameters<typeof assertAppAllowed>[0], idOrUid: string) => {
      const source = await requireSource(db, idOrUid);
      assertAppAllowed(actor, source.appId, 'source');
      return source;
    };

    app.get('/api/v1/source', async (request) => {
      const data = (await listSources(db, request.actor.appIds)).map(presentSource);
      return { data, done: true, iterator: null, prevIterator: null };
    });

    app.post('/api/v1/source', async (request, reply) => {
      const input = parseOrThrow(SourceIn, request.body);
      let created: SourceRow | undefined;
      const answered = await answerOnce(core, request, reply, async (tx) => {
        created = await createSource(core, tx, request.actor, input);
        return { status: 201, body: presentSource(created) };
      }).catch(rethrowTakenUid(SOURCE_UID_TAKEN));
      if (created) core.metrics.sourcesKnown([sourceLabel(created)]);
      return answered;
    });

    app.get<{ Params: Params }>('/api/v1/source/:source_id', async (request) =>
      presentSource(await load(request.actor, request.params.source_id)),
    );

    app.patch<{ Params: Params }>('/api/v1/source/:source_id', async (request) => {
      const patch = parseOrThrow(SourcePatch, request.body);
      const current = await load(request.actor, request.params.source_id);
      const updated = await db
        .transaction((tx) => changeSource(core, tx, request.actor, current.id, patch))
        .catch(rethrowTakenUid(SOURCE_UID_TAKEN));
      core.metrics.sourcesKnown([sourceLabel(updated)]);
      return presentSource(updated);
    });

    app.delete<{ Params: Params }>('/api/v1/source/:source_id', async (request, reply) => {
      const source = await load(request.actor, request.params.source_id);
      await deletionTransaction(db, async (tx) => {
        await purgeSourceHistory(tx, source.id);
        // Deleted meanwhile by another request: that one was audited, not this one.
        if (!(await deleteSource(tx, source.id))) throw notFound('source');
        await audit(tx, request.actor, 'source.deleted', source, {});
      });
      return reply.status(204).send();
    });
  };
