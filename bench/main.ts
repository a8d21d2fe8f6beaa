// `npm run bench [-- --quick]`: herald side by side with a peer (graphile-worker) and the
// machine's limits, in one run on one machine. It starts what it needs — a receiver process, a
// scratch database per purpose on the local PostgreSQL (DATABASE_URL or
// postgres://postgres@127.0.0.1:5432/test), `herald worker` and peer processes — runs each scenario
// for a fixed count, prints one table, writes bench-results/latest.json and latest.svg, and
// drops its databases. All traffic stays on 127.0.0.1.

import os from 'node:os';
import { parseOptions, type ScenarioName, wants } from './config.ts';
import type { Context, Results } from './context.ts';
import { createScratchDatabase, dropAllScratch, serverInfo } from './db.ts';
import { createAppWithEndpoints, heraldEnv, type InProcessHerald, startInProcess } from './herald-setup.ts';
import { type HeraldApi, killChildren, startHeraldApi } from './processes.ts';
import { startReceiver } from './receiver.ts';
import { buildFigures } from './report/figures.ts';
import { renderCdfSvg } from './report/svg.ts';
import { RATIO_LEGEND, renderTable } from './report/table.ts';
import { writeResults } from './report/write.ts';
import { e2e } from './scenarios/e2e.ts';
import { fanout } from './scenarios/fanout.ts';
import { intake } from './scenarios/intake.ts';
import { latency } from './scenarios/latency.ts';
import { commitLimit, commitLimitBeforePublish, httpLimit } from './scenarios/limits.ts';
import { memory } from './scenarios/memory.ts';
import { pairs } from './scenarios/pairs.ts';
import { peer } from './scenarios/peer.ts';
import { publish } from './scenarios/publish.ts';
import { nowMs } from './stats.ts';

// Each step runs when any of its scenarios is wanted.
const PLAN: Array<[ScenarioName[], string, (ctx: Context) => Promise<void>]> = [
  [['http-limit'], '1 HTTP limit', httpLimit],
  [['commit-limit'], '2 commit limit', commitLimit],
  [['peer'], '3 peer: graphile-worker', peer],
  [['e2e'], '4 herald end to end (E=1, E=1000)', e2e],
  [['pairs'], '3 + 4 peer and herald end to end (E=1000), interleaved pairs', pairs],
  [['latency'], '6 herald publish-to-receiver latency', latency],
  [['publish', 'intake'], '2 commit limit again, right before publish and intake', commitLimitBeforePublish],
  [['publish'], '5 herald publish throughput (HTTP, library)', publish],
  [['intake'], '7 herald intake', intake],
  [['fanout'], '8 fan-out to 1,000 endpoints', fanout],
  [['memory'], '9 worker memory with a large backlog', memory],
];

const log = (message: string) =>
  console.error(`[bench ${new Date().toISOString().slice(11, 19)}] ${message}`);

async function cleanUp(): Promise<void> {
  killChildren();
  await dropAllScratch();
}

let interrupted = false;
// Once interrupted, the scratch databases are dropped under running work: what fails then is moot.
process.on('unhandledRejection', (error) => {
  if (interrupted) return;
  throw error;
});
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    if (interrupted) process.exit(130);
    interrupted = true;
    log(`${signal}: cleaning up`);
    void cleanUp().finally(() => process.exit(130));
  });
}

