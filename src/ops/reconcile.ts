// Reconciliation: for one message, or the messages of a time window, everything herald knows —
// the inbound observations that produced it, its deliveries, every attempt with its time and
// response class — and which outcomes remain unknown. The evidence an operator needs to decide
// whether an uncertain effect happened (ask the receiver about that Idempotency-Key) and what to
// do next (resend, or nothing).

import { type MessageEvidence, messageEvidence, messageIdsInWindow } from '../db/evidence.ts';
import { type IntakeEvidence, intakeEvidenceForMessage } from '../db/intake.ts';
import type { Queryable } from '../db/port.ts';

export interface Reconciliation {
  message: MessageEvidence;
  intake: IntakeEvidence[];
  /** Attempts nobody can tell the result of. */
  unknown: MessageEvidence['attempts'];
}

export async function reconcileMessage(db: Queryable, messageId: string): Promise<Reconciliation | null> {
  const message = await messageEvidence(db, messageId);
  if (!message) return null;
  return {
    message,
    intake: await intakeEvidenceForMessage(db, messageId),
    unknown: message.attempts.filter((a) => a.outcome === 'unknown'),
  };
}

export async function reconcileWindow(
  db: Queryable,
  window: Parameters<typeof messageIdsInWindow>[1],
): Promise<Reconciliation[]> {
  const ids = await messageIdsInWindow(db, window);
  const found = await Promise.all(ids.map((id) => reconcileMessage(db, id)));
  return found.filter((r) => r !== null);
}

/** A plain-text report, one block per message. */
export function formatReconciliation(r: Reconciliation): string {
  const m = r.message;
  const time = (d: Date | string | null) => (d === null ? '-' : new Date(d).toISOString());
  const lines = [
    `message ${m.id}  app ${m.appId}  event ${m.eventType}  created ${time(m.createdAt)}` +
      (m.businessKey ? `  business key ${m.businessKey}` : ''),
  ];
  for (const i of r.intake) {
    lines.push(
      `  intake ${i.intakeId}  source ${i.sourceId}  delivery id ${i.deliveryId}  claimed ${time(i.claimedAt)}`,
    );
    for (const o of i.observations) {
      lines.push(
        `    observed ${time(o.observedAt)}  ${o.duplicate ? 'duplicate' : 'first'}  body sha256 ${o.bodySha256}`,
      );
    }
  }
  for (const d of m.deliveries) {
    lines.push(
      `  delivery ${d.id} → ${d.endpointId} (${d.url})  ${d.state}  cycle ${d.cycle}  attempts ${d.attemptsTotal}` +
        (d.nextAttemptAt ? `  next ${time(d.nextAttemptAt)}` : ''),
    );
    for (const a of m.attempts.filter((x) => x.endpointId === d.endpointId)) {
      lines.push(
        `    attempt ${a.id}  cycle ${a.cycle} ${a.trigger}  ${time(a.startedAt)}  ${a.outcome ?? 'running'}` +
          `  ${a.statusCode ?? '-'} ${a.responseClass ?? ''}  ${a.durationMs ?? '-'} ms`,
      );
    }
  }
  lines.push(
    r.unknown.length === 0
      ? '  no unknown outcomes'
      : `  UNKNOWN: ${r.unknown.length} attempt(s) may or may not have been applied: ${r.unknown.map((a) => a.id).join(', ')}`,
  );
  return lines.join('\n');
}
