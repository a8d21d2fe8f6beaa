// Start-up side of operational webhooks: with HERALD_OPERATOR_WEBHOOK_URL set, make sure the
// operator application (uid `herald-operator`) exists with one endpoint at that URL, signed with
// HERALD_OPERATOR_WEBHOOK_SECRET when given. Idempotent, and safe when several processes start at
// once (one advisory lock); a changed URL or secret is applied to the existing endpoint.

import { urlOrigin } from '../config.ts';
import { findApp } from '../db/apps.ts';
import { type EndpointRow, listEndpoints } from '../db/endpoints.ts';
import type { Queryable } from '../db/port.ts';
import { createApp, HERALD_ACTOR_ID, OPERATOR_APP_UID } from '../engine/apps.ts';
import type { Actor, Core } from '../engine/core.ts';
import {
  createEndpoint,
  patchToUpdate,
  replaceEndpoint,
  revealSecret,
  rotateEndpointSecret,
} from '../engine/endpoints.ts';
import { ConfigError, HeraldError } from '../errors.ts';
import { EndpointIn } from '../schemas/svix.ts';
import { parseOrThrow } from '../schemas/validate.ts';

const HERALD_ACTOR: Actor = { id: HERALD_ACTOR_ID, scopes: ['admin'], appIds: null };
/** Arbitrary constant shared by every herald process: serialises concurrent start-ups. */
const ENSURE_LOCK_KEY = 727_100_2;

export interface OperatorWebhooks {
  appId: string;
  endpointId: string;
}

/**
 * The operator app and its endpoint as they are, whatever this process's configuration says (a
 * worker's may lack the URL that an API's start-up set up); null when there is none.
 */
export async function findOperatorWebhooks(core: Core): Promise<OperatorWebhooks | null> {
  const app = await findApp(core.db, OPERATOR_APP_UID);
  const endpoint = app && (await operatorEndpoint(core.db, app.id));
  return app && endpoint ? { appId: app.id, endpointId: endpoint.id } : null;
}

/** The operator app's one endpoint (the first, should an operator have added others). */
async function operatorEndpoint(db: Queryable, appId: string): Promise<EndpointRow | undefined> {
  const page = await listEndpoints(db, appId, { limit: 1, iterator: null, order: 'ascending' });
  return page.data[0];
}

/** Ensures the operator app and its endpoint; null when operational webhooks are not configured. */
export async function ensureOperatorWebhooks(core: Core): Promise<OperatorWebhooks | null> {
  const { operatorWebhookUrl: url, operatorWebhookSecret: secret } = core.config;
  if (!url) return null;
  try {
    return await core.db.transaction(async (tx) => {
      await tx.query('select pg_advisory_xact_lock($1)', [ENSURE_LOCK_KEY]);
      const app =
        (await findApp(tx, OPERATOR_APP_UID)) ??
        (await createApp(tx, HERALD_ACTOR, {
          uid: OPERATOR_APP_UID,
          name: 'herald operator',
          throttleRate: null,
          metadata: {},
          retentionDays: null,
        }));
      const current = await operatorEndpoint(tx, app.id);
      if (!current) {
        const input = parseOrThrow(EndpointIn, {
          url,
          description: 'herald operational webhooks',
          ...(secret ? { secret } : {}),
        });
        const created = await createEndpoint(core, tx, HERALD_ACTOR, app, input);
        return { appId: app.id, endpointId: created.id };
      }
      // Disabled by a worker (before workers exempted it, or for a 410): the channel that would
      // have told of it is the one that went quiet. Enabled again; one an operator disabled stays.
      const autoDisabled = current.disabled && current.disabledReason !== 'operator';
      if (current.url !== url || autoDisabled) {
        if (autoDisabled)
          core.log.warn(
            { endpointId: current.id, reason: current.disabledReason },
            'the operational webhooks endpoint was disabled by herald; enabling it again',
          );
        await replaceEndpoint(core, tx, HERALD_ACTOR, current, (locked) =>
          patchToUpdate(locked, { url, ...(autoDisabled ? { disabled: false } : {}) }),
        );
      }
      if (secret && (await revealSecret(core, tx, current)) !== secret) {
        // The old secret keeps signing for the usual grace period, so a receiver can switch over.
        await rotateEndpointSecret(core, tx, HERALD_ACTOR, current, secret, null).catch((error: unknown) => {
          // Processes started with different secrets rotate it at each start: past the limit of
          // previous secrets, none would start again. The secret in use stays, and the log says why.
          if (!(error instanceof HeraldError && error.kind === 'limit_reached')) throw error;
          core.log.error(
            { variable: 'HERALD_OPERATOR_WEBHOOK_SECRET', err: error.message },
            'the operational webhooks secret was not changed: do processes start with different secrets?',
          );
        });
      }
      return { appId: app.id, endpointId: current.id };
    });
  } catch (error) {
    // The usual cause is a URL the destination policy refuses: say which variable to fix.
    if (error instanceof HeraldError && error.kind === 'validation') {
      throw new ConfigError(
        'HERALD_OPERATOR_WEBHOOK_URL',
        `a URL herald may deliver to (${error.message})`,
        urlOrigin(url),
      );
    }
    throw error;
  }
}
