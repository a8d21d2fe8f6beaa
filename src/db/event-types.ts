// Event types: a name, a description, optional JSON schemas, and an archived flag.

import { type PageRequest, pageQuery, toPage } from './pagination.ts';
import type { Queryable } from './port.ts';

export interface EventTypeRow {
  name: string;
  description: string;
  schemas: Record<string, unknown> | null;
  archived: boolean;
  deprecated: boolean;
  featureFlag: string | null;
  createdAt: Date;
  updatedAt: Date;
}

export type EventTypeFields = Omit<EventTypeRow, 'createdAt' | 'updatedAt'>;

const COLUMNS = `name, description, schemas, archived, deprecated, feature_flag as "featureFlag",
  created_at as "createdAt", updated_at as "updatedAt"`;

/**
 * Inserts, or takes the place of an archived type of that name (Svix's create "creates or
 * unarchives"); null when the name is taken by a type in use.
 */
export async function insertEventType(
  db: Queryable,
  f: EventTypeFields,
): Promise<{ row: EventTypeRow; created: boolean } | null> {
  const result = await db.query<EventTypeRow & { created: boolean }>(
    `insert into event_type (name, description, schemas, archived, deprecated, feature_flag)
     values ($1, $2, $3, $4, $5, $6)
     on conflict (name) do update set description = excluded.description, schemas = excluded.schemas,
       archived = excluded.archived, deprecated = excluded.deprecated, feature_flag = excluded.feature_flag,
       updated_at = now()
       where event_type.archived
     returning ${COLUMNS}, (xmax = 0) as created`,
    [f.name, f.description, f.schemas && JSON.stringify(f.schemas), f.archived, f.deprecated, f.featureFlag],
  );
  if (!result.rows[0]) return null;
  const { created, ...row } = result.rows[0];
  return { row, created };
}

export async function upsertEventType(
  db: Queryable,
  f: EventTypeFields,
): Promise<{ row: EventTypeRow; created: boolean }> {
  const result = await db.query<EventTypeRow & { created: boolean }>(
    `insert into event_type (name, description, schemas, archived, deprecated, feature_flag)
     values ($1, $2, $3, $4, $5, $6)
     on conflict (name) do update set description = excluded.description, schemas = excluded.schemas,
       archived = excluded.archived, deprecated = excluded.deprecated, feature_flag = excluded.feature_flag,
       updated_at = now()
     returning ${COLUMNS}, (xmax = 0) as created`,
    [f.name, f.description, f.schemas && JSON.stringify(f.schemas), f.archived, f.deprecated, f.featureFlag],
  );
  const { created, ...row } = result.rows[0]!;
  return { row, created };
}

/** `lock`: the row locked until the transaction ends, for a change computed from it. */
export async function findEventType(
  db: Queryable,
  name: string,
  { lock = false } = {},
): Promise<EventTypeRow | null> {
  const result = await db.query<EventTypeRow>(
    `select ${COLUMNS} from event_type where name = $1${lock ? ' for update' : ''}`,
    [name],
  );
  return result.rows[0] ?? null;
}

export async function listEventTypes(db: Queryable, page: PageRequest, includeArchived: boolean) {
  const q = pageQuery('name', page, 1);
  const result = await db.query<EventTypeRow>(
    `select ${COLUMNS} from event_type where ${q.condition} and ($2 or not archived)
      order by ${q.orderBy} limit ${q.fetch}`,
    [q.param, includeArchived],
  );
  return toPage(result.rows, page, q, (r) => r.name);
}

/** Svix deletes an event type by archiving it (messages may still refer to it). */
export async function archiveEventType(db: Queryable, name: string): Promise<boolean> {
  const result = await db.query('update event_type set archived = true, updated_at = now() where name = $1', [
    name,
  ]);
  return result.rowCount > 0;
}

export async function expungeEventType(db: Queryable, name: string): Promise<boolean> {
  const result = await db.query('delete from event_type where name = $1', [name]);
  return result.rowCount > 0;
}
