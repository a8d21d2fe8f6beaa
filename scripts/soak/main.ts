// The soak: herald under load and faults, then a history check.
//
//   npm run soak -- --seconds 60 --seed 1
//
// It starts a throwaway PostgreSQL cluster, two API and two worker processes whose database
// connections go through a TCP proxy, and one receiver per endpoint behaviour. For --seconds it
// publishes and ingests while a seeded fault injector kills, cuts, restarts and pauses; then the
// faults stop, the system drains, and the checker compares the client's log, the receivers' logs
// and the database. Exit 0: every check holds. Exit 1: a violation (the seed and its history are
// printed). Exit 2: the soak itself could not run.

import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { freePort, runHerald } from '../../test/support/processes.ts';
import { startTcpProxy } from '../../test/support/tcp-proxy.ts';
import { check, takeSnapshot } from './checker.ts';
import { type PgCluster, startCluster } from './cluster.ts';
import { createInjector, FAULT_KINDS, type FaultKind, planFaults } from './faults.ts';
import { now, sleep } from './journal.ts';
import { createClient, createLoad } from './load.ts';
import { createFleet, type Fleet } from './processes.ts';
import { startReceivers } from './receivers.ts';
import { report } from './report.ts';
import { setUp, subscribeLate } from './setup.ts';

const LEASE_SECONDS = 3;
const RETRY_SCHEDULE = '0.2,0.5,1,1,2,2,3';

const { values: args } = parseArgs({
  options: {
    seconds: { type: 'string', default: '60' },
    seed: { type: 'string' },
    rate: { type: 'string', default: '4' },
    'ingest-rate': { type: 'string', default: '1' },
    'drain-seconds': { type: 'string', default: '180' },
    out: { type: 'string' },
    'keep-db': { type: 'boolean', default: false },
    'no-faults': { type: 'boolean', default: false },
    faults: { type: 'string' },
    help: { type: 'boolean', default: false },
  },
  strict: true,
});

if (args.help) {
  console.log(`usage: npm run soak -- [options]
  --seconds N         seconds of load and faults (default 60)
  --seed S            seeds every choice; printed, and random when not given
  --rate R            publishes per second (default 4)
  --ingest-rate R     new inbound business events per second (default 1)
  --drain-seconds N   longest wait for the backlog after the faults stop (default 180)
  --faults LIST       only these fault kinds (${FAULT_KINDS.join(',')})
  --no-faults         load only: a baseline
  --out DIR           where the logs, the database snapshot and summary.json go
  --keep-db           keep the PostgreSQL cluster's files`);
  process.exit(0);
}

function positive(name: string, raw: string | undefined, integer = false): number {
  const value = Number(raw);
  if (!Number.isFinite(value) || value <= 0 || (integer && !Number.isInteger(value))) {
    console.error(`soak: --${name} expects a positive ${integer ? 'integer' : 'number'}, got ${raw}`);
    process.exit(2);
  }
  return value;
}

const seconds = positive('seconds', args.seconds, true);
const seed = args.seed === undefined ? crypto.randomInt(1, 2 ** 31) : positive('seed', args.seed, true);
const publishRate = positive('rate', args.rate);
const ingestRate = positive('ingest-rate', args['ingest-rate']);
const drainSeconds = positive('drain-seconds', args['drain-seconds'], true);
const faultsOn = !args['no-faults'];
const faultKinds = (args.faults?.split(',').map((k) => k.trim()) ?? [...FAULT_KINDS]) as FaultKind[];
for (const kind of faultKinds) {
  if (!FAULT_KINDS.includes(kind)) {
    console.error(`soak: --faults expects a comma-separated list of ${FAULT_KINDS.join(', ')}; got ${kind}`);
    process.exit(2);
  }
}
const command =
  `npm run soak -- --seconds ${seconds} --seed ${seed}` +
  (args.rate !== '4' ? ` --rate ${publishRate}` : '') +
  (args['ingest-rate'] !== '1' ? ` --ingest-rate ${ingestRate}` : '') +
  (args['drain-seconds'] !== '180' ? ` --drain-seconds ${drainSeconds}` : '') +
  (args.faults ? ` --faults ${faultKinds.join(',')}` : '') +
  (faultsOn ? '' : ' --no-faults');

const outDir =
  args.out ?? path.join(os.tmpdir(), `herald-soak-${seed}-${new Date().toISOString().replace(/[:.]/g, '-')}`);
fs.mkdirSync(outDir, { recursive: true });
const soakStart = now();
const logFile = fs.createWriteStream(path.join(outDir, 'soak.log'), { flags: 'a' });
const log = (msg: string) => {
  const line = `[soak +${((now() - soakStart) / 1000).toFixed(1)}s] ${msg}`;
  console.log(line);
  logFile.write(`${line}\n`);
};

// Cleanup that must run however the soak ends: synchronous pieces for a hard exit.
let cluster: PgCluster | null = null;
let fleet: Fleet | null = null;
process.on('exit', () => {
  fleet?.killAllSync();
  if (!args['keep-db']) cluster?.stopSync();
});
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.on(signal, () => {
    log(`${signal}: stopping`);
    process.exit(2);
  });
}
// A soak that cannot finish must not run forever: load + drain + generous room for set-up.
const hardDeadlineMs = (seconds + drainSeconds + 240) * 1000;
setTimeout(() => {
  log(`the soak exceeded its hard deadline of ${hardDeadlineMs / 1000} s`);
  process.exit(2);
}, hardDeadlineMs).unref();

