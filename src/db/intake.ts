// Intake claims (one per source × delivery id) and observations (every receipt, duplicates
// included). Only ids, digests and timestamps: never the content.

import crypto from 'node:crypto';
import { isoUtc } from './json-time.ts';
import { inOrder, wellFormed } from './messages.ts';
import type { Queryable } from './port.ts';

/**
 * The idempotency keys of relayed messages begin with this: a publish may not take one, or it
 * would stand in for an inbound event that has not arrived yet (see engine/publish.ts).
 */
export const INTAKE_KEY_PREFIX = 'intake:';

/**
 * A receipt to record, with the payload its relayed message carries should it claim its delivery
 * id (where that message goes — app, event type, retention — is read from the source row in the
 * database).
 */
export interface IntakeReceipt {
  sourceId: string;
  deliveryId: string;
  businessKey: string;
  bodySha256: Buffer;
  payload: string;
}

export interface RecordedReceipt {
  intakeId: string;
  /** false: the delivery id was claimed before (or earlier in this batch): a duplicate. */
  claimed: boolean;
  /** The message of the claim: the one this receipt published, or the one its claim names. */
  messageId: string | null;
  /** true: this receipt's claim published a new message. */
  relayed: boolean;
}

/**
 * Records a batch of receipts in one call (herald_record_receipts, migrations/0005): the first
 * receipt of each delivery id claims it and publishes its relayed message (another delivery id
 * carrying the same business key joins that key's message), later receipts of an id are
 * duplicates, and every receipt is observed. Results come back in the order of `receipts`.
 */
export async function recordReceipts(
  db: Queryable,
  receipts: readonly IntakeReceipt[],
  defaultRetentionDays: number,
): Promise<RecordedReceipt[]> {
  const items = receipts.map((r, ord) => ({
    ord,
    source_id: r.sourceId,
    delivery_id: r.deliveryId,
    business_key: r.businessKey,
    digest: r.bodySha256.toString('hex'),
    // The business key is the relayed message's idempotency key, scoped to the source, and
    // identifies its content: a replay of the key is the same event.
    idempotency_key: `${INTAKE_KEY_PREFIX}${r.sourceId}:${r.businessKey}`,
    request_hash: crypto.createHash('sha256').update(r.businessKey).digest('hex'),
    payload: r.payload,
    actor: `source:${r.sourceId}`,
  }));
  const result = await db.query<RecordedReceipt & { ord: number }>(
    `select ord, intake_id as "intakeId", claimed, message_id as "messageId", relayed
       from herald_record_receipts($1::jsonb, $2::int)`,
    [JSON.stringify(items, wellFormed), defaultRetentionDays],
    'record_receipts',
  );
  return inOrder(receipts.length, result.rows, 'receipt');
}

/** The business key a delivery id of a source was claimed under, if it was claimed. */
export async function claimedBusinessKey(
  db: Queryable,
  sourceId: string,
  deliveryId: string,
): Promise<string | null> {
  const result = await db.query<{ businessKey: string }>(
    'select business_key as "businessKey" from intake where source_id = $1 and delivery_id = $2',
    [sourceId, deliveryId],
  );
  return result.rows[0]?.businessKey ?? null;
}

export interface IntakeEvidence {
  intakeId: string;
  sourceId: string;
  deliveryId: string;
  businessKey: string;
  bodySha256: string;
  claimedAt: Date;
  observations: { observedAt: string; duplicate: boolean; bodySha256: string }[];
}

/** Everything recorded about the inbound deliveries that produced a message. */
export async function intakeEvidenceForMessage(db: Queryable, messageId: string): Promise<IntakeEvidence[]> {
  const result = await db.query<IntakeEvidence>(
    `select i.id as "intakeId", i.source_id as "sourceId", i.delivery_id as "deliveryId",
            i.business_key as "businessKey", encode(i.body_sha256, 'hex') as "bodySha256",
            i.claimed_at as "claimedAt",
            coalesce((select json_agg(json_build_object('observedAt', ${isoUtc('o.observed_at')}, 'duplicate', o.duplicate,
                                                        'bodySha256', encode(o.body_sha256, 'hex')) order by o.id)
                        from intake_observation o where o.intake_id = i.id), '[]') as observations
       from intake i where i.message_id = $1 order by i.id`,
    [messageId],
  );
  return result.rows;
}
