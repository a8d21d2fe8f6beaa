// The audit log: who did what to which object. Callers pass ids and small facts, never payloads
// or secrets.

import type { Queryable } from './port.ts';

/**
 * The audit action of a message sent as an example to one endpoint: it went to that endpoint
 * alone, whatever else its event type matches, and is never routed to another.
 */
export const EXAMPLE_SENT = 'message.example_sent';

/** SQL: message `m` was sent as an example (found by the audit log's index by target). */
export const SENT_AS_EXAMPLE = `exists (select 1 from audit_entry x where x.target_id = m.id and x.action = '${EXAMPLE_SENT}')`;

export interface AuditFact {
  actor: string;
  action: string;
  appId: string | null;
  targetType: string;
  targetId: string;
  details?: Record<string, unknown>;
}

export async function recordAudit(db: Queryable, fact: AuditFact): Promise<void> {
  await db.query(
    `insert into audit_entry (actor, action, app_id, target_type, target_id, details)
     values ($1, $2, $3, $4, $5, $6)`,
    [fact.actor, fact.action, fact.appId, fact.targetType, fact.targetId, JSON.stringify(fact.details ?? {})],
  );
}

export interface AuditRow {
  id: number;
  at: Date;
  actor: string;
  action: string;
  appId: string | null;
  targetType: string;
  targetId: string;
  details: Record<string, unknown>;
}

export async function listAuditForTarget(db: Queryable, targetId: string): Promise<AuditRow[]> {
  const result = await db.query<AuditRow>(
    `select id::int as id, at, actor, action, app_id as "appId", target_type as "targetType",
            target_id as "targetId", details
       from audit_entry where target_id = $1 order by id`,
    [targetId],
  );
  return result.rows;
}
