// A process that opens a Db (src/db/pg-pool.ts) on the URL it is given, with every kind of
// connection (the LISTEN one on two channels, two of the pool's, a pipeline's), says `ready`, and
// on a line on stdin lets go of one channel (`unlistened`), closes the Db (`closed`) and then
// simply ends: it must exit on its own, nothing left open. test/pg-pool.test.ts silences the
// database in between.

import { createPgDb } from '../../src/db/pg-pool.ts';

const db = createPgDb({ connectionString: process.argv[2]!, max: 2, queryTimeoutMs: 60_000 });
const stopA = await db.listen('goodbye_a', () => {});
await db.listen('goodbye_b', () => {});
await Promise.all([db.query('select pg_sleep(0.05)'), db.query('select pg_sleep(0.05)')]);
await db.pipeline().query('select 1');
process.stdout.write('ready\n');
process.stdin.once('data', async () => {
  process.stdin.destroy();
  await stopA();
  process.stdout.write('unlistened\n');
  await db.close();
  process.stdout.write('closed\n');
});
