// Endpoints: where a tenant's messages go, and the state that guards them (disabled, failures).

import type { StoredHeaders } from '../crypto/sealed-headers.ts';
import { retriesDueNow, SLOT_RESTING } from './deliveries.ts';
import { type PageRequest, pageQuery, toPage } from './pagination.ts';
import type { Queryable } from './port.ts';
import { firstIdAt } from './time-ids.ts';

export type DisabledReason = 'operator' | 'failures' | 'gone';
export type ClientErrorPolicy = 'retry' | 'dead-letter';

export interface EndpointRow {
  id: string;
  appId: string;
  uid: string | null;
  url: string;
  description: string;
  version: number;
  throttleRate: number | null;
  filterTypes: string[] | null;
  channels: string[] | null;
  /** Sealed (crypto/sealed-headers.ts): openHeaders reads them. */
  headers: StoredHeaders;
  metadata: Record<string, string>;
  disabled: boolean;
  disabledReason: DisabledReason | null;
  consecutiveFailures: number;
  idempotent: boolean;
  clientErrorPolicy: ClientErrorPolicy;
  credentialsRejectedAt: Date | null;
  /** Until when it rests after failures or a Retry-After (migration 0032); null: not resting. */
  restingUntil: Date | null;
  createdAt: Date;
  updatedAt: Date;
}

export interface EndpointFields {
  uid: string | null;
  url: string;
  description: string;
  version: number;
  throttleRate: number | null;
  filterTypes: string[] | null;
  channels: string[] | null;
  metadata: Record<string, string>;
  disabled: boolean;
  idempotent: boolean;
  clientErrorPolicy: ClientErrorPolicy;
}

/** An endpoint's own columns, its headers (as stored: StoredHeaders) read from the SQL `headers`. */
const ownColumns = (
  headers: string,
) => `id, app_id as "appId", uid, url, description, version, throttle_rate as "throttleRate",
  filter_types as "filterTypes", channels, ${headers} as headers, metadata, disabled, disabled_reason as "disabledReason",
  consecutive_failures as "consecutiveFailures", idempotent, client_error_policy as "clientErrorPolicy",
  credentials_rejected_at as "credentialsRejectedAt", created_at as "createdAt", updated_at as "updatedAt"`;

const COLUMNS = `${ownColumns('sealed_headers')},
  (select s.next_start_at from delivery_lease s where s.endpoint_id = endpoint.id and ${SLOT_RESTING})
    as "restingUntil"`;

export async function insertEndpoint(db: Queryable, appId: string, f: EndpointFields): Promise<EndpointRow> {
  const result = await db.query<EndpointRow>(
    `insert into endpoint (app_id, uid, url, description, version, throttle_rate, filter_types, channels,
        metadata, disabled, disabled_reason, idempotent, client_error_policy)
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, case when $10 then 'operator' end, $11, $12)
     -- A new endpoint has no slot yet, so no rest; no headers either: the column keeps its default,
     -- unnamed, so that an endpoint can be made in a database of any migration (an upgrade's).
     returning ${ownColumns(`'{}'::jsonb`)}, null::timestamptz as "restingUntil"`,
    [
      appId,
      f.uid,
      f.url,
      f.description,
      f.version,
      f.throttleRate,
      f.filterTypes,
      f.channels,
      JSON.stringify(f.metadata),
      f.disabled,
      f.idempotent,
      f.clientErrorPolicy,
    ],
  );
  return result.rows[0]!;
}

export async function findEndpoint(
  db: Queryable,
  appId: string,
  idOrUid: string,
): Promise<EndpointRow | null> {
  const result = await db.query<EndpointRow>(
    // The endpoint whose id it is, else whose uid: a uid may look like another endpoint's id.
    `select ${COLUMNS} from endpoint where app_id = $1 and (id = $2 or uid = $2) order by id = $2 desc limit 1`,
    [appId, idOrUid],
  );
  return result.rows[0] ?? null;
}

/**
 * The endpoint's row, locked until the transaction ends: a change computed from it cannot undo one
 * made since it was last read (a worker's auto-disable).
 */
export async function lockEndpoint(tx: Queryable, id: string): Promise<EndpointRow | null> {
  const result = await tx.query<EndpointRow>(`select ${COLUMNS} from endpoint where id = $1 for update`, [
    id,
  ]);
  return result.rows[0] ?? null;
}

