// Reconciliation: for one message, or the messages of a time window, everything herald knows —
// the inbound observations that produced it, its deliveries, every attempt with its time and
// response class — and which outcomes remain unknown. The evidence an operator needs to decide
// whether an uncertain effect happened (ask the receiver about that Idempotency-Key) and what to
// do next (resend, or nothing).

import { urlOrigin } from '../config.ts';
import { recordAudit } from '../db/audit.ts';
import { acknowledgeUnknownOutcomes } from '../db/deliveries.ts';
import {
  type EvidenceWindow,
  type MessageEvidence,
  messageEvidence,
  messageIdsInWindow,
} from '../db/evidence.ts';
import { type IntakeEvidence, intakeEvidenceForMessage } from '../db/intake.ts';
import type { Db, Queryable } from '../db/port.ts';

export interface Reconciliation {
  message: MessageEvidence;
  intake: IntakeEvidence[];
  /** Attempts nobody can tell the result of, and nobody has acknowledged. */
  unknown: MessageEvidence['attempts'];
  /** Unknown attempts an operator looked into and left (`reconcile --acknowledge`). */
  acknowledged: MessageEvidence['attempts'];
  /**
   * Attempts with no outcome recorded yet: in flight under a live lease, or left by a worker that
   * died (lease recovery will mark them unknown). Not known either, for now.
   */
  open: MessageEvidence['attempts'];
}

export async function reconcileMessage(db: Queryable, messageId: string): Promise<Reconciliation | null> {
  const message = await messageEvidence(db, messageId);
  if (!message) return null;
  return {
    message,
    intake: await intakeEvidenceForMessage(db, messageId),
    unknown: message.attempts.filter((a) => a.outcome === 'unknown' && a.acknowledgedAt === null),
    acknowledged: message.attempts.filter((a) => a.outcome === 'unknown' && a.acknowledgedAt !== null),
    open: message.attempts.filter((a) => a.outcome === null),
  };
}

const WINDOW_PAGE = 500;
/**
 * Messages of a page looked up at once. A page's worth at once would queue for the pool's few
 * connections, and a lookup that waits past the pool's connect timeout fails the whole command.
 */
const LOOKUPS_AT_ONCE = 4;

/**
 * Every message of the window, a page of ids at a time, each page given as it is read: a window
 * of any length is printed without being held whole (a year of a busy app's evidence would not
 * fit in the heap).
 */
export async function* reconcileWindow(
  db: Queryable,
  window: EvidenceWindow,
  pageSize = WINDOW_PAGE,
): AsyncGenerator<Reconciliation> {
  for (let after = ''; ; ) {
    const ids = await messageIdsInWindow(db, window, after, pageSize);
    for (let at = 0; at < ids.length; at += LOOKUPS_AT_ONCE) {
      const some = ids.slice(at, at + LOOKUPS_AT_ONCE);
      for (const reconciled of await Promise.all(some.map((id) => reconcileMessage(db, id)))) {
        if (reconciled) yield reconciled;
      }
    }
    if (ids.length < pageSize) return;
    after = ids.at(-1)!;
  }
}

/**
 * An operator's decision about a message's unknown outcomes, once looked into: leave them (the
 * receiver applied them, or nothing is to be done). They stay `unknown` in the history; they no
 * longer await review (`herald doctor`, herald_unknown_outcomes_parked) nor keep the message from
 * history retention. Audited with what was acknowledged; returns it.
 */
export async function acknowledgeUnknown(
  db: Db,
  actorId: string,
  messageId: string,
): Promise<{ deliveryId: string; unknownAttempts: number }[]> {
  return db.transaction(async (tx) => {
    const rows = await acknowledgeUnknownOutcomes(tx, messageId);
    if (rows.length === 0) return [];
    const deliveries = rows.map(({ deliveryId, unknownAttempts }) => ({ deliveryId, unknownAttempts }));
    await recordAudit(tx, {
      actor: actorId,
      action: 'message.unknown_acknowledged',
      appId: rows[0]!.appId,
      targetType: 'message',
      targetId: messageId,
      details: { deliveries },
    });
    return deliveries;
  });
}

/** Whether a report holds an outcome nobody knows, now or yet, and nobody has acknowledged. */
export const isUncertain = (r: Reconciliation): boolean => r.unknown.length > 0 || r.open.length > 0;

/** A plain-text report, one block per message. */
export function formatReconciliation(r: Reconciliation): string {
  const m = r.message;
  const time = (d: Date | string | null) => (d === null ? '-' : new Date(d).toISOString());
  // A report is pasted into tickets: an endpoint's URL by its origin only, as its path or query may
  // be its credential (a chat webhook's); --json has it whole.
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
      `  delivery ${d.id} → ${d.endpointId} (${urlOrigin(d.url)})  ${d.state}  cycle ${d.cycle}  attempts ${d.attemptsTotal}` +
        (d.nextAttemptAt ? `  next ${time(d.nextAttemptAt)}` : ''),
    );
    // An attempt with no outcome is the delivery's current one: its lease says which it is.
    const open = d.leaseLive
      ? `in flight (lease until ${time(d.leaseExpiresAt)})`
      : 'no outcome (lease expired: recovery will mark it unknown)';
    for (const a of m.attempts.filter((x) => x.endpointId === d.endpointId)) {
      lines.push(
        `    attempt ${a.id}  cycle ${a.cycle} ${a.trigger}  ${time(a.startedAt)}  ${a.outcome ?? open}` +
          `  ${a.statusCode ?? '-'} ${a.responseClass ?? ''}  ${a.durationMs ?? '-'} ms`,
      );
    }
  }
  const uncertain = (label: string, attempts: Reconciliation['unknown'], what: string) => {
    if (attempts.length > 0)
      lines.push(
        `  ${label}: ${attempts.length} attempt(s) ${what}: ${attempts.map((a) => a.id).join(', ')}`,
      );
  };
  uncertain('UNKNOWN', r.unknown, 'may or may not have been applied');
  uncertain('acknowledged', r.acknowledged, 'unknown, looked into and left');
  uncertain('OPEN', r.open, 'with no outcome recorded yet, not known either');
  if (!isUncertain(r)) lines.push('  no unknown outcomes');
  return lines.join('\n');
}
