// What the soak prints: the counts when every check holds; otherwise the seed to replay and the
// history of the first violation — every client request, database row, receiver request, fault
// and process event around it, on one timeline.

import fs from 'node:fs';
import path from 'node:path';
import type { CheckInput, CheckResult, Violation } from './checker.ts';
import { iso } from './checker.ts';

interface Line {
  t: number;
  text: string;
}

/** Everything known about the messages, keys and endpoint a violation names, in time order. */
export function historyOf(v: Violation, input: CheckInput, startedAt: number): string[] {
  const { snapshot, model } = input;
  const keys = new Set(v.keys ?? []);
  const messageIds = new Set((v.messageIds ?? []).filter(Boolean));
  for (const m of snapshot.messages) {
    if ((m.idempotencyKey && keys.has(m.idempotencyKey)) || (m.businessKey && keys.has(m.businessKey)))
      messageIds.add(m.id);
  }
  for (const op of input.publishes) if (op.acks.some((a) => messageIds.has(a.messageId))) keys.add(op.key);
  for (const e of input.events) {
    const message = snapshot.messages.find((m) => m.businessKey === e.businessKey);
    if (message && messageIds.has(message.id)) for (const d of e.deliveries) keys.add(d.deliveryId);
  }
  const endpointName = (id: string) => model.endpoints.find((e) => e.id === id)?.name ?? id;
  const lines: Line[] = [];

  for (const r of input.clientRequests) {
    if (!(r.key && keys.has(r.key)) && !(r.messageId && messageIds.has(r.messageId))) continue;
    lines.push({
      t: r.t0,
      text: `client ${r.kind} ${r.key} try ${r.try} → ${r.api}: ${r.status ?? r.error} ${r.messageId ?? ''} (${r.t1 - r.t0} ms)`,
    });
  }
  for (const m of snapshot.messages) {
    if (!messageIds.has(m.id)) continue;
    lines.push({
      t: m.createdAt,
      text: `db message ${m.id} created (${m.eventType}, key ${m.idempotencyKey}${m.businessKey ? `, business key ${m.businessKey}` : ''})`,
    });
  }
  const deliveries = snapshot.deliveries.filter((d) => messageIds.has(d.messageId));
  const deliveryIds = new Set(deliveries.map((d) => d.id));
  for (const a of snapshot.attempts) {
    if (!deliveryIds.has(a.deliveryId)) continue;
    if (v.endpointId && a.endpointId !== v.endpointId && messageIds.size > 1) continue;
    lines.push({
      t: a.startedAt,
      text: `db attempt ${a.id} claimed: ${a.messageId} → ${endpointName(a.endpointId)} lease ${a.leaseToken.slice(0, 8)} cycle ${a.cycle}`,
    });
    if (a.finishedAt !== null)
      lines.push({
        t: a.finishedAt,
        text: `db attempt ${a.id} finished: ${a.outcome} ${a.statusCode ?? ''} ${a.responseClass ?? ''}`,
      });
  }
  const endpointRequests = new Set(
    v.endpointId && v.check === '3' ? [endpointName(v.endpointId)] : ([] as string[]),
  );
  for (const r of input.received) {
    const inWindow =
      endpointRequests.has(r.receiver) &&
      v.window !== undefined &&
      r.startedAt >= v.window[0] - 3000 &&
      r.startedAt <= v.window[1] + 3000;
    if (!(r.webhookId && messageIds.has(r.webhookId)) && !inWindow) continue;
    lines.push({
      t: r.startedAt,
      text: `receiver ${r.receiver} #${r.seq} got ${r.webhookId} (key ${r.idempotencyKey ?? '-'}): ${r.action} ${r.status ?? ''} applied ${r.applied}, until ${iso(r.endedAt)} (${r.endedBy})`,
    });
  }
  const times = lines.map((l) => l.t);
  if (v.window) times.push(...v.window);
  const from = (times.length ? Math.min(...times) : startedAt) - 5000;
  const to = (times.length ? Math.max(...times) : startedAt) + 5000;
  for (const f of input.faults) {
    if (f.endedAt < from || f.startedAt > to) continue;
    lines.push({
      t: f.startedAt,
      text: `FAULT #${f.n} ${f.kind}${f.target ? ` ${f.target}` : ''} hold ${f.holdMs} ms, until ${iso(f.endedAt)}${f.detail ? ` (${f.detail})` : ''}`,
    });
  }
  for (const e of input.processEvents) {
    if (e.t < from || e.t > to) continue;
    lines.push({
      t: e.t,
      text: `process ${e.name}#${e.generation} ${e.event}${e.signal ? ` ${e.signal}` : ''}${e.code !== undefined ? ` code ${e.code}` : ''}`,
    });
  }
  const state = deliveries.map(
    (d) =>
      `  final: delivery ${d.id} ${d.messageId} → ${endpointName(d.endpointId)}: ${d.state}, cycle ${d.cycle}, ${d.attemptsTotal} attempts, next ${iso(d.nextAttemptAt)}${d.endpointDisabled ? `, endpoint disabled (${d.disabledReason})` : ''}`,
  );
  return [
    ...lines
      .sort((a, b) => a.t - b.t)
      .map((l) => `  ${((l.t - startedAt) / 1000).toFixed(3).padStart(9)}s ${iso(l.t)}  ${l.text}`),
    ...state,
  ];
}

