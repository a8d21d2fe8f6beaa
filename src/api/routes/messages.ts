// Messages: publish, get, list, expunge content, destinations and resend.

import type { FastifyPluginAsync } from 'fastify';
import { expungeAttemptResponse } from '../../db/attempts.ts';
import { recordAudit } from '../../db/audit.ts';
import { liftEndpointPause, listDestinations, resendDelivery } from '../../db/deliveries.ts';
import { listEndpoints } from '../../db/endpoints.ts';
import { expungeMessagePayload, findMessage, listMessages } from '../../db/messages.ts';
import { requireApp } from '../../engine/apps.ts';
import type { Core } from '../../engine/core.ts';
import { requireEndpoint } from '../../engine/endpoints.ts';
import { publish } from '../../engine/publish.ts';
import { HeraldError, notFound } from '../../errors.ts';
import { MessageIn } from '../../schemas/svix.ts';
import { parseOrThrow } from '../../schemas/validate.ts';
import type { HistoryReads } from '../history-reads.ts';
import { answerOnce } from '../idempotency.ts';
import { presentDestination, presentMessage, presentMessageJson, presentPage } from '../present.ts';
import { parseListQuery, parseWithContent } from '../query.ts';

type AppParams = { app_id: string };
type MsgParams = AppParams & { msg_id: string };

export const messageRoutes =
  (core: Core, historyReads: HistoryReads): FastifyPluginAsync =>
  async (app) => {
    const { db } = core;
    const loadMessage = async (actor: Parameters<typeof requireApp>[1], params: MsgParams) => {
      const application = await requireApp(db, actor, params.app_id);
      const message = await findMessage(db, application.id, params.msg_id);
      if (!message) throw notFound('message');
      return { application, message };
    };

    app.post<{ Params: AppParams }>('/api/v1/app/:app_id/msg', async (request, reply) => {
      const input = parseOrThrow(MessageIn, request.body);
      // Read before the publish: a query refused after its commit would lose the answer.
      const withContent = parseWithContent(request.query);
      const key = request.headers['idempotency-key'];
      // No explicit transaction: the message, its deliveries, its audit entry and the workers'
      // wake-up are written by ONE statement (shared with concurrent publishes: group commit),
      // atomic on its own and committed when it returns.
      const { message, created } = await publish(core, db, request.actor, request.params.app_id, input, {
        idempotencyKey: typeof key === 'string' && key !== '' ? key : null,
      });
      // 202 only now, after COMMIT: acceptance is a database fact. A replayed key is not new.
      if (created) core.metrics.published('api');
      // A new message's payload is JSON text herald just serialised: spliced in as it is. A
      // replayed one is read back like any stored message.
      return reply
        .status(202)
        .type('application/json; charset=utf-8')
        .send(created ? presentMessageJson(message, withContent) : presentMessage(message, withContent));
    });

    app.get<{ Params: AppParams }>('/api/v1/app/:app_id/msg', async (request) => {
      const application = await requireApp(db, request.actor, request.params.app_id);
      const q = parseListQuery(request.query, 'descending', 'msg', { byTime: true });
      const page = await historyReads.run(request.actor.id, () =>
        listMessages(db, application.id, q.page, {
          eventTypes: q.eventTypes,
          channel: q.channel ?? null,
          tag: q.tag ?? null,
          before: q.before ?? null,
          after: q.after ?? null,
        }),
      );
      return presentPage(page, (m) => presentMessage(m, q.with_content ?? true));
    });

    app.get<{ Params: MsgParams }>('/api/v1/app/:app_id/msg/:msg_id', async (request) => {
      const withContent = parseWithContent(request.query);
      return presentMessage((await loadMessage(request.actor, request.params)).message, withContent);
    });

    app.delete<{ Params: MsgParams }>('/api/v1/app/:app_id/msg/:msg_id/content', async (request, reply) => {
      const { application, message } = await loadMessage(request.actor, request.params);
      await db.transaction(async (tx) => {
        await expungeMessagePayload(tx, application.id, message.id);
        await recordAudit(tx, {
          actor: request.actor.id,
          action: 'message.content_expunged',
          appId: application.id,
          targetType: 'message',
          targetId: message.id,
        });
      });
      return reply.status(204).send();
    });

    app.delete<{ Params: MsgParams & { attempt_id: string } }>(
      '/api/v1/app/:app_id/msg/:msg_id/attempt/:attempt_id/content',
      async (request, reply) => {
        const { application, message } = await loadMessage(request.actor, request.params);
        const attemptId = request.params.attempt_id;
        await db.transaction(async (tx) => {
          const expunged = await expungeAttemptResponse(tx, application.id, message.id, attemptId);
          if (expunged === 'not_found') throw notFound('attempt');
          if (expunged === 'in_flight') {
            throw new HeraldError(
              'conflict',
              'the attempt is in flight: its response is not in yet; expunge it once the attempt has finished',
            );
          }
          await recordAudit(tx, {
            actor: request.actor.id,
            action: 'attempt.content_expunged',
            appId: application.id,
            targetType: 'attempt',
            targetId: attemptId,
            details: { messageId: message.id },
          });
        });
        return reply.status(204).send();
      },
    );

    app.get<{ Params: MsgParams }>('/api/v1/app/:app_id/msg/:msg_id/endpoint', async (request) => {
      const { application, message } = await loadMessage(request.actor, request.params);
      const q = parseListQuery(request.query, 'ascending', 'ep');
      // The page first: each endpoint on it had a delivery of the message then, and deliveries go
      // only with their endpoint, so the read after finds each one's (an endpoint deleted in
      // between is left out, as if deleted before). The other way round, a resend to another
      // endpoint in between put on the page an endpoint the first read had no delivery for.
      const page = await listEndpoints(db, application.id, q.page, message.id);
      const destinations = new Map((await listDestinations(db, message.id)).map((d) => [d.endpointId, d]));
      const found = page.data.flatMap((e) => {
        const destination = destinations.get(e.id);
        return destination ? [{ endpoint: e, destination }] : [];
      });
      return presentPage({ ...page, data: found }, (d) => presentDestination(d.endpoint, d.destination));
    });

    app.post<{ Params: MsgParams & { endpoint_id: string } }>(
      '/api/v1/app/:app_id/msg/:msg_id/endpoint/:endpoint_id/resend',
      async (request, reply) => {
        const { application, message } = await loadMessage(request.actor, request.params);
        const endpoint = await requireEndpoint(db, application, request.params.endpoint_id);
        return answerOnce(core, request, reply, async (tx) => {
          const resend = await resendDelivery(tx, application.id, message.id, endpoint.id);
          if (resend === 'payload_gone') throw payloadExpired();
          await recordAudit(tx, {
            actor: request.actor.id,
            action: 'message.resent',
            appId: application.id,
            targetType: 'message',
            targetId: message.id,
            // Queued: behind an attempt in flight, which ends first.
            details: { endpointId: endpoint.id, ...(resend === 'queued' && { queued: true }) },
          });
          // A send now, asked for: the endpoint's rest after failures does not hold it back. Last,
          // as it locks the endpoint's slot until the commit, which claims of it wait for.
          await liftEndpointPause(tx, endpoint.id);
          // Svix answers with an EmptyResponse (`{}`); the SDKs JSON-parse any non-204 body.
          return { status: 202, body: {} };
        });
      },
    );
  };

/** Retention, or a delete of the content, removed the message's payload: nothing is left to send. */
const payloadExpired = () =>
  new HeraldError(
    'payload_expired',
    "the message's payload is gone (retention or a content delete); nothing to resend",
  );
