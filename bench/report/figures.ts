// Raw results → the rows of the table and of latest.json, with their ratios:
// - deliveries/s (e2e) to the peer's jobs/s (higher is better) and to the HTTP limit, and the
//   median of that ratio over the interleaved pairs, with each pair's;
// - publish and intake per second to the commit limit taken right before them (the one at the
//   start when that was not taken);
// - latency percentiles to the peer's same percentile (lower is better);
// - CPU per operation of each process to the peer's same process (lower is better).

import type { BatchFigures } from '../batches.ts';
import type { Results } from '../context.ts';
import type { CpuPerOperation } from '../cpu.ts';
import { median, summarize } from '../stats.ts';

export interface Figure {
  name: string;
  value: number;
  unit: string;
  ratioToPeer?: number;
  ratioToLimit?: number;
}

const MIB = 1024 * 1024;
const n = (x: number) => x.toLocaleString('en-US');

function ratio(value: number, base: number | undefined): number | undefined {
  return base && Number.isFinite(value) && Number.isFinite(base) && base > 0 ? value / base : undefined;
}

function row(name: string, value: number, unit: string, toPeer?: number, toLimit?: number): Figure {
  const figure: Figure = { name, value, unit };
  if (toPeer !== undefined) figure.ratioToPeer = toPeer;
  if (toLimit !== undefined) figure.ratioToLimit = toLimit;
  return figure;
}

/**
 * One row per process of a figure's CPU per operation (bench/cpu.ts); with the peer's CPU per job,
 * each process's ratio to the peer's same process (lower is better).
 */
function cpuRows(
  out: Figure[],
  perWhat: string,
  cpu: CpuPerOperation | undefined,
  peerCpu?: CpuPerOperation,
): void {
  for (const [process, micros] of Object.entries(cpu ?? {})) {
    out.push(row(`  CPU per ${perWhat}: ${process}`, micros, 'µs', ratio(micros, peerCpu?.[process])));
  }
}

/** How herald batched the figure's writes: items that shared a commit, and the write's time. */
function batchRows(out: Figure[], batches: BatchFigures | undefined): void {
  if (!batches) return;
  out.push(row('  batched writes: items per write', batches.itemsPerWrite, 'items'));
  out.push(row('  batched writes: time per write, to its commit', batches.msPerWrite, 'ms'));
}

