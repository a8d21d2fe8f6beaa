// Event types: /api/v1/event-type[/{event_type_name}].

import type { FastifyPluginAsync } from 'fastify';
import { recordAudit } from '../../db/audit.ts';
import {
  archiveEventType,
  expungeEventType,
  findEventType,
  insertEventType,
  listEventTypes,
  upsertEventType,
} from '../../db/event-types.ts';
import type { Queryable } from '../../db/port.ts';
import type { Core } from '../../engine/core.ts';
import { HeraldError, notFound } from '../../errors.ts';
import { EventTypeIn, EventTypePatch, EventTypeUpdate } from '../../schemas/svix.ts';
import { parseOrThrow } from '../../schemas/validate.ts';
import { answerOnce } from '../idempotency.ts';
import { presentEventType, presentPage } from '../present.ts';
import { flagReader, parseListQuery } from '../query.ts';

const readExpunge = flagReader('expunge', false);

type Params = { event_type_name: string };

/** Event types belong to no app; the audit names the type, never its schemas. */
const audit = (tx: Queryable, actor: string, action: string, name: string) =>
  recordAudit(tx, { actor, action, appId: null, targetType: 'event_type', targetId: name });

export const eventTypeRoutes =
  (core: Core): FastifyPluginAsync =>
  async (app) => {
    const { db } = core;

    app.get('/api/v1/event-type', async (request) => {
      const q = parseListQuery(request.query, 'ascending', 'event_type_name');
      // As in Svix, the schemas (which can be large) only with with_content=true.
      const withContent = q.with_content ?? false;
      return presentPage(await listEventTypes(db, q.page, q.include_archived), (e) =>
        presentEventType(e, withContent),
      );
    });

    app.post('/api/v1/event-type', async (request, reply) => {
      const input = parseOrThrow(EventTypeIn, request.body);
      return answerOnce(core, request, reply, async (tx) => {
        const inserted = await insertEventType(tx, {
          name: input.name,
          description: input.description,
          schemas: input.schemas ?? null,
          archived: input.archived ?? false,
          deprecated: input.deprecated ?? false,
          featureFlag: input.featureFlag ?? null,
        });
        if (!inserted) throw new HeraldError('conflict', `event type ${input.name} already exists`);
        const action = inserted.created ? 'event_type.created' : 'event_type.unarchived';
        await audit(tx, request.actor.id, action, inserted.row.name);
        return { status: 201, body: presentEventType(inserted.row) };
      });
    });

    app.get<{ Params: Params }>('/api/v1/event-type/:event_type_name', async (request) => {
      const row = await findEventType(db, request.params.event_type_name);
      if (!row) throw notFound('event type');
      return presentEventType(row);
    });

    app.put<{ Params: Params }>('/api/v1/event-type/:event_type_name', async (request, reply) => {
      const input = parseOrThrow(EventTypeUpdate, request.body);
      const { row, created } = await db.transaction(async (tx) => {
        const upserted = await upsertEventType(tx, {
          name: request.params.event_type_name,
          description: input.description,
          schemas: input.schemas ?? null,
          archived: input.archived ?? false,
          deprecated: input.deprecated ?? false,
          featureFlag: input.featureFlag ?? null,
        });
        const action = upserted.created ? 'event_type.created' : 'event_type.updated';
        await audit(tx, request.actor.id, action, upserted.row.name);
        return upserted;
      });
      return reply.status(created ? 201 : 200).send(presentEventType(row));
    });

    app.patch<{ Params: Params }>('/api/v1/event-type/:event_type_name', async (request) => {
      const input = parseOrThrow(EventTypePatch, request.body);
      const row = await db.transaction(async (tx) => {
        // Read under its lock: merged onto a row read before, the PATCH would undo a change that
        // committed since (an archive brought back), or make again a type expunged meanwhile.
        const current = await findEventType(tx, request.params.event_type_name, { lock: true });
        if (!current) throw notFound('event type');
        const { row: updated } = await upsertEventType(tx, {
          name: current.name,
          description: input.description ?? current.description,
          schemas: input.schemas === undefined ? current.schemas : input.schemas,
          archived: input.archived ?? current.archived,
          deprecated: input.deprecated ?? current.deprecated,
          featureFlag: input.featureFlag === undefined ? current.featureFlag : input.featureFlag,
        });
        await audit(tx, request.actor.id, 'event_type.updated', updated.name);
        return updated;
      });
      return presentEventType(row);
    });

    app.delete<{ Params: Params }>('/api/v1/event-type/:event_type_name', async (request, reply) => {
      const name = request.params.event_type_name;
      const expunge = readExpunge(request.query);
      await db.transaction(async (tx) => {
        const done = expunge ? await expungeEventType(tx, name) : await archiveEventType(tx, name);
        if (!done) throw notFound('event type');
        await audit(tx, request.actor.id, expunge ? 'event_type.expunged' : 'event_type.archived', name);
      });
      return reply.status(204).send();
    });
  };
