// `herald doctor`: looks in the database for states that should not last — work that is stuck,
// evidence that is missing, uncertainty nobody has looked at — and reports each as a finding
// with its count, its oldest age and a few ids to start from. Read-only: it repairs nothing, so
// it is safe to run from cron or a probe against a live system. Every check is one query.

import { SENT_AS_EXAMPLE } from '../db/audit.ts';
import { awaitsReview, ENDPOINT_MATCHES, UNSERVED_SINCE } from '../db/deliveries.ts';
import { migrationState } from '../db/migrate.ts';
import type { Queryable } from '../db/port.ts';
import { firstIdAt } from '../db/time-ids.ts';

export interface DoctorThresholds {
  /** Rows younger than this may still be mid-write (claim → message, endpoint → fan-out). */
  settleSeconds: number;
  /** A due delivery of an enabled endpoint that waits longer than this is overdue. */
  dueSeconds: number;
  /** An expired lease still unrecovered this long after its expiry means no worker recovers it. */
  leaseGraceSeconds: number;
  /** A parked unknown outcome older than this has not been reviewed. */
  unknownReviewSeconds: number;
  /**
   * How far back the checks of the history (claims without a message, messages without their
   * fan-out) look: each run reads that window, by id, not every row ever written.
   */
  lookbackSeconds: number;
}

export const DOCTOR_CHECKS = [
  'migrations_pending',
  'migrations_ahead',
  'intake_without_message',
  'message_without_deliveries',
  'deliveries_overdue',
  'leases_expired',
  'unknown_outcomes_unreviewed',
  'endpoints_disabled',
] as const;

export type DoctorCheck = (typeof DOCTOR_CHECKS)[number];

/** Those `--skip` takes: all but a schema behind this build, which every run checks first. */
export const SKIPPABLE_CHECKS: readonly DoctorCheck[] = DOCTOR_CHECKS.filter(
  (c) => c !== 'migrations_pending',
);

export interface Finding {
  check: DoctorCheck;
  count: number;
  /**
   * Age in seconds of the oldest case, from the time named in `detail`; null for the migrations,
   * which have no time to measure from (a migration is missing or extra, not late).
   */
  oldestSeconds: number | null;
  /** A few ids, oldest first, to start an investigation from. */
  examples: string[];
  /** What the state means and what to do about it. */
  detail: string;
}

interface Check {
  name: Exclude<DoctorCheck, 'migrations_pending' | 'migrations_ahead'>;
  /**
   * Selects the offending rows as (id, t): t is the moment the age is measured from. A check whose
   * detail names a window selects `since` as well: the moment that window must start at to hold the row.
   */
  sql: (t: DoctorThresholds) => { text: string; params: unknown[] };
  /** Given the earliest `since`, to the second (rounded down), when the detail names a window. */
  detail: string | ((since: string) => string);
}

const EXAMPLES = 5;
/** A time as the CLI's options take it, to the second: what to_char leaves out is rounded down. */
const ISO_SECOND = `'YYYY-MM-DD"T"HH24:MI:SS"Z"'`;

