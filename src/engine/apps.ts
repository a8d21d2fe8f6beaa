// Resolving an app from a path segment (id or uid), within what the actor may touch.

import type { AppRow } from '../db/apps.ts';
import { findApp } from '../db/apps.ts';
import type { Queryable } from '../db/port.ts';
import { HeraldError, notFound } from '../errors.ts';
import type { Actor } from './core.ts';

export async function requireApp(db: Queryable, actor: Actor, idOrUid: string): Promise<AppRow> {
  const app = await findApp(db, idOrUid);
  if (!app) throw notFound('application');
  assertAppAllowed(actor, app.id);
  return app;
}

export function assertAppAllowed(actor: Actor, appId: string): void {
  if (actor.appIds !== null && !actor.appIds.includes(appId)) {
    throw new HeraldError('forbidden', 'this API key is not allowed to access this application');
  }
}