export function buildFigures(r: Results, concurrency: number): Figure[] {
  const out: Figure[] = [];
  const http = r.httpLimit?.perSecond;
  const commit = r.commitLimitBeforePublish?.perSecond ?? r.commitLimit?.perSecond;
  const peerRate = r.peer?.perSecond;
  const peerLat = r.peerLatency ? summarize(r.peerLatency) : undefined;

  if (r.httpLimit)
    out.push(row(`HTTP limit: bare keep-alive POST loop, c=${concurrency}`, r.httpLimit.perSecond, 'req/s'));
  cpuRows(out, 'request', r.httpLimit?.cpu);
  if (r.commitLimit)
    out.push(
      row(`commit limit: 1-row insert transactions, c=${concurrency}`, r.commitLimit.perSecond, 'commits/s'),
    );
  cpuRows(out, 'commit', r.commitLimit?.cpu);
  if (r.commitLimitBeforePublish)
    out.push(
      row(
        'commit limit again, right before publish and intake',
        r.commitLimitBeforePublish.perSecond,
        'commits/s',
      ),
    );
  cpuRows(out, 'commit', r.commitLimitBeforePublish?.cpu);
  if (r.peer) {
    out.push(
      row(
        `peer graphile-worker: ${n(r.peer.count)} jobs, 1 POST each`,
        r.peer.perSecond,
        'jobs/s',
        undefined,
        ratio(r.peer.perSecond, http),
      ),
    );
    cpuRows(out, 'job', r.peer.cpu);
  }
  if (peerLat) {
    for (const p of ['p50', 'p95', 'p99'] as const) {
      out.push(row(`peer add-to-receiver latency ${p}`, peerLat[p], 'ms'));
    }
  }
  if (r.peer)
    out.push(row('peer worker peak RSS (during its throughput run)', r.peer.peakRssBytes / MIB, 'MiB'));
  if (r.e2eOne) {
    out.push(
      row(
        `herald e2e E=1: ${n(r.e2eOne.count)} deliveries, 1 worker`,
        r.e2eOne.perSecond,
        'deliveries/s',
        // No ratio: one request at a time to its one endpoint, by design, against a peer and a
        // limit taken 32 at a time, would compare unlike things.
      ),
    );
    cpuRows(out, 'delivery', r.e2eOne.cpu, r.peer?.cpu);
    batchRows(out, r.e2eOne.batches);
  }
  if (r.e2eFan) {
    out.push(
      row(
        `herald e2e E=${n(r.e2eFan.endpoints)}: ${n(r.e2eFan.count)} deliveries, 1 worker`,
        r.e2eFan.perSecond,
        'deliveries/s',
        ratio(r.e2eFan.perSecond, peerRate),
        ratio(r.e2eFan.perSecond, http),
      ),
    );
    cpuRows(out, 'delivery', r.e2eFan.cpu, r.peer?.cpu);
    batchRows(out, r.e2eFan.batches);
  }
  if (r.pairs && r.pairs.length > 0) {
    // A pair that delivered nothing has no ratio (NaN): it is shown, and left out of the median.
    const ratios = r.pairs.map((p) => p.herald / p.peer).filter(Number.isFinite);
    out.push(
      row(
        `herald e2e E=1,000 ÷ peer: median of ${ratios.length} interleaved pairs`,
        median(ratios),
        '×',
        median(ratios),
      ),
    );
    for (const [i, p] of r.pairs.entries()) {
      out.push(
        row(
          `  pair ${i + 1}: peer ${n(Math.round(p.peer))} jobs/s, herald ${n(Math.round(p.herald))} deliveries/s`,
          p.herald / p.peer,
          '×',
        ),
      );
    }
  }
  if (r.publishHttp) {
    out.push(
      row(
        `herald publish over HTTP, c=${concurrency}`,
        r.publishHttp.perSecond,
        'msgs/s',
        undefined,
        ratio(r.publishHttp.perSecond, commit),
      ),
    );
    cpuRows(out, 'publish', r.publishHttp.cpu);
    batchRows(out, r.publishHttp.batches);
  }
  for (const [result, how] of [
    [r.publishLibrary, 'NOTIFY in the txn'],
    [r.publishLibraryWakeAfter, 'wake after COMMIT'],
  ] as const) {
    if (!result) continue;
    out.push(
      row(
        `herald publish, library in caller's txn, prepared (${how}), c=${concurrency}`,
        result.perSecond,
        'msgs/s',
        undefined,
        ratio(result.perSecond, commit),
      ),
    );
    cpuRows(out, 'publish', result.cpu);
  }
  if (r.latency) {
    const s = summarize(r.latency);
    for (const p of ['p50', 'p95', 'p99'] as const) {
      out.push(
        row(
          `herald publish-to-receiver latency ${p}`,
          s[p],
          'ms',
          peerLat ? ratio(s[p], peerLat[p]) : undefined,
        ),
      );
    }
  }
  if (r.intake) {
    out.push(
      row(
        `herald intake: signed /ingest, c=${concurrency}`,
        r.intake.perSecond,
        'req/s',
        undefined,
        ratio(r.intake.perSecond, commit),
      ),
    );
    cpuRows(out, 'request', r.intake.cpu);
    batchRows(out, r.intake.batches);
  }
  if (r.fanout) {
    const s = summarize(r.fanout.commitMs);
    out.push(row(`fan-out: publish to ${n(r.fanout.endpoints)} endpoints, time to commit p50`, s.p50, 'ms'));
    out.push(row(`fan-out: publish to ${n(r.fanout.endpoints)} endpoints, time to commit max`, s.max, 'ms'));
  }
  if (r.memory) {
    const m = r.memory;
    out.push(row(`herald worker peak RSS, ${n(m.pending)} pending deliveries`, m.peakRssBytes / MIB, 'MiB'));
    out.push(row('  herald worker RSS when it started', m.startRssBytes / MIB, 'MiB'));
    out.push(row(`  deliveries it finished, in ${Math.round(m.workedSeconds)} s`, m.delivered, 'deliveries'));
    const stages = [
      ['finished', 'after the finished work'],
      ['payloadRetention', 'after payload retention + VACUUM'],
      ['historyRetention', 'after history retention + VACUUM'],
    ] as const;
    for (const [stage, when] of stages) {
      for (const [measured, bytes] of Object.entries(m.sizes[stage])) {
        out.push(row(`  ${measured} ${when}`, bytes / MIB, 'MiB'));
      }
    }
  }
  return out;
}