const CHECKS: Check[] = [
  {
    // Claim and message are committed in one transaction, and history retention deletes them
    // together, so any such row is a defect (or a hand edit): the sender was acknowledged and
    // nothing will be delivered. A claim younger than the message history retention deleted stays,
    // marked (retention.ts). Nor is a claim whose app was deleted: its messages went with it.
    name: 'intake_without_message',
    sql: (t) => ({
      text: `select i.id, i.claimed_at as t from intake i
              where i.id >= ${firstIdAt('in', 'now() - make_interval(secs => $2)')}
                and i.message_id is null and i.message_pruned_at is null
                and exists (select 1 from app a where a.id = i.app_id)
                and i.claimed_at < now() - make_interval(secs => $1)`,
      params: [t.settleSeconds, t.lookbackSeconds],
    }),
    detail:
      'inbound deliveries were acknowledged (claimed_at) but produced no message, so nothing will be sent ' +
      'for them; ask the provider to redeliver, or publish the events by hand',
  },
  {
    // Exact, with no false alarms: a message has no delivery row although an endpoint of its app
    // matches it now and was created and last changed (updated_at) a settle period before the
    // message — so it matched then too and was committed when the fan-out ran. An endpoint edited
    // after the message is not judged (it may not have matched), which can only hide a case. Nor
    // is a message sent as an example: it went to one endpoint alone, maybe deleted since.
    name: 'message_without_deliveries',
    sql: (t) => ({
      text: `select m.id, m.created_at as t from message m
              where m.id >= ${firstIdAt('msg', 'now() - make_interval(secs => $2)')}
                and m.created_at < now() - make_interval(secs => $1)
                and not exists (select 1 from delivery d where d.message_id = m.id)
                and not ${SENT_AS_EXAMPLE}
                and exists (
                  select 1 from endpoint e
                   where e.app_id = m.app_id
                     and e.created_at < m.created_at - make_interval(secs => $1)
                     and e.updated_at < m.created_at - make_interval(secs => $1)
                     and ${ENDPOINT_MATCHES})`,
      params: [t.settleSeconds, t.lookbackSeconds],
    }),
    detail:
      'messages (created_at) have no delivery although an endpoint of their app was subscribed when ' +
      'they were published; resend them to that endpoint',
  },
  {
    // Disabled endpoints' deliveries wait on purpose; they are reported as endpoints_disabled.
    // Counted from UNSERVED_SINCE: a throttled backlog that drains is not overdue, nor one an
    // endpoint enabled a moment ago held, nor one that drains one request at a time to a slow
    // receiver; one that nobody serves is, as for any endpoint.
    name: 'deliveries_overdue',
    sql: (t) => ({
      text: `select q.delivery_id as id, ${UNSERVED_SINCE} as t
               from delivery_queued q join endpoint e on e.id = q.endpoint_id
               left join delivery_lease s on s.endpoint_id = q.endpoint_id
              where not e.disabled and ${UNSERVED_SINCE} < now() - make_interval(secs => $1)`,
      params: [t.dueSeconds],
    }),
    detail:
      "deliveries to enabled endpoints have been due (next_attempt_at, or a throttled endpoint's " +
      'last start) for too long, and their endpoint has had no attempt since; are workers running?',
  },
  {
    name: 'leases_expired',
    sql: (t) => ({
      text: `select l.delivery_id as id, l.lease_expires_at as t from delivery_lease l
              where l.lease_expires_at < now() - make_interval(secs => $1)`,
      params: [t.leaseGraceSeconds],
    }),
    detail:
      'deliveries are still leased long after the lease expired (lease_expires_at); every running ' +
      'worker recovers expired leases within seconds, so none is running',
  },
  {
    name: 'unknown_outcomes_unreviewed',
    sql: (t) => ({
      // The failed deliveries that counted unknown attempts as they were parked (0019), and only
      // their attempts, each looked up by its delivery (OFFSET 0: never joined to the whole table).
      // Awaiting review since the parking (the delivery's last change), not since the attempt: an
      // unknown first attempt of a cycle that ran on for a day was never anyone's to review before.
      // `since`: its message's creation, where `herald reconcile --since` looks for it.
      text: `select a.id, greatest(a.finished_at, d.updated_at) as t, m.created_at as since
               from delivery_failed f
              join delivery d on d.id = f.delivery_id
              join message m on m.id = d.message_id
              cross join lateral (
                select a.id, a.finished_at from attempt a
                 where a.delivery_id = f.delivery_id and a.outcome = 'unknown' and a.acknowledged_at is null
                offset 0
              ) a
              where ${awaitsReview('f')}
                and greatest(a.finished_at, d.updated_at) < now() - make_interval(secs => $1)`,
      params: [t.unknownReviewSeconds],
    }),
    // The command as it runs: reconcile takes no window without its start, and this one starts
    // at the oldest message concerned.
    detail: (since) =>
      'attempts with an unknown outcome are parked on failed deliveries (since the delivery failed); check with the ' +
      `receiver (herald reconcile --since ${since} --unknown-only), then resend them, or leave them: ` +
      'herald reconcile --message <id> --acknowledge',
  },
  {
    // Automatic disables always need a person; an operator's disable only once work waits on it.
    name: 'endpoints_disabled',
    sql: () => ({
      text: `select e.id, e.updated_at as t from endpoint e
              where e.disabled
                and (e.disabled_reason <> 'operator'
                     or exists (select 1 from delivery_queued q where q.endpoint_id = e.id))`,
      params: [],
    }),
    detail:
      'endpoints are disabled (since updated_at) after failures or a 410, or by an operator while ' +
      'deliveries wait for them; fix the receiver and re-enable, or delete the endpoint',
  },
];

