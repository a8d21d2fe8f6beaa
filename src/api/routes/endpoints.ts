// Endpoints: /api/v1/app/{app_id}/endpoint[/{endpoint_id}[/secret|/headers|/recover|/replay-missing|/stats]].

import { randomUUID } from 'node:crypto';
import type { FastifyPluginAsync } from 'fastify';
import { liftEndpointPause, recoverFailedDeliveries, replayMissingDeliveries } from '../../db/deliveries.ts';
import { deleteEndpoint, endpointStats, findEndpoint, listEndpoints } from '../../db/endpoints.ts';
import { deletionTransaction, purgeEndpointDeliveries } from '../../db/history-purge.ts';
import type { Queryable } from '../../db/port.ts';
import { requireApp } from '../../engine/apps.ts';
import type { Core } from '../../engine/core.ts';
import {
  audit,
  checkNewUrl,
  createEndpoint,
  endpointHeaders,
  keepHeraldOwn,
  patchHeaders,
  patchToUpdate,
  replaceEndpoint,
  replaceHeaders,
  requireEndpoint,
  revealSecretTo,
  rotateEndpointSecret,
  validateHeaders,
} from '../../engine/endpoints.ts';
import { publishExample } from '../../engine/publish.ts';
import { HeraldError, notFound } from '../../errors.ts';
import { emitEndpointEvent } from '../../ops/operational-webhooks.ts';
import {
  EndpointHeadersIn,
  EndpointHeadersPatchIn,
  EndpointIn,
  EndpointPatch,
  EndpointSecretRotateIn,
  EndpointUpdate,
  EventExampleIn,
  ID_PREFIX,
  RecoverIn,
  ReplayMissingIn,
} from '../../schemas/svix.ts';
import { parseOrThrow, uidFromPath } from '../../schemas/validate.ts';
import type { HistoryReads } from '../history-reads.ts';
import { answerOnce } from '../idempotency.ts';
import { presentEndpoint, presentMessage, presentPage } from '../present.ts';
import { parseListQuery, StatsQuery } from '../query.ts';
import { createOrUpdateByPath, rethrowTakenUid } from '../uid-conflict.ts';

type AppParams = { app_id: string };
type EpParams = AppParams & { endpoint_id: string };
/**
 * What a task over a window did, all of it audited: the deliveries it set going; a recovery, those
 * it left for review; a replay-missing, whether it stopped at its cap with more left (answered too,
 * for the caller to call again).
 */
interface WindowTaskDone {
  deliveries: number;
  leftForReview?: number;
  more?: boolean;
}

/**
 * Header names whose values are credentials: listed by name, value withheld. Svix's list names a
 * few; receivers name theirs every way (`X-Webhook-Token`, `Api-Key`, `X_API_KEY`,
 * `X-AccessToken`, `ClientSecret`, `X-JWT`, `X-Passphrase`, `X-Vercel-Protection-Bypass`, `X-Hmac`,
 * all in lower case as often), so a
 * name with a credential's word anywhere in it is withheld: a harmless header withheld too
 * (`X-Author`) costs a look with the value at hand, a credential shown to every `read` key costs
 * the credential. The short words that end or hide inside others — `key` (`X-Monkey`), `sig`
 * (`X-Design`), `pass` (`X-Passenger`), and `pwd`, `passcode`, `pin`, `otp`, `code` (an Azure
 * Function's key travels as `code`) — count as words of their own (split at `-`, `_`, `.`), and
 * `key` after api, access, private or client (`apikey`).
 */
const SENSITIVE_HEADER =
  /auth|token|secret|passw|passphrase|jwt|bearer|credential|signature|cookie|session|bypass|hmac|(api|access|private|client)keys?|(^|[-_.])(keys?|sig|pass|pwd|passcode|pin|otp|code)([-_.]|$)/i;

const ENDPOINT_UID_TAKEN = 'an endpoint with this uid already exists in the application';

/** How far back endpoint stats count when `since` is not given, as Svix does. */
const STATS_DEFAULT_DAYS = 28;