export interface RunInfo {
  seed: number;
  seconds: number;
  command: string;
  outDir: string;
  startedAt: number;
  elapsedMs: number;
  drained: boolean;
}

export function formatCounts(counts: Record<string, number>): string {
  return Object.entries(counts)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([k, v]) => `  ${k.padEnd(44)} ${v}`)
    .join('\n');
}

/** Prints the verdict and writes summary.json; returns the exit code. */
export function report(info: RunInfo, input: CheckInput, result: CheckResult): number {
  const byCheck = new Map<string, number>();
  for (const v of result.violations) byCheck.set(v.check, (byCheck.get(v.check) ?? 0) + 1);
  const summary = {
    seed: info.seed,
    seconds: info.seconds,
    ok: result.violations.length === 0,
    drained: info.drained,
    elapsedMs: info.elapsedMs,
    counts: result.counts,
    violationsByCheck: Object.fromEntries(byCheck),
    violations: result.violations.slice(0, 200),
    notes: result.notes.slice(0, 200),
    outDir: info.outDir,
  };
  fs.writeFileSync(path.join(info.outDir, 'summary.json'), `${JSON.stringify(summary, null, 2)}\n`);
  console.log(
    `\nsoak counts (seed ${info.seed}, ${info.seconds} s of load, ${(info.elapsedMs / 1000).toFixed(0)} s in all):`,
  );
  console.log(formatCounts(result.counts));
  if (result.notes.length > 0) {
    console.log(`\nnotes (${result.notes.length}, first 10):`);
    for (const note of result.notes.slice(0, 10)) console.log(`  ${note}`);
  }
  if (result.violations.length === 0) {
    console.log(`\nsoak passed: every check holds (seed ${info.seed}); logs in ${info.outDir}`);
    console.log(`SOAK_RESULT ${JSON.stringify({ ok: true, seed: info.seed, counts: result.counts })}`);
    return 0;
  }
  console.log(`\nsoak FAILED with seed ${info.seed}: ${result.violations.length} violations`);
  for (const [checkName, n] of byCheck) console.log(`  check ${checkName}: ${n}`);
  const first = result.violations[0]!;
  console.log(`\nfirst violation (check ${first.check}): ${first.title}\n  ${first.detail}`);
  console.log('history:');
  for (const line of historyOf(first, input, info.startedAt)) console.log(line);
  const others = result.violations.slice(1, 11);
  if (others.length > 0) {
    console.log('\nmore violations:');
    for (const v of others) console.log(`  [${v.check}] ${v.title}: ${v.detail.split('\n')[0]}`);
  }
  console.log(`\nreplay with: ${info.command}\nlogs, database snapshot and summary in ${info.outDir}`);
  console.log(
    `SOAK_RESULT ${JSON.stringify({ ok: false, seed: info.seed, counts: result.counts, violations: result.violations.length })}`,
  );
  return 1;
}
