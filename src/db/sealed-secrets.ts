// Every secret herald keeps sealed under the master key, table by table: endpoint signing secrets
// (bound to their endpoint), inbound source secrets and the SNS subscription tokens kept for the
// operator (bound to their source). Re-encryption
// walks them all: a table it skipped would be unreadable once the old key is dropped.

import type { Queryable } from './port.ts';

/** A table of sealed secrets and the column holding the id each secret is bound to. */
export const SEALED_TABLES = [
  { table: 'endpoint_secret', owner: 'endpoint_id' },
  { table: 'source_secret', owner: 'source_id' },
  // The tokens of SNS subscription confirmations kept for the operator (migration 0043).
  { table: 'source_subscription_token', owner: 'source_id' },
] as const;

export type SealedTable = (typeof SEALED_TABLES)[number];

export interface SealedRow {
  id: number;
  /** The id the secret is sealed to (its additional data): the endpoint's or the source's. */
  ownerId: string;
  sealed: Buffer;
}

/** One page of a table's sealed secrets in id order, for re-encryption. */
export async function sealedSecretsAfter(
  db: Queryable,
  { table, owner }: SealedTable,
  afterId: number,
  limit: number,
): Promise<SealedRow[]> {
  const result = await db.query<{ id: number; ownerId: string; sealed: Uint8Array }>(
    `select id::int as id, ${owner} as "ownerId", sealed from ${table} where id > $1 order by id limit $2`,
    [afterId, limit],
  );
  return result.rows.map((r) => ({ ...r, sealed: Buffer.from(r.sealed) }));
}

/** Replaces a ciphertext, only if it is still the one that was read (a rotation may have won). */
export async function resealSecret(
  db: Queryable,
  { table }: SealedTable,
  id: number,
  previous: Buffer,
  sealed: Buffer,
): Promise<boolean> {
  const result = await db.query(`update ${table} set sealed = $3 where id = $1 and sealed = $2`, [
    id,
    previous,
    sealed,
  ]);
  return result.rowCount > 0;
}