/**
 * Runs every check but those in `skip`; returns the findings (an empty list: healthy). A probe
 * that restarts processes may skip what needs a person, not a restart (endpoints_disabled,
 * unknown_outcomes_unreviewed).
 */
export async function runDoctor(
  db: Queryable,
  thresholds: DoctorThresholds,
  skip: readonly DoctorCheck[] = [],
): Promise<Finding[]> {
  const migrations = await migrationState(db);
  if (migrations.pending.length > 0) {
    // The other checks read tables this build expects: on an older schema they cannot be trusted.
    return [
      {
        check: 'migrations_pending',
        count: migrations.pending.length,
        oldestSeconds: null,
        examples: migrations.pending.map(String),
        detail: 'the database lacks migrations this build needs; run herald migrate',
      },
    ];
  }
  const findings: Finding[] = [];
  if (migrations.ahead.length > 0 && !skip.includes('migrations_ahead')) {
    // The other checks still run: every table and column this build reads is there.
    findings.push({
      check: 'migrations_ahead',
      count: migrations.ahead.length,
      oldestSeconds: null,
      examples: migrations.ahead.map(String),
      detail:
        'a newer build migrated the database: this build does not know what those migrations changed, ' +
        'and may call functions in a shape they no longer have; run the newer build',
    });
  }
  for (const check of CHECKS) {
    if (skip.includes(check.name)) continue;
    const { text, params } = check.sql(thresholds);
    const since =
      typeof check.detail === 'string' ? 'null' : `to_char(min(x.since) at time zone 'UTC', ${ISO_SECOND})`;
    const result = await db.query<{
      count: number;
      oldestSeconds: number;
      examples: string[];
      since: string | null;
    }>(
      `select count(*)::int as count,
              coalesce(extract(epoch from now() - min(x.t)), 0)::float8 as "oldestSeconds",
              coalesce((array_agg(x.id order by x.t, x.id))[1:${EXAMPLES}], '{}') as examples,
              ${since} as since
         from (${text}) x`,
      params,
    );
    const { since: windowStart, ...row } = result.rows[0]!;
    if (row.count > 0) {
      const detail = typeof check.detail === 'string' ? check.detail : check.detail(windowStart!);
      findings.push({ check: check.name, ...row, detail });
    }
  }
  return findings;
}

/** One line per check: `ok <check>` or `FAIL <check> …` followed by its explanation. */
export function formatFindings(findings: readonly Finding[], skipped: readonly DoctorCheck[] = []): string {
  const byCheck = new Map(findings.map((f) => [f.check, f]));
  const lines: string[] = [];
  for (const check of DOCTOR_CHECKS) {
    const f = byCheck.get(check);
    if (!f) {
      // A schema that is behind skips the other checks: say so rather than claim they passed.
      lines.push(
        byCheck.has('migrations_pending') || skipped.includes(check) ? `skip ${check}` : `ok   ${check}`,
      );
      continue;
    }
    const age = f.oldestSeconds === null ? '' : ` (oldest ${Math.round(f.oldestSeconds)} s)`;
    lines.push(`FAIL ${check}: ${f.count}${age} e.g. ${f.examples.join(', ')}`, `     ${f.detail}`);
  }
  return lines.join('\n');
}
