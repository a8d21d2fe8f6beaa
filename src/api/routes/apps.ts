// Applications: /api/v1/app[/{app_id}] — id or uid in the path.

import type { FastifyPluginAsync } from 'fastify';
import { type AppFields, type AppRow, deleteApp, findApp, listApps, updateApp } from '../../db/apps.ts';
import { recordAudit } from '../../db/audit.ts';
import { deletionTransaction, purgeAppHistory } from '../../db/history-purge.ts';
import { appFieldsFrom, assertUidAllowed, createApp, isAppAllowed, requireApp } from '../../engine/apps.ts';
import type { Actor, Core } from '../../engine/core.ts';
import { HeraldError, invalidField, notFound } from '../../errors.ts';
import { emitAppEndpointsDeleted } from '../../ops/operational-webhooks.ts';
import { ApplicationIn, ApplicationPatch, ID_PREFIX } from '../../schemas/svix.ts';
import { parseOrThrow, uidFromPath } from '../../schemas/validate.ts';
import { answerOnce } from '../idempotency.ts';
import { presentApp, presentPage } from '../present.ts';
import { flagReader, parseListQuery } from '../query.ts';
import { conflictOnTakenUid, createOrUpdateByPath, isUniqueViolation } from '../uid-conflict.ts';

const readGetIfExists = flagReader('get_if_exists', false);
// The Svix SDKs' filters of the app list. herald has no Svix Play endpoints: excluding apps with
// them excludes none. Which apps "have disabled endpoints" is not said anywhere herald could
// follow: refused by name rather than guessed.
const readWithoutEndpoints = flagReader('exclude_apps_with_no_endpoints', false);
const readWithoutDisabled = flagReader('exclude_apps_with_disabled_endpoints', false);

type AppParams = { app_id: string };

const APP_UID_TAKEN = 'an application with this uid already exists';