async function main(): Promise<number> {
  log(
    `seed ${seed}: ${seconds} s of load (${publishRate} publishes/s, ${ingestRate} inbound events/s), faults ${faultsOn ? 'on' : 'off'}; logs in ${outDir}`,
  );
  cluster = await startCluster({ port: await freePort(), log });
  log(`PostgreSQL up on 127.0.0.1:${cluster.port}`);
  const masterKey = crypto.randomBytes(32).toString('base64');
  const adminKey = `soak-admin-${crypto.randomBytes(12).toString('hex')}`;
  const migrated = await runHerald(['migrate'], {
    DATABASE_URL: cluster.url,
    HERALD_MASTER_KEY: masterKey,
    LOG_LEVEL: 'warn',
  });
  if (migrated.code !== 0) throw new Error(`herald migrate failed: ${migrated.stderr}`);
  log('migrated');

  const proxy = await startTcpProxy({ host: '127.0.0.1', port: cluster.port });
  const farm = await startReceivers(seed, outDir);
  fleet = await createFleet({
    outDir,
    log,
    env: {
      DATABASE_URL: proxy.urlFor(cluster.url),
      HERALD_MASTER_KEY: masterKey,
      HERALD_ADMIN_KEY: adminKey,
      HERALD_ALLOW_PRIVATE_NETWORKS: '127.0.0.0/8',
      HERALD_LEASE_SECONDS: String(LEASE_SECONDS),
      HERALD_ATTEMPT_TIMEOUT_MS: '2000',
      HERALD_RETRY_SCHEDULE: RETRY_SCHEDULE,
      HERALD_POLL_INTERVAL_MS: '100',
      HERALD_DISABLE_AFTER_FAILURES: '1000',
      HERALD_DB_POOL_SIZE: '5',
      HOST: '127.0.0.1',
      LOG_LEVEL: 'info',
    },
  });
  await fleet.start();
  log(`herald up: ${fleet.apiUrls.join(', ')} and 2 workers, database through proxy :${proxy.port}`);

  const client = createClient(fleet.apiUrls, adminKey, outDir);
  const model = await setUp(client, farm);
  log(`app ${model.appId}, ${model.endpoints.length} endpoints, source ${model.sourceId}`);

  const durationMs = seconds * 1000;
  const plan = faultsOn ? planFaults(seed, durationMs, LEASE_SECONDS, faultKinds) : [];
  fs.writeFileSync(path.join(outDir, 'fault-plan.json'), `${JSON.stringify(plan, null, 2)}\n`);
  const injector = createInjector({ plan, fleet, proxy, cluster, outDir, log });
  const load = createLoad({
    seed,
    client,
    appUid: model.appUid,
    sourceUid: model.sourceUid,
    sourceSecret: model.sourceSecret,
    publishRate,
    ingestRate,
    durationMs,
    maxInFlight: 32,
    midway: { atMs: Math.round(durationMs * 0.4), run: () => subscribeLate(client, farm, model) },
  });
  const startedAt = now();
  const faults = injector.run(startedAt);
  await load.run();
  injector.stop();
  await faults;
  log(
    `load done: ${load.publishes.length} publishes, ${load.events.length} inbound events (${load.skipped} ticks skipped at the in-flight cap); ${injector.records.records.length} faults`,
  );

  await fleet.ensureAllRunning();
  const db = new pg.Client({ connectionString: cluster.url });
  await db.connect();
  const drained = await drain(db, model.appId, drainSeconds * 1000);
  await fleet.stopAll();
  await farm.close();
  await proxy.close();
  await client.requests.close();
  await injector.records.close();

  const snapshot = await takeSnapshot(db, model.appId);
  await db.end();
  fs.writeFileSync(path.join(outDir, 'db-snapshot.json'), JSON.stringify(snapshot));
  const input = {
    model,
    publishes: load.publishes,
    events: load.events,
    clientRequests: client.requests.records,
    received: farm.requests.records,
    faults: injector.records.records,
    processEvents: fleet.events.records,
    leaseSeconds: LEASE_SECONDS,
    snapshot,
  };
  const result = check(input);
  result.counts['run.drained'] = drained ? 1 : 0;
  result.counts['run.load_ticks_skipped'] = load.skipped;
  const code = report(
    { seed, seconds, command, outDir, startedAt, elapsedMs: now() - soakStart, drained },
    input,
    result,
  );
  await cluster.stop(args['keep-db']);
  cluster = null;
  return code;
}

/** Waits until nothing is in flight and nothing is waiting on an enabled endpoint; bounded. */
async function drain(db: pg.Client, appId: string, timeoutMs: number): Promise<boolean> {
  const deadline = now() + timeoutMs;
  let lastLog = 0;
  for (;;) {
    const { rows } = await db.query(
      `select count(*) filter (where d.state = 'sending')::int as sending,
              count(*) filter (where d.state = 'pending' and not e.disabled)::int as waiting,
              count(*) filter (where d.state = 'pending' and e.disabled)::int as parked
         from delivery d join endpoint e on e.id = d.endpoint_id where d.app_id = $1`,
      [appId],
    );
    const { sending, waiting, parked } = rows[0] as { sending: number; waiting: number; parked: number };
    if (sending === 0 && waiting === 0) {
      log(`drained: nothing in flight or due (${parked} waiting on a disabled endpoint)`);
      return true;
    }
    if (now() > deadline) {
      log(`drain deadline passed with ${sending} in flight and ${waiting} waiting`);
      return false;
    }
    if (now() - lastLog > 5000) {
      lastLog = now();
      log(
        `draining: ${sending} in flight, ${waiting} waiting on enabled endpoints, ${parked} on disabled ones`,
      );
    }
    await sleep(250);
  }
}

let exitCode = 2;
try {
  exitCode = await main();
} catch (error) {
  log(`the soak could not run: ${(error as Error).stack ?? error}`);
  log(`seed ${seed}; logs in ${outDir}`);
  exitCode = 2;
}
await new Promise<void>((resolve) => logFile.end(resolve));
process.exit(exitCode);