async function main(): Promise<void> {
  const options = parseOptions(process.argv.slice(2));
  const startedAt = new Date();
  const t0 = nowMs();
  const server = await serverInfo(options.serverUrl);
  const free = server.maxConnections - server.connectionsInUse;
  log(
    `${options.quick ? 'quick' : 'full'} run, concurrency ${options.concurrency}, PostgreSQL ${server.version} ` +
      `(${server.connectionsInUse}/${server.maxConnections} connections in use)`,
  );
  if (free < 2 * options.concurrency + 10) {
    log(`warning: only ${free} free connections; the run needs about ${2 * options.concurrency + 10}`);
  }
  const results: Results = {};
  const notes: string[] = [];
  if (server.postmasterPid === null)
    notes.push("PostgreSQL's processes are not visible from here: its CPU per operation is not shown");
  const receiver = await startReceiver();
  let herald: InProcessHerald | null = null;
  let apiProcess: HeraldApi | null = null;
  let fanApp: string | null = null;
  try {
    const db = await createScratchDatabase(options.serverUrl, 'main');
    const ctx: Context = {
      options,
      receiver,
      db,
      postmasterPid: server.postmasterPid,
      results,
      notes,
      log,
      async herald() {
        herald ??= await startInProcess(heraldEnv(db.url, options.concurrency), options.concurrency);
        return herald;
      },
      async api() {
        apiProcess ??= await startHeraldApi(heraldEnv(db.url, options.concurrency), 2 * options.concurrency);
        return apiProcess;
      },
      async fanApp() {
        if (fanApp === null) {
          const h = await ctx.herald();
          const t = nowMs();
          await createAppWithEndpoints(h, 'bench-fan', options.counts.fanEndpoints, `${receiver.url}/fan`);
          log(`created ${options.counts.fanEndpoints} endpoints in ${((nowMs() - t) / 1000).toFixed(1)} s`);
          fanApp = 'bench-fan';
        }
        return fanApp;
      },
    };
    for (const [names, title, run] of PLAN) {
      if (!names.some((name) => wants(options, name)) || interrupted) continue;
      const started = nowMs();
      log(`${title} …`);
      try {
        await run(ctx);
        log(`${title}: done in ${((nowMs() - started) / 1000).toFixed(1)} s`);
      } catch (error) {
        notes.push(`${title} failed: ${(error as Error).message.split('\n')[0]}`);
        log(`${title} FAILED: ${(error as Error).stack ?? error}`);
      }
    }
  } finally {
    await (apiProcess as HeraldApi | null)
      ?.stop()
      .catch((error: Error) => log(`stopping herald api: ${error.message}`));
    await (herald as InProcessHerald | null)
      ?.close()
      .catch((error: Error) => log(`closing herald: ${error.message}`));
    await receiver.close();
    await cleanUp();
  }

  const durationSeconds = (nowMs() - t0) / 1000;
  const figures = buildFigures(results, options.concurrency);
  const cpus = os.cpus();
  const machine = {
    hostname: os.hostname(),
    cpu: cpus[0]?.model ?? 'unknown',
    cores: cpus.length,
    memoryGiB: Number((os.totalmem() / 1024 ** 3).toFixed(1)),
    os: `${os.type()} ${os.release()}`,
    node: process.version,
    postgres: server.version,
    synchronousCommit: server.synchronousCommit,
    mode: options.quick ? 'quick' : 'full',
    concurrency: options.concurrency,
    durationSeconds: Number(durationSeconds.toFixed(1)),
    heraldProcesses:
      'one `herald worker` process (bin/herald.mjs) per scenario; one `herald api` process for publish over HTTP and intake; the library in the bench process',
    notes,
  };
  const svg = renderCdfSvg(
    'Publish/add → receiver latency',
    `${machine.cpu}, ${machine.cores} cores · ${options.counts.latencyRate}/s open loop · ${startedAt.toISOString()}`,
    [
      { label: 'herald (publish → receiver)', color: '#d62728', values: results.latency ?? [] },
      { label: 'graphile-worker (addJob → receiver)', color: '#1f77b4', values: results.peerLatency ?? [] },
    ],
  );
  const written = writeResults(
    options.outDir,
    { machine, startedAt: startedAt.toISOString(), scenarios: figures },
    svg,
  );

  console.log(renderTable(figures));
  console.log(`\n${RATIO_LEGEND}`);
  for (const note of notes) console.log(`note: ${note}`);
  console.log(
    `\n${machine.cpu}, ${machine.cores} cores, ${machine.memoryGiB} GiB, ${machine.os}, node ${machine.node}, PostgreSQL ${server.version}`,
  );
  console.log(`wrote ${written.json} and ${written.svg}; took ${durationSeconds.toFixed(1)} s`);
  if (notes.some((n) => n.includes('failed'))) process.exitCode = 1;
}

main().catch(async (error: Error) => {
  log(`bench failed: ${error.stack ?? error.message}`);
  await cleanUp();
  process.exit(1);
});
