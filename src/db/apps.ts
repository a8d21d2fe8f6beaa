// Applications (tenants). Every path that takes an app accepts its id or its uid.

import type { Page, PageRequest } from './pagination.ts';
import { pageQuery, toPage } from './pagination.ts';
import type { Queryable } from './port.ts';

export interface AppRow {
  id: string;
  uid: string | null;
  name: string;
  throttleRate: number | null;
  metadata: Record<string, string>;
  retentionDays: number | null;
  createdAt: Date;
  updatedAt: Date;
}

export interface AppFields {
  uid: string | null;
  name: string;
  throttleRate: number | null;
  metadata: Record<string, string>;
  retentionDays: number | null;
}

const COLUMNS = `id, uid, name, throttle_rate as "throttleRate", metadata, retention_days as "retentionDays",
  created_at as "createdAt",
  updated_at as "updatedAt"`;

export async function insertApp(db: Queryable, fields: AppFields): Promise<AppRow> {
  const result = await db.query<AppRow>(
    `insert into app (uid, name, throttle_rate, metadata, retention_days) values ($1, $2, $3, $4, $5)
     returning ${COLUMNS}`,
    [fields.uid, fields.name, fields.throttleRate, JSON.stringify(fields.metadata), fields.retentionDays],
  );
  return result.rows[0]!;
}

/** Inserts unless the uid is taken; null when it was (a concurrent creator won). */
export async function insertAppIfAbsent(db: Queryable, fields: AppFields): Promise<AppRow | null> {
  const result = await db.query<AppRow>(
    `insert into app (uid, name, throttle_rate, metadata, retention_days) values ($1, $2, $3, $4, $5)
     on conflict (uid) do nothing returning ${COLUMNS}`,
    [fields.uid, fields.name, fields.throttleRate, JSON.stringify(fields.metadata), fields.retentionDays],
  );
  return result.rows[0] ?? null;
}

/** Announces the id of every app created, changed or deleted, at commit (migration 0006). */
export const APP_CHANGED_CHANNEL = 'herald_app_changed';

/** The app whose id is `idOrUid`, else whose uid it is. */
export async function findApp(db: Queryable, idOrUid: string): Promise<AppRow | null> {
  return (await findApps(db, [idOrUid])).get(idOrUid) ?? null;
}

/** Apps by id or uid, many at once: each reference maps to the app whose id it is, else whose uid. */
export async function findApps(db: Queryable, idsOrUids: readonly string[]): Promise<Map<string, AppRow>> {
  const result = await db.query<AppRow>(
    `select ${COLUMNS} from app where id = any($1) or uid = any($1)`,
    [idsOrUids],
    'find_apps',
  );
  const byId = new Map(result.rows.map((a) => [a.id, a]));
  const byUid = new Map(result.rows.filter((a) => a.uid !== null).map((a) => [a.uid!, a]));
  const found = new Map<string, AppRow>();
  for (const ref of idsOrUids) {
    const app = byId.get(ref) ?? byUid.get(ref);
    if (app) found.set(ref, app);
  }
  return found;
}

/** `withEndpointsOnly`: only apps that have an endpoint (Svix's exclude_apps_with_no_endpoints). */
export async function listApps(
  db: Queryable,
  page: PageRequest,
  allowedAppIds: readonly string[] | null,
  withEndpointsOnly = false,
) {
  const q = pageQuery('id', page, 1);
  const result = await db.query<AppRow>(
    `select ${COLUMNS} from app where ${q.condition} and ($2::text[] is null or id = any($2))
        and (not $3 or exists (select 1 from endpoint e where e.app_id = app.id))
      order by ${q.orderBy} limit ${q.fetch}`,
    [q.param, allowedAppIds, withEndpointsOnly],
  );
  return toPage(result.rows, page, q, (r) => r.id) satisfies Page<AppRow>;
}

export async function updateApp(db: Queryable, id: string, fields: AppFields): Promise<AppRow> {
  const result = await db.query<AppRow>(
    `update app set uid = $2, name = $3, throttle_rate = $4, metadata = $5, retention_days = $6, updated_at = now()
      where id = $1 returning ${COLUMNS}`,
    [id, fields.uid, fields.name, fields.throttleRate, JSON.stringify(fields.metadata), fields.retentionDays],
  );
  return result.rows[0]!;
}

/** An app as its deletion found it under its lock, and the endpoints that went with it. */
export interface DeletedApp {
  uid: string | null;
  endpoints: { id: string; uid: string | null }[];
}

/**
 * Run it in a transaction: its deliveries in flight are locked first, as deleteEndpoint does.
 * null when the app was deleted meanwhile. Its endpoints are read under the app's row lock: no
 * endpoint can be created in the app from then on (its insert waits for the lock, then finds no
 * app), so every endpoint the deletion takes is among them.
 */
export async function deleteApp(db: Queryable, id: string): Promise<DeletedApp | null> {
  await db.query(
    `select 1 from delivery
      where endpoint_id in (select e.id from endpoint e where e.app_id = $1) and state = 'sending'
      for update of delivery`,
    [id],
  );
  const locked = await db.query<{ uid: string | null }>('select uid from app where id = $1 for update', [id]);
  if (!locked.rows[0]) return null;
  const endpoints = await db.query<DeletedApp['endpoints'][number]>(
    'select id, uid from endpoint where app_id = $1 order by id',
    [id],
  );
  await db.query('delete from app where id = $1', [id]);
  return { uid: locked.rows[0].uid, endpoints: endpoints.rows };
}