export const endpointRoutes =
  (core: Core, historyReads: HistoryReads): FastifyPluginAsync =>
  async (app) => {
    const { db } = core;
    const load = async (actor: Parameters<typeof requireApp>[1], params: EpParams) => {
      const application = await requireApp(db, actor, params.app_id);
      return { application, endpoint: await requireEndpoint(db, application, params.endpoint_id) };
    };

    app.get<{ Params: AppParams }>('/api/v1/app/:app_id/endpoint', async (request) => {
      const application = await requireApp(db, request.actor, request.params.app_id);
      const q = parseListQuery(request.query, 'descending', 'ep');
      return presentPage(await listEndpoints(db, application.id, q.page), presentEndpoint);
    });

    app.post<{ Params: AppParams }>('/api/v1/app/:app_id/endpoint', async (request, reply) => {
      const input = parseOrThrow(EndpointIn, request.body);
      const headers = input.headers ?? {};
      validateHeaders(headers);
      const application = await requireApp(db, request.actor, request.params.app_id);
      return answerOnce(
        core,
        request,
        reply,
        async (tx, checkedUrl) => {
          const endpoint = await createEndpoint(core, tx, request.actor, application, input, checkedUrl);
          if (Object.keys(headers).length > 0)
            await replaceHeaders(core, tx, request.actor, endpoint, headers);
          return { status: 201, body: presentEndpoint(endpoint) };
        },
        // Its name looked up: a repeat is answered even while the name does not resolve.
        () => checkNewUrl(core, null, input.url),
      ).catch(rethrowTakenUid(ENDPOINT_UID_TAKEN));
    });

    app.get<{ Params: EpParams }>('/api/v1/app/:app_id/endpoint/:endpoint_id', async (request) =>
      presentEndpoint((await load(request.actor, request.params)).endpoint),
    );

    app.put<{ Params: EpParams }>('/api/v1/app/:app_id/endpoint/:endpoint_id', async (request, reply) => {
      const input = parseOrThrow(EndpointUpdate, request.body);
      const application = await requireApp(db, request.actor, request.params.app_id);
      const { created, answer } = await createOrUpdateByPath({
        find: () => findEndpoint(db, application.id, request.params.endpoint_id),
        create: async () => {
          const uid = uidFromPath(request.params.endpoint_id, input.uid, {
            idPrefix: ID_PREFIX.endpoint,
            what: 'endpoint',
          });
          const checkedUrl = await checkNewUrl(core, null, input.url);
          return db.transaction((tx) =>
            createEndpoint(core, tx, request.actor, application, { ...input, uid }, checkedUrl),
          );
        },
        update: async (current) => {
          const checkedUrl = await checkNewUrl(core, current, keepHeraldOwn(current, input).url);
          return db.transaction((tx) =>
            replaceEndpoint(
              core,
              tx,
              request.actor,
              current,
              (locked) => keepHeraldOwn(locked, input),
              checkedUrl,
            ),
          );
        },
        uidTaken: ENDPOINT_UID_TAKEN,
      });
      return reply.status(created ? 201 : 200).send(presentEndpoint(answer));
    });

    app.patch<{ Params: EpParams }>('/api/v1/app/:app_id/endpoint/:endpoint_id', async (request) => {
      const parsed = parseOrThrow(EndpointPatch, request.body);
      // The official SDKs send the throttle as `rateLimit`.
      const patch =
        parsed.throttleRate === undefined && parsed.rateLimit !== undefined
          ? { ...parsed, throttleRate: parsed.rateLimit }
          : parsed;
      const { endpoint } = await load(request.actor, request.params);
      const checkedUrl = await checkNewUrl(core, endpoint, patchToUpdate(endpoint, patch).url);
      const updated = await db
        .transaction((tx) =>
          replaceEndpoint(
            core,
            tx,
            request.actor,
            endpoint,
            (locked) => patchToUpdate(locked, patch),
            checkedUrl,
          ),
        )
        .catch(rethrowTakenUid(ENDPOINT_UID_TAKEN));
      return presentEndpoint(updated);
    });

    app.delete<{ Params: EpParams }>('/api/v1/app/:app_id/endpoint/:endpoint_id', async (request, reply) => {
      const { endpoint } = await load(request.actor, request.params);
      await deletionTransaction(db, async (tx) => {
        await purgeEndpointDeliveries(tx, endpoint.id);
        // Deleted meanwhile by another request: that one was audited and announced, not this one.
        if (!(await deleteEndpoint(tx, endpoint.id))) throw notFound('endpoint');
        await audit(tx, request.actor, 'endpoint.deleted', endpoint, {});
        await emitEndpointEvent(tx, 'endpoint.deleted', endpoint);
      });
      return reply.status(204).send();
    });

    app.get<{ Params: EpParams }>('/api/v1/app/:app_id/endpoint/:endpoint_id/secret', async (request) => {
      // Revealing a signing secret is an administrative act, whatever the HTTP method.
      if (!request.actor.scopes.includes('admin')) {
        throw new HeraldError('forbidden', "reading an endpoint secret needs the 'admin' scope");
      }
      const { endpoint } = await load(request.actor, request.params);
      return { key: await db.transaction((tx) => revealSecretTo(core, tx, request.actor, endpoint)) };
    });

    app.post<{ Params: EpParams }>(
      '/api/v1/app/:app_id/endpoint/:endpoint_id/secret/rotate',
      async (request, reply) => {
        const input = parseOrThrow(EndpointSecretRotateIn, request.body ?? {});
        const { endpoint } = await load(request.actor, request.params);
        return answerOnce(core, request, reply, async (tx) => {
          await rotateEndpointSecret(
            core,
            tx,
            request.actor,
            endpoint,
            input.key ?? null,
            input.gracePeriodSeconds ?? null,
          );
          return { status: 204 };
        });
      },
    );

    app.get<{ Params: EpParams }>('/api/v1/app/:app_id/endpoint/:endpoint_id/headers', async (request) => {
      const { endpoint } = await load(request.actor, request.params);
      const headers: Record<string, string> = {};
      const sensitive: string[] = [];
      for (const [name, value] of Object.entries(endpointHeaders(core, endpoint))) {
        if (SENSITIVE_HEADER.test(name)) sensitive.push(name);
        else headers[name] = value;
      }
      return { headers, sensitive };
    });

    app.put<{ Params: EpParams }>(
      '/api/v1/app/:app_id/endpoint/:endpoint_id/headers',
      async (request, reply) => {
        const input = parseOrThrow(EndpointHeadersIn, request.body);
        const { endpoint } = await load(request.actor, request.params);
        await db.transaction((tx) => replaceHeaders(core, tx, request.actor, endpoint, input.headers));
        return reply.status(204).send();
      },
    );

    app.patch<{ Params: EpParams }>(
      '/api/v1/app/:app_id/endpoint/:endpoint_id/headers',
      async (request, reply) => {
        const input = parseOrThrow(EndpointHeadersPatchIn, request.body);
        validateHeaders(input.headers);
        const { endpoint } = await load(request.actor, request.params);
        await db.transaction((tx) =>
          patchHeaders(core, tx, request.actor, endpoint.id, input.headers, input.deleteHeaders ?? []),
        );
        return reply.status(204).send();
      },
    );

    /**
     * A task over the endpoint's messages of a window (`since`, `until`): run, audited and lifting
     * the endpoint's rest in the call's transaction, and answered as Svix's background task,
     * finished — its id is this call's own (there is no task to look up later).
     */
    const windowTask = (
      path: string,
      body: typeof RecoverIn | typeof ReplayMissingIn,
      task: 'endpoint.recover' | 'endpoint.replay',
      action: string,
      run: (tx: Queryable, endpointId: string, since: Date, until: Date | null) => Promise<WindowTaskDone>,
    ) =>
      app.post<{ Params: EpParams }>(
        `/api/v1/app/:app_id/endpoint/:endpoint_id/${path}`,
        async (request, reply) => {
          const input = parseOrThrow(body, request.body);
          const { endpoint } = await load(request.actor, request.params);
          return answerOnce(core, request, reply, async (tx) => {
            const until = input.until ? new Date(input.until) : null;
            const done = await run(tx, endpoint.id, new Date(input.since), until);
            const { deliveries, more } = done;
            await audit(tx, request.actor, action, endpoint, {
              since: input.since,
              until: input.until ?? null,
              ...done,
            });
            // Sent now, not after a rest the endpoint's failures imposed. Last: it locks the
            // endpoint's slot until the commit (see the resend's).
            if (deliveries > 0) await liftEndpointPause(tx, endpoint.id);
            return {
              status: 202,
              body: {
                id: `qtask_${randomUUID().replaceAll('-', '')}`,
                status: 'finished',
                task,
                updatedAt: new Date(),
                deliveries,
                ...(more === undefined ? {} : { more }),
              },
            };
          });
        },
      );

    windowTask(
      'recover',
      RecoverIn,
      'endpoint.recover',
      'endpoint.recovered',
      async (tx, endpointId, since, until) => {
        const { restarted, leftForReview } = await recoverFailedDeliveries(tx, endpointId, since, until);
        return { deliveries: restarted, leftForReview };
      },
    );
    windowTask(
      'replay-missing',
      ReplayMissingIn,
      'endpoint.replay',
      'endpoint.missing_replayed',
      async (tx, ...window) => {
        const { made, more } = await replayMissingDeliveries(tx, ...window);
        return { deliveries: made, more };
      },
    );

    app.post<{ Params: EpParams }>(
      '/api/v1/app/:app_id/endpoint/:endpoint_id/send-example',
      async (request, reply) => {
        const input = parseOrThrow(EventExampleIn, request.body);
        const { application, endpoint } = await load(request.actor, request.params);
        return answerOnce(core, request, reply, async (tx) => {
          const message = await publishExample(
            tx,
            request.actor,
            application,
            endpoint.id,
            input.eventType,
            input.exampleIndex,
          );
          return { status: 200, body: presentMessage(message) };
        });
      },
    );

    app.get<{ Params: EpParams }>('/api/v1/app/:app_id/endpoint/:endpoint_id/stats', async (request) => {
      const window = parseOrThrow(StatsQuery, request.query, 'query');
      const { endpoint } = await load(request.actor, request.params);
      // Svix's window: until now, since 28 days before `until`, unless given.
      const until = window.until ?? new Date();
      const since = window.since ?? new Date(until.getTime() - STATS_DEFAULT_DAYS * 86_400_000);
      const stats = await historyReads.run(request.actor.id, () =>
        endpointStats(db, endpoint.id, { since, until }),
      );
      return { ...stats, canceled: 0 };
    });
  };
