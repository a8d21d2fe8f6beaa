// Every secret herald keeps sealed under the master key, column by column: endpoint signing
// secrets and endpoint headers (bound to their endpoint), inbound source secrets and the SNS
// subscription tokens kept for the operator (bound to their source). Re-encryption walks them
// all, and a start checks that its keys open the newest of each: a column left out would be
// unreadable once the old key is dropped.

import { headersBinding } from '../crypto/sealed-headers.ts';
import type { Queryable } from './port.ts';

/** Where one kind of sealed secret lives, and how a run reads and replaces it. */
export interface SealedColumn {
  /** How reports and the audit name it. */
  name: string;
  /** Its table and column: a database behind its migrations may not have them yet. */
  table: string;
  column: string;
  /** One page in key order after key $1, at most $2 rows: key, "ownerId", sealed. */
  page: string;
  /** Replaces row $1's sealed value by $3, only if it still holds $2 (a rotation may have won). */
  reseal: string;
  /** The newest sealed value (sealed), if any. */
  newest: string;
  /** Before every key. */
  firstKey: string | number;
  /** The additional data a secret of `ownerId` is sealed to. */
  binding(ownerId: string): string;
  /** The sealed bytes of what `page` and `newest` read. */
  read(value: unknown): Buffer;
  /** What `reseal` is given for sealed bytes. */
  stored(sealed: Buffer): unknown;
}

/** A table of its own, one sealed bytea per row, bound to the id in its `owner` column. */
function sealedTable(table: string, owner: string): SealedColumn {
  return {
    name: table,
    table,
    column: 'sealed',
    page: `select id::int as key, ${owner} as "ownerId", sealed from ${table} where id > $1 order by id limit $2`,
    reseal: `update ${table} set sealed = $3 where id = $1 and sealed = $2`,
    newest: `select sealed from ${table} order by id desc limit 1`,
    firstKey: 0,
    binding: (ownerId) => ownerId,
    // PGlite reads bytea as a Uint8Array, pg as a Buffer.
    read: (value) => Buffer.from(value as Uint8Array),
    stored: (sealed) => sealed,
  };
}

/** Sealed headers are a base64 string in the endpoint's jsonb column (crypto/sealed-headers.ts). */
const SEALED_HEADERS = `jsonb_typeof(sealed_headers) = 'string'`;

export const SEALED_COLUMNS: readonly SealedColumn[] = [
  sealedTable('endpoint_secret', 'endpoint_id'),
  {
    name: 'endpoint_headers',
    table: 'endpoint',
    column: 'sealed_headers',
    page: `select id as key, id as "ownerId", sealed_headers #>> '{}' as sealed from endpoint
            where id > $1 and ${SEALED_HEADERS} order by id limit $2`,
    reseal: `update endpoint set sealed_headers = $3 where id = $1 and sealed_headers = $2`,
    newest: `select sealed_headers #>> '{}' as sealed from endpoint where ${SEALED_HEADERS}
              order by updated_at desc limit 1`,
    firstKey: '',
    binding: headersBinding,
    read: (value) => Buffer.from(value as string, 'base64'),
    stored: (sealed) => JSON.stringify(sealed.toString('base64')),
  },
  sealedTable('source_secret', 'source_id'),
  // The tokens of SNS subscription confirmations kept for the operator (migration 0043).
  sealedTable('source_subscription_token', 'source_id'),
];

export interface SealedRow {
  key: string | number;
  /** The id the secret is bound to (in its additional data): the endpoint's or the source's. */
  ownerId: string;
  sealed: Buffer;
}

/** One page of a column's sealed secrets in key order, for re-encryption. */
export async function sealedSecretsAfter(
  db: Queryable,
  column: SealedColumn,
  afterKey: string | number,
  limit: number,
): Promise<SealedRow[]> {
  const result = await db.query<{ key: string | number; ownerId: string; sealed: unknown }>(column.page, [
    afterKey,
    limit,
  ]);
  return result.rows.map((r) => ({ key: r.key, ownerId: r.ownerId, sealed: column.read(r.sealed) }));
}

/** Replaces a ciphertext, only if it is still the one that was read (a rotation may have won). */
export async function resealSecret(
  db: Queryable,
  column: SealedColumn,
  key: string | number,
  previous: Buffer,
  sealed: Buffer,
): Promise<boolean> {
  const result = await db.query(column.reseal, [key, column.stored(previous), column.stored(sealed)]);
  return result.rowCount > 0;
}

/** The newest sealed value of each column the database has (a start's sample of its keys). */
export async function newestSealed(db: Queryable): Promise<Buffer[]> {
  // Those there: a command opens a database behind its migrations to say which it lacks.
  const present = await db.query<{ name: string }>(
    `select x.name from unnest($1::text[], $2::text[], $3::text[]) as x(name, t, c)
      where exists (select from pg_attribute a
                     where a.attrelid = to_regclass(x.t) and a.attname = x.c and not a.attisdropped)`,
    [
      SEALED_COLUMNS.map((c) => c.name),
      SEALED_COLUMNS.map((c) => c.table),
      SEALED_COLUMNS.map((c) => c.column),
    ],
  );
  const there = new Set(present.rows.map((r) => r.name));
  const newest: Buffer[] = [];
  for (const column of SEALED_COLUMNS.filter((c) => there.has(c.name))) {
    const row = (await db.query<{ sealed: unknown }>(column.newest)).rows[0];
    if (row) newest.push(column.read(row.sealed));
  }
  return newest;
}
