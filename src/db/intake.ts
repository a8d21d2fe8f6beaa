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

export interface ClaimedIntake {
  intakeId: string;
  /** true: this receipt claimed the delivery id; false: it was claimed before (a duplicate). */
  claimed: boolean;
  /** The message of an earlier claim (null for a new claim, until it is linked). */
  messageId: string | null;
}

/**
 * Claims each delivery id, or finds its existing claim, in two statements whatever the number of
 * receipts. The first receipt of an id in `claims` claims it; a later one in the same call is a
 * duplicate of it. Two concurrent transactions claiming one id meet at the unique index: the
 * second waits for the first to commit, then (on the next statement's snapshot) finds its claim.
 */
export async function claimIntakes(db: Queryable, claims: readonly IntakeClaim[]): Promise<ClaimedIntake[]> {
  const keyOf = (c: { sourceId: string; deliveryId: string }) => `${c.sourceId}\u0000${c.deliveryId}`;
  const inserted = await db.query<{ id: string; sourceId: string; deliveryId: string }>(
    `insert into intake (source_id, app_id, delivery_id, business_key, body_sha256)
     select source_id, app_id, delivery_id, business_key, decode(digest, 'hex')
       from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[])
              as c(source_id, app_id, delivery_id, business_key, digest)
      order by source_id, delivery_id
     on conflict (source_id, delivery_id) do nothing
     returning id, source_id as "sourceId", delivery_id as "deliveryId"`,
    [
      claims.map((c) => c.sourceId),
      claims.map((c) => c.appId),
      claims.map((c) => c.deliveryId),
      claims.map((c) => c.businessKey),
      claims.map((c) => c.bodySha256.toString('hex')),
    ],
    'claim_intakes',
  );
  const claimedNow = new Map(inserted.rows.map((r) => [keyOf(r), r.id]));
  const results: ClaimedIntake[] = [];
  const owned = new Set<string>();
  const earlier: { at: number; claim: IntakeClaim }[] = [];
  for (const [at, claim] of claims.entries()) {
    const key = keyOf(claim);
    const id = claimedNow.get(key);
    if (id !== undefined && !owned.has(key)) {
      owned.add(key);
      results.push({ intakeId: id, claimed: true, messageId: null });
    } else if (id !== undefined) {
      results.push({ intakeId: id, claimed: false, messageId: null });
    } else {
      results.push({ intakeId: '', claimed: false, messageId: null });
      earlier.push({ at, claim });
    }
  }
  if (earlier.length > 0) {
    const existing = await db.query<{
      id: string;
      sourceId: string;
      deliveryId: string;
      messageId: string | null;
    }>(
      `select id, source_id as "sourceId", delivery_id as "deliveryId", message_id as "messageId"
         from intake where (source_id, delivery_id) in (select * from unnest($1::text[], $2::text[]))`,
      [earlier.map((e) => e.claim.sourceId), earlier.map((e) => e.claim.deliveryId)],
      'find_intakes',
    );
    const byKey = new Map(existing.rows.map((r) => [keyOf(r), r]));
    for (const { at, claim } of earlier) {
      const row = byKey.get(keyOf(claim))!;
      results[at] = { intakeId: row.id, claimed: false, messageId: row.messageId };
    }
  }
  return results;
}

/** Links each new claim to the message it produced. */
export async function linkIntakeMessages(
  db: Queryable,
  links: readonly { intakeId: string; messageId: string }[],
): Promise<void> {
  if (links.length === 0) return;
  await db.query(
    `update intake set message_id = l.message_id
       from unnest($1::text[], $2::text[]) as l(intake_id, message_id)
      where intake.id = l.intake_id`,
    [links.map((l) => l.intakeId), links.map((l) => l.messageId)],
    'link_intakes',
  );
}

/** One observation per receipt, duplicates included. */
export async function recordObservations(
  db: Queryable,
  observations: readonly { intakeId: string; appId: string; duplicate: boolean; bodySha256: Buffer }[],
): Promise<void> {
  await db.query(
    `insert into intake_observation (intake_id, app_id, duplicate, body_sha256)
     select intake_id, app_id, duplicate, decode(digest, 'hex')
       from unnest($1::text[], $2::text[], $3::boolean[], $4::text[]) as o(intake_id, app_id, duplicate, digest)`,
    [
      observations.map((o) => o.intakeId),
      observations.map((o) => o.appId),
      observations.map((o) => o.duplicate),
      observations.map((o) => o.bodySha256.toString('hex')),
    ],
    'record_observations',
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