/** Lists an app's endpoints; with `messageId`, only those the message has a delivery for. */
export async function listEndpoints(
  db: Queryable,
  appId: string,
  page: PageRequest,
  messageId: string | null = null,
) {
  const q = pageQuery('id', page, 2);
  const result = await db.query<EndpointRow>(
    `select ${COLUMNS} from endpoint
      where app_id = $1 and ${q.condition}
        and ($3::text is null or id in (select endpoint_id from delivery where message_id = $3))
      order by ${q.orderBy} limit ${q.fetch}`,
    [appId, q.param, messageId],
  );
  return toPage(result.rows, page, q, (r) => r.id);
}

/**
 * Writes the endpoint's fields. Enabled again, its failures are forgiven (its failure count starts
 * afresh; its deliveries keep their budgets) and its deliveries waiting to retry are due now
 * (retriesDueNow); sent to a new URL, its failures and refused credentials, which were the old
 * URL's, are forgiven too. Disabling through the API records the operator as the reason;
 * re-enabling clears any reason.
 */
export async function updateEndpoint(db: Queryable, id: string, f: EndpointFields): Promise<EndpointRow> {
  const result = await db.query<EndpointRow & { wasDisabled: boolean }>(
    `update endpoint set uid = $2, url = $3, description = $4, version = $5, throttle_rate = $6,
        filter_types = $7, channels = $8, metadata = $9,
        disabled_reason = case when not $10 then null when disabled then disabled_reason else 'operator' end,
        consecutive_failures = case when (disabled and not $10) or url <> $3 then 0 else consecutive_failures end,
        credentials_rejected_at = case when url <> $3 then null else credentials_rejected_at end,
        disabled = $10, idempotent = $11, client_error_policy = $12, updated_at = now()
      from (select disabled as was_disabled from endpoint where id = $1) prior
      where id = $1 returning ${COLUMNS}, prior.was_disabled as "wasDisabled"`,
    [
      id,
      f.uid,
      f.url,
      f.description,
      f.version,
      f.throttleRate,
      f.filterTypes,
      f.channels,
      JSON.stringify(f.metadata),
      f.disabled,
      f.idempotent,
      f.clientErrorPolicy,
    ],
  );
  const { wasDisabled, ...row } = result.rows[0]!;
  if (wasDisabled && !row.disabled) await retriesDueNow(db, id);
  return row;
}

/** Sets an endpoint's headers, sealed (sealHeaders). */
export async function setEndpointHeaders(db: Queryable, id: string, headers: StoredHeaders) {
  await db.query('update endpoint set sealed_headers = $2, updated_at = now() where id = $1', [
    id,
    JSON.stringify(headers),
  ]);
}

/**
 * Run it in a transaction. Its delivery in flight is locked first, then the endpoint: the order an
 * outcome write takes them in (the delivery and its slot, then the endpoint's failure count). The
 * delete's cascade took them the other way round, and one that met an outcome write in between
 * deadlocked with it — PostgreSQL then aborted one: the delete, or the whole batch of outcomes.
 * Whether it deleted the endpoint: a concurrent delete may have, first.
 */
export async function deleteEndpoint(db: Queryable, id: string): Promise<boolean> {
  await db.query(`select 1 from delivery where endpoint_id = $1 and state = 'sending' for update`, [id]);
  return (await db.query('delete from endpoint where id = $1', [id])).rowCount === 1;
}

export interface EndpointStatsRow {
  pending: number;
  sending: number;
  success: number;
  fail: number;
}

/**
 * The endpoint's deliveries by state, of the messages published in [since, until). A message's
 * id tells when it was published (time-ids.ts; to the millisecond, as Svix's ids do), and the
 * endpoint's deliveries are indexed by it: a window reads its own deliveries, not the endpoint's
 * whole history.
 */
export async function endpointStats(
  db: Queryable,
  endpointId: string,
  window: { since: Date; until: Date },
): Promise<EndpointStatsRow> {
  const result = await db.query<EndpointStatsRow>(
    `select count(*) filter (where state = 'pending')::int as pending,
            count(*) filter (where state = 'sending')::int as sending,
            count(*) filter (where state = 'succeeded')::int as success,
            count(*) filter (where state = 'failed')::int as fail
       from delivery
      where endpoint_id = $1
        and message_id >= ${firstIdAt('msg', '$2::timestamptz')} and message_id < ${firstIdAt('msg', '$3::timestamptz')}`,
    [endpointId, window.since, window.until],
  );
  return result.rows[0]!;
}
