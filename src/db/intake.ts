// Intake claims (one per source × delivery id) and observations (every receipt, duplicates
// included). Only ids, digests and timestamps: never the content.

import type { Queryable } from './port.ts';

export interface IntakeClaim {
  sourceId: string;
  appId: string;
  deliveryId: string;
  businessKey: string;
  bodySha256: Buffer;
}

/**
 * Claims the delivery id, or finds the existing claim. Two concurrent receipts of one id meet at
 * the unique index: the second waits for the first to commit, then finds its claim.
 */
export async function claimIntake(
  db: Queryable,
  claim: IntakeClaim,
): Promise<{ intakeId: string; claimed: boolean; messageId: string | null }> {
  const inserted = await db.query<{ id: string }>(
    `insert into intake (source_id, app_id, delivery_id, business_key, body_sha256)
     values ($1, $2, $3, $4, $5) on conflict (source_id, delivery_id) do nothing returning id`,
    [claim.sourceId, claim.appId, claim.deliveryId, claim.businessKey, claim.bodySha256],
    'claim_intake',
  );
  if (inserted.rows[0]) return { intakeId: inserted.rows[0].id, claimed: true, messageId: null };
  const existing = await db.query<{ id: string; messageId: string | null }>(
    `select id, message_id as "messageId" from intake where source_id = $1 and delivery_id = $2`,
    [claim.sourceId, claim.deliveryId],
    'find_intake',
  );
  const row = existing.rows[0]!;
  return { intakeId: row.id, claimed: false, messageId: row.messageId };
}

export async function linkIntakeMessage(db: Queryable, intakeId: string, messageId: string): Promise<void> {
  await db.query('update intake set message_id = $2 where id = $1', [intakeId, messageId], 'link_intake');
}

export async function recordObservation(
  db: Queryable,
  o: { intakeId: string; appId: string; duplicate: boolean; bodySha256: Buffer },
): Promise<void> {
  await db.query(
    'insert into intake_observation (intake_id, app_id, duplicate, body_sha256) values ($1, $2, $3, $4)',
    [o.intakeId, o.appId, o.duplicate, o.bodySha256],
    'record_observation',
  );
}

export interface IntakeEvidence {
  intakeId: string;
  sourceId: string;
  deliveryId: string;
  businessKey: string;
  bodySha256: string;
  claimedAt: Date;
  observations: { observedAt: Date; duplicate: boolean; bodySha256: string }[];
}

/** Everything recorded about the inbound deliveries that produced a message. */
export async function intakeEvidenceForMessage(db: Queryable, messageId: string): Promise<IntakeEvidence[]> {
  const result = await db.query<IntakeEvidence>(
    `select i.id as "intakeId", i.source_id as "sourceId", i.delivery_id as "deliveryId",
            i.business_key as "businessKey", encode(i.body_sha256, 'hex') as "bodySha256",
            i.claimed_at as "claimedAt",
            coalesce((select json_agg(json_build_object('observedAt', o.observed_at, 'duplicate', o.duplicate,
                                                        'bodySha256', encode(o.body_sha256, 'hex')) order by o.id)
                        from intake_observation o where o.intake_id = i.id), '[]') as observations
       from intake i where i.message_id = $1 order by i.id`,
    [messageId],
  );
  return result.rows;
}
