// The attempt history: by message, by endpoint, one attempt, and the messages an endpoint got.

import type { FastifyPluginAsync } from 'fastify';
import {
  type AttemptRow,
  findAttempt,
  listAttemptedMessages,
  listAttemptsByEndpoint,
  listAttemptsByMessage,
} from '../../db/attempts.ts';
import { findMessage, findMessagesById } from '../../db/messages.ts';
import type { Page } from '../../db/pagination.ts';
import { deliveryStateOf } from '../../domain/message-status.ts';
import { requireApp } from '../../engine/apps.ts';
import type { Core } from '../../engine/core.ts';
import { requireEndpoint } from '../../engine/endpoints.ts';
import { notFound } from '../../errors.ts';
import type { HistoryReads } from '../history-reads.ts';
import { presentAttempt, presentAttemptedMessage, presentMessage, presentPage } from '../present.ts';
import { type ListQuery, parseListQuery } from '../query.ts';

/** The list filters; `endpointId`, an endpoint's id that the caller may have named by its uid. */
const filterOf = (q: ListQuery, endpointId: string | null = null) => ({
  status: q.status ?? null,
  endpointId,
  before: q.before ?? null,
  after: q.after ?? null,
  statusCodeClass: q.status_code_class ?? null,
  eventTypes: q.eventTypes,
  channel: q.channel ?? null,
  tag: q.tag ?? null,
});

export const attemptRoutes =
  (core: Core, historyReads: HistoryReads): FastifyPluginAsync =>
  async (app) => {
    const { db } = core;

    /** A page of attempts, each with its message when `with_msg` asks (the Svix SDKs' `withMsg`). */
    async function presentAttempts(appId: string, page: Page<AttemptRow>, q: ListQuery) {
      const withContent = q.with_content ?? true;
      if (!q.with_msg) return presentPage(page, (a) => presentAttempt(a, withContent));
      const ids = [...new Set(page.data.map((a) => a.messageId))];
      const messages = new Map((await findMessagesById(db, appId, ids)).map((m) => [m.id, m]));
      return presentPage(page, (a) => {
        const message = messages.get(a.messageId);
        return {
          ...presentAttempt(a, withContent),
          ...(message ? { msg: presentMessage(message, withContent) } : {}),
        };
      });
    }

    app.get<{ Params: { app_id: string; msg_id: string } }>(
      '/api/v1/app/:app_id/attempt/msg/:msg_id',
      async (request) => {
        const application = await requireApp(db, request.actor, request.params.app_id);
        const message = await findMessage(db, application.id, request.params.msg_id);
        if (!message) throw notFound('message');
        const q = parseListQuery(request.query, 'descending', 'atmpt', { byTime: true });
        const endpoint = q.endpoint_id ? await requireEndpoint(db, application, q.endpoint_id) : null;
        const page = await listAttemptsByMessage(
          db,
          application.id,
          message.id,
          q.page,
          filterOf(q, endpoint?.id),
        );
        return presentAttempts(application.id, page, q);
      },
    );

    app.get<{ Params: { app_id: string; endpoint_id: string } }>(
      '/api/v1/app/:app_id/attempt/endpoint/:endpoint_id',
      async (request) => {
        const application = await requireApp(db, request.actor, request.params.app_id);
        const endpoint = await requireEndpoint(db, application, request.params.endpoint_id);
        const q = parseListQuery(request.query, 'descending', 'atmpt', { byTime: true });
        const page = await historyReads.run(request.actor.id, () =>
          listAttemptsByEndpoint(db, application.id, endpoint.id, q.page, filterOf(q)),
        );
        return presentAttempts(application.id, page, q);
      },
    );

    app.get<{ Params: { app_id: string; msg_id: string; attempt_id: string } }>(
      '/api/v1/app/:app_id/msg/:msg_id/attempt/:attempt_id',
      async (request) => {
        const application = await requireApp(db, request.actor, request.params.app_id);
        const message = await findMessage(db, application.id, request.params.msg_id);
        if (!message) throw notFound('message');
        const attempt = await findAttempt(db, application.id, message.id, request.params.attempt_id);
        if (!attempt) throw notFound('attempt');
        return presentAttempt(attempt);
      },
    );

    app.get<{ Params: { app_id: string; endpoint_id: string } }>(
      '/api/v1/app/:app_id/endpoint/:endpoint_id/msg',
      async (request) => {
        const application = await requireApp(db, request.actor, request.params.app_id);
        const endpoint = await requireEndpoint(db, application, request.params.endpoint_id);
        const q = parseListQuery(request.query, 'descending', 'msg', { byTime: true });
        const page = await historyReads.run(request.actor.id, () =>
          listAttemptedMessages(db, application.id, endpoint.id, q.page, {
            state: q.status === undefined ? null : deliveryStateOf(q.status),
            eventTypes: q.eventTypes,
            channel: q.channel ?? null,
            tag: q.tag ?? null,
            before: q.before ?? null,
            after: q.after ?? null,
          }),
        );
        return presentPage(page, (m) => presentAttemptedMessage(m, endpoint, q.with_content ?? true));
      },
    );
  };
