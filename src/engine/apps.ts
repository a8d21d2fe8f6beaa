// Resolving an app from a path segment (id or uid), within what the actor may touch.

import type { AppFields, AppRow } from '../db/apps.ts';
import { findApp, insertApp } from '../db/apps.ts';
import { recordAudit } from '../db/audit.ts';
import type { Queryable } from '../db/port.ts';
import { HeraldError, invalidField, notFound } from '../errors.ts';
import type { Actor } from './core.ts';

/** The operator app's uid (operational webhooks, ops/operator-app.ts). */
export const OPERATOR_APP_UID = 'herald-operator';
/** The audit log's name for herald acting on its own behalf. */
export const HERALD_ACTOR_ID = 'herald';

/**
 * Who may give an app (`current`, when it exists) this uid:
 * - herald alone gives the operator app's uid: the app holding it receives every app's
 *   operational events (their apps, endpoints and messages), so a key that could give its own app
 *   that uid would read them all. The app that holds it already (the operator app) keeps it;
 * - a key restricted to some apps changes no app's uid: uids are unique across every app, and the
 *   refusal of a taken one would tell it which uids other tenants use.
 */
export function assertUidAllowed(actor: Actor, uid: string | null, current?: AppRow): void {
  const reserved =
    uid === OPERATOR_APP_UID && actor.id !== HERALD_ACTOR_ID && current?.uid !== OPERATOR_APP_UID;
  if (reserved) throw invalidField(['uid'], `"${OPERATOR_APP_UID}" is reserved for herald's operator app`);
  if (current && actor.appIds !== null && uid !== current.uid) {
    throw new HeraldError('forbidden', "changing an application's uid needs a key not restricted to some");
  }
}

export async function requireApp(db: Queryable, actor: Actor, idOrUid: string): Promise<AppRow> {
  const app = await findApp(db, idOrUid);
  if (!app) throw notFound('application');
  assertAppAllowed(actor, app.id);
  return app;
}

export function isAppAllowed(actor: Actor, appId: string): boolean {
  return actor.appIds === null || actor.appIds.includes(appId);
}

/**
 * What a key restricted to some apps may not reach does not exist for it: the same 404 as for an
 * app (or the source, endpoint, … of one) that nobody has, so that no key learns which ids or
 * uids another tenant uses.
 */
export function assertAppAllowed(actor: Actor, appId: string, what = 'application'): void {
  if (!isAppAllowed(actor, appId)) throw notFound(what);
}

/**
 * What a publish may reach: an app within the actor's reach, and the operator app only for herald
 * and admin keys. The operator app's messages are herald's operational events, signed with its
 * endpoint's secret: a publish key (a product's) that could post there would forge alerts the
 * operator's receiver cannot tell from herald's. An admin key may (it can read that secret anyway).
 */
export function assertPublishAllowed(actor: Actor, app: AppRow): void {
  assertAppAllowed(actor, app.id);
  if (app.uid === OPERATOR_APP_UID && actor.id !== HERALD_ACTOR_ID && !actor.scopes.includes('admin')) {
    throw new HeraldError(
      'forbidden',
      "the operator app's messages are herald's own; publishing there needs the 'admin' scope",
    );
  }
}

/** Svix's application input → stored fields (`rateLimit` is the SDK's name for throttleRate). */
export function appFieldsFrom(input: {
  uid?: string | null | undefined;
  name: string;
  throttleRate?: number | null | undefined;
  rateLimit?: number | null | undefined;
  metadata?: Record<string, string> | undefined;
  retentionDays?: number | null | undefined;
}): AppFields {
  return {
    uid: input.uid ?? null,
    name: input.name,
    throttleRate: input.throttleRate ?? input.rateLimit ?? null,
    metadata: input.metadata ?? {},
    retentionDays: input.retentionDays ?? null,
  };
}

export async function auditAppCreated(tx: Queryable, actor: Actor, app: AppRow): Promise<void> {
  await recordAudit(tx, {
    actor: actor.id,
    action: 'app.created',
    appId: app.id,
    targetType: 'app',
    targetId: app.id,
  });
}

export async function createApp(tx: Queryable, actor: Actor, fields: AppFields): Promise<AppRow> {
  assertUidAllowed(actor, fields.uid);
  const app = await insertApp(tx, fields);
  await auditAppCreated(tx, actor, app);
  return app;
}
