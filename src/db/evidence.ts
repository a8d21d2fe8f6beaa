// Read-only queries that gather the evidence about messages: what reconciliation prints.

import { isoUtc } from './json-time.ts';
import type { Queryable } from './port.ts';
import { createdBetween } from './time-ids.ts';

export interface MessageEvidence {
  id: string;
  appId: string;
  eventType: string;
  businessKey: string | null;
  createdAt: Date;
  deliveries: {
    id: string;
    endpointId: string;
    url: string;
    state: string;
    cycle: number;
    attemptsTotal: number;
    /** Times inside the evidence are ISO 8601 UTC text (json-time.ts). */
    nextAttemptAt: string | null;
    /** While it is `sending`: when its lease ends, and whether it is still running (database time). */
    leaseExpiresAt: string | null;
    leaseLive: boolean;
  }[];
  attempts: {
    id: string;
    endpointId: string;
    cycle: number;
    trigger: string;
    startedAt: string;
    finishedAt: string | null;
    outcome: string | null;
    statusCode: number | null;
    responseClass: string | null;
    durationMs: number | null;
    /** An unknown outcome an operator looked into and left (`reconcile --acknowledge`). */
    acknowledgedAt: string | null;
  }[];
}

export interface EvidenceWindow {
  since: Date;
  until: Date | null;
  appId: string | null;
  /** Only messages with an attempt whose outcome is unknown (and not acknowledged), or not recorded yet. */
  uncertainOnly: boolean;
}

/** One page of the window's message ids, in order, after `afterId` ('' from the start). */
export async function messageIdsInWindow(
  db: Queryable,
  window: EvidenceWindow,
  afterId: string,
  limit: number,
): Promise<string[]> {
  const result = await db.query<{ id: string }>(
    `select m.id from message m
      where ${createdBetween({ prefix: 'msg', idColumn: 'm.id', timeColumn: 'm.created_at', after: '$1', before: '$2', includeAfter: true })}
        and ($3::text is null or m.app_id = $3)
        and (not $4 or exists (select 1 from attempt a
                                where a.message_id = m.id
                                  and (a.outcome is null or (a.outcome = 'unknown' and a.acknowledged_at is null))))
        and m.id > $5
      order by m.id limit $6`,
    [window.since, window.until, window.appId, window.uncertainOnly, afterId, limit],
  );
  return result.rows.map((r) => r.id);
}

export async function messageEvidence(db: Queryable, messageId: string): Promise<MessageEvidence | null> {
  const result = await db.query<MessageEvidence>(
    `select m.id, m.app_id as "appId", m.event_type as "eventType", m.business_key as "businessKey",
            m.created_at as "createdAt",
            coalesce((select json_agg(json_build_object(
                'id', d.id, 'endpointId', d.endpoint_id, 'url', e.url, 'state', d.state, 'cycle', d.cycle,
                'attemptsTotal', d.attempts_total, 'nextAttemptAt', ${isoUtc('d.next_attempt_at')},
                'leaseExpiresAt', ${isoUtc('d.lease_expires_at')},
                'leaseLive', coalesce(d.lease_expires_at > now(), false)) order by d.endpoint_id)
              from delivery d join endpoint e on e.id = d.endpoint_id where d.message_id = m.id), '[]') as deliveries,
            coalesce((select json_agg(json_build_object(
                'id', a.id, 'endpointId', a.endpoint_id, 'cycle', a.cycle, 'trigger', a.trigger,
                'startedAt', ${isoUtc('a.started_at')}, 'finishedAt', ${isoUtc('a.finished_at')}, 'outcome', a.outcome,
                'statusCode', a.status_code, 'responseClass', a.response_class, 'durationMs', a.duration_ms,
                'acknowledgedAt', ${isoUtc('a.acknowledged_at')})
                order by a.id)
              from attempt a where a.message_id = m.id), '[]') as attempts
       from message m where m.id = $1`,
    [messageId],
  );
  return result.rows[0] ?? null;
}