export const appRoutes =
  (core: Core): FastifyPluginAsync =>
  async (app) => {
    const { db } = core;
    // The audit names the fields that changed, never their values (metadata may hold anything).
    const updateAudited = async (actor: Actor, current: AppRow, fields: AppFields) => {
      assertUidAllowed(actor, fields.uid, current);
      const updated = await db.transaction(async (tx) => {
        const row = await updateApp(tx, current.id, fields);
        const changed = (['uid', 'name', 'throttleRate', 'metadata', 'retentionDays'] as const).filter(
          (f) => JSON.stringify(current[f]) !== JSON.stringify(row[f]),
        );
        await recordAudit(tx, {
          actor: actor.id,
          action: 'app.updated',
          appId: row.id,
          targetType: 'app',
          targetId: row.id,
          details: { changed },
        });
        return row;
      });
      core.appChanged(current.id);
      return updated;
    };

    app.get('/api/v1/app', async (request) => {
      const q = parseListQuery(request.query, 'ascending', 'app');
      if (readWithoutDisabled(request.query)) {
        throw invalidField(['exclude_apps_with_disabled_endpoints'], 'not supported', 'query');
      }
      const withEndpointsOnly = readWithoutEndpoints(request.query);
      return presentPage(await listApps(db, q.page, request.actor.appIds, withEndpointsOnly), presentApp);
    });

    app.post('/api/v1/app', async (request, reply) => {
      const input = parseOrThrow(ApplicationIn, request.body);
      const getIfExists = readGetIfExists(request.query);
      // The existing app is shown only to a key allowed to see it: get_if_exists is no way round
      // a key's restriction to some applications, nor a way to learn which uids are taken (such
      // a key cannot create applications: it is refused below as for a uid nobody has).
      const existingAllowed = async (uid: string) => {
        const existing = await findApp(db, uid);
        return existing && isAppAllowed(request.actor, existing.id) ? existing : null;
      };
      if (getIfExists && input.uid) {
        const existing = await existingAllowed(input.uid);
        if (existing) return reply.status(200).send(presentApp(existing));
      }
      if (request.actor.appIds !== null)
        throw new HeraldError('forbidden', 'this API key cannot create applications');
      try {
        return await answerOnce(core, request, reply, async (tx) => ({
          status: 201,
          body: presentApp(await createApp(tx, request.actor, appFieldsFrom(input))),
        }));
      } catch (error) {
        if (!isUniqueViolation(error)) throw error;
        // Two creators raced on one uid: with get_if_exists the loser gets the winner's app.
        const existing = getIfExists && input.uid ? await existingAllowed(input.uid) : null;
        if (existing) return reply.status(200).send(presentApp(existing));
        throw new HeraldError('conflict', APP_UID_TAKEN);
      }
    });

    app.get<{ Params: AppParams }>('/api/v1/app/:app_id', async (request) =>
      presentApp(await requireApp(db, request.actor, request.params.app_id)),
    );

    app.put<{ Params: AppParams }>('/api/v1/app/:app_id', async (request, reply) => {
      const input = parseOrThrow(ApplicationIn, request.body);
      const fields = appFieldsFrom(input);
      const { created, answer } = await createOrUpdateByPath({
        find: () => findApp(db, request.params.app_id),
        // Svix: PUT creates the app when it does not exist, under the path's uid. A key restricted
        // to some apps creates none; to it, a uid nobody has is not found, as one that another
        // tenant has (requireApp, below).
        create: async () => {
          if (request.actor.appIds !== null) throw notFound('application');
          const uid = uidFromPath(request.params.app_id, fields.uid, {
            idPrefix: ID_PREFIX.app,
            what: 'application',
          });
          return db.transaction((tx) => createApp(tx, request.actor, { ...fields, uid }));
        },
        update: async (existing) => {
          await requireApp(db, request.actor, existing.id);
          // A body without `uid` keeps the app's uid: the path may be that very uid, and losing it
          // would make the app unreachable by the address the caller just used. Without
          // `retentionDays` (herald's own field, which Svix's SDKs never send) the app keeps its
          // retention: an SDK's update must not shorten or lengthen how long payloads are kept.
          return updateAudited(request.actor, existing, {
            ...fields,
            uid: input.uid === undefined ? existing.uid : fields.uid,
            retentionDays: input.retentionDays === undefined ? existing.retentionDays : fields.retentionDays,
          });
        },
        uidTaken: APP_UID_TAKEN,
      });
      return reply.status(created ? 201 : 200).send(presentApp(answer));
    });

    app.patch<{ Params: AppParams }>('/api/v1/app/:app_id', async (request) => {
      const input = parseOrThrow(ApplicationPatch, request.body);
      const current = await requireApp(db, request.actor, request.params.app_id);
      const throttleRate = input.throttleRate !== undefined ? input.throttleRate : input.rateLimit;
      return presentApp(
        await conflictOnTakenUid(APP_UID_TAKEN, () =>
          updateAudited(request.actor, current, {
            uid: input.uid === undefined ? current.uid : input.uid,
            name: input.name ?? current.name,
            throttleRate: throttleRate === undefined ? current.throttleRate : throttleRate,
            metadata: input.metadata ?? current.metadata,
            retentionDays: input.retentionDays === undefined ? current.retentionDays : input.retentionDays,
          }),
        ),
      );
    });

    app.delete<{ Params: AppParams }>('/api/v1/app/:app_id', async (request, reply) => {
      const current = await requireApp(db, request.actor, request.params.app_id);
      await deletionTransaction(db, async (tx) => {
        await purgeAppHistory(tx, current.id);
        // Deleted meanwhile by another request: that one was audited, not this one.
        const deleted = await deleteApp(tx, current.id);
        if (!deleted) throw notFound('application');
        await emitAppEndpointsDeleted(tx, { id: current.id, uid: deleted.uid }, deleted.endpoints);
        await recordAudit(tx, {
          actor: request.actor.id,
          action: 'app.deleted',
          appId: current.id,
          targetType: 'app',
          targetId: current.id,
        });
      });
      core.appChanged(current.id);
      return reply.status(204).send();
    });
  };
