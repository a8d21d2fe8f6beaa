// Group commit of publishes (src/db/group-commit.ts + publishMessages): concurrent publishes
// share one statement, each still gets its own result, a bad item fails alone, and an error
// that may have come after the commit is never retried behind the caller's back.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import pg from 'pg';
import { findApps } from '../src/db/apps.ts';
import { coalesced, createGroupCommit, type WriteLane } from '../src/db/group-commit.ts';
import { recordReceipts } from '../src/db/intake.ts';
import { type MessageRow, type NewMessage, type PublishResult, publishMessages } from '../src/db/messages.ts';
import { asQueryable, type Queryable } from '../src/db/port.ts';
import { publishGroup } from '../src/engine/publish.ts';
import { freshDatabase, type TestDatabase } from './support/database.ts';
import { newMessage, seedApp, seedEndpoint, seedReceipt, seedSource } from './support/seed.ts';
import { waitFor, waitForLockWaiter } from './support/wait.ts';

/** The message a publish result names (every kind but key_holder_gone names one). */
function messageOf(result: PublishResult): MessageRow {
  assert.ok('message' in result, `a publish answered ${result.kind}`);
  return result.message;
}

/** A write that waits until released, so that a test decides when a batch completes. */
function gatedWrite<I, O>(fn: (items: I[]) => O[] | Promise<O[]>) {
  const batches: I[][] = [];
  const lanes: WriteLane[] = [];
  const gates: (() => void)[] = [];
  return {
    batches,
    /** The lane of each write, in the order of `batches`. */
    lanes,
    write: async (items: I[], lane: WriteLane) => {
      batches.push(items);
      lanes.push(lane);
      await new Promise<void>((resolve) => gates.push(resolve));
      return fn(items);
    },
    releaseAll: () => {
      for (const open of gates.splice(0)) open();
    },
    /** The gates of the writes under way, in the order they were called; each opens one write. */
    gates: () => [...gates],
  };
}

const settle = () => new Promise((resolve) => setImmediate(resolve));

/** One writer on the pipeline, none beside: each test says what it changes. */
class Overloaded extends Error {}

const ONE_WRITER = {
  maxBatch: 100,
  pipelined: 1,
  beside: 0,
  besideStays: false,
  splitAt: 100,
  maxWaitMs: 60_000,
  maxQueued: 1000,
  overloaded: () => new Overloaded('too many waiting'),
} as const;

describe('group commit', () => {
  test('callers that arrive during a write share the next one, and each gets its own result', async () => {
    const gated = gatedWrite((items: number[]) => items.map((n) => n * 10));
    const submit = createGroupCommit(gated.write, ONE_WRITER);
    const first = submit(1);
    await settle();
    const rest = [2, 3, 4, 5].map((n) => submit(n));
    await settle();
    assert.deepEqual(gated.batches, [[1]], 'the first caller went at once, alone');
    gated.releaseAll();
    assert.equal(await first, 10);
    await settle();
    assert.deepEqual(gated.batches, [[1], [2, 3, 4, 5]], 'the next four shared one write');
    gated.releaseAll();
    assert.deepEqual(await Promise.all(rest), [20, 30, 40, 50]);
  });

  test('a batch takes items within batchSize, and one item at least whatever its size', async () => {
    const gated = gatedWrite((items: string[]) => items.map((s) => s.length));
    const submit = createGroupCommit(gated.write, {
      ...ONE_WRITER,
      batchSize: { of: (s) => s.length, max: 10 },
    });
    const first = submit('x');
    await settle();
    const rest = ['aaaa', 'bbbb', 'cccc', 'dddddddddddddddd', 'e'].map((s) => submit(s));
    await settle();
    const written = async (count: number) => {
      gated.releaseAll();
      await waitFor(`${count} writes`, () => gated.batches.length >= count);
    };
    for (let count = 2; count <= 5; count++) await written(count);
    gated.releaseAll();
    assert.equal(await first, 1);
    assert.deepEqual(await Promise.all(rest), [4, 4, 4, 16, 1]);
    assert.deepEqual(gated.batches, [['x'], ['aaaa', 'bbbb'], ['cccc'], ['dddddddddddddddd'], ['e']]);
  });

  test('a further writer starts only when splitAt callers wait, on the pipeline', async () => {
    const gated = gatedWrite((items: number[]) => items);
    const submit = createGroupCommit(gated.write, {
      ...ONE_WRITER,
      maxBatch: 10,
      pipelined: 2,
      beside: 1,
      splitAt: 3,
    });
    const all = [submit(1)];
    await settle();
    all.push(submit(2), submit(3));
    await settle();
    assert.deepEqual(gated.batches, [[1]], 'two waiting callers are fewer than splitAt: one writer');
    all.push(submit(4));
    await settle();
    assert.deepEqual(gated.batches, [[1], [2, 3, 4]], 'splitAt callers wait: a further writer takes them');
    assert.deepEqual(gated.lanes, ['pipelined', 'pipelined'], 'right behind the first, on the pipeline');
    all.push(submit(5), submit(6), submit(7));
    await settle();
    assert.equal(
      gated.batches.length,
      2,
      'no third writer: the pipeline is full, and splits never go beside it',
    );
    gated.releaseAll();
    await settle();
    gated.releaseAll();
    assert.deepEqual(await Promise.all(all), [1, 2, 3, 4, 5, 6, 7]);
    assert.deepEqual(gated.batches, [[1], [2, 3, 4], [5, 6, 7]]);
  });

  test('callers that wait maxWaitMs behind a long write get a writer beside it', async () => {
    const gated = gatedWrite((items: number[]) => items);
    const submit = createGroupCommit(gated.write, { ...ONE_WRITER, pipelined: 2, beside: 1, maxWaitMs: 30 });
    const long = submit(1);
    await settle();
    const waiting = [submit(2), submit(3)];
    await settle();
    assert.deepEqual(gated.batches, [[1]], 'at first they wait behind the write under way');
    await waitFor('a second writer', () => gated.batches.length === 2, 5000);
    assert.deepEqual(gated.batches, [[1], [2, 3]], 'then a second writer takes them, together');
    assert.deepEqual(gated.lanes, ['pipelined', 'beside'], 'beside the long write, not behind it');
    gated.releaseAll();
    assert.deepEqual(await Promise.all([long, ...waiting]), [1, 2, 3]);
  });

  for (const besideStays of [false, true]) {
    test(`a writer beside ${besideStays ? 'goes on with the queue' : 'takes one batch and leaves'} (besideStays: ${besideStays})`, async () => {
      const gated = gatedWrite((items: number[]) => items);
      const submit = createGroupCommit(gated.write, { ...ONE_WRITER, beside: 1, besideStays, maxWaitMs: 20 });
      const all = [submit(1)];
      await settle();
      all.push(submit(2), submit(3));
      await waitFor('a writer beside the first', () => gated.batches.length === 2, 5000);
      all.push(submit(4), submit(5));
      // Only the beside write's gate opens: the pipeline's long write is still under way.
      const [, besideGate] = gated.gates();
      besideGate!();
      await settle();
      await settle();
      if (besideStays) {
        assert.deepEqual(gated.batches, [[1], [2, 3], [4, 5]], 'the same writer went on with 4 and 5');
      } else {
        assert.deepEqual(gated.batches, [[1], [2, 3]], 'the writer beside did not go on with 4 and 5');
        await waitFor(
          'another writer beside, once 4 and 5 have waited',
          () => gated.batches.length === 3,
          5000,
        );
        assert.deepEqual(gated.batches[2], [4, 5]);
      }
      assert.deepEqual(gated.lanes, ['pipelined', 'beside', 'beside']);
      gated.releaseAll();
      assert.deepEqual(await Promise.all(all), [1, 2, 3, 4, 5]);
    });
  }

  test('no write is pipelined behind one that has run maxWaitMs: those callers go beside it', async () => {
    const gated = gatedWrite((items: number[]) => items);
    const submit = createGroupCommit(gated.write, {
      ...ONE_WRITER,
      pipelined: 2,
      beside: 1,
      splitAt: 2,
      maxWaitMs: 30,
    });
    const long = submit(1);
    await settle();
    // The write under way has run longer than maxWaitMs before these come.
    await new Promise((resolve) => setTimeout(resolve, 40));
    const waiting = [submit(2), submit(3)];
    await settle();
    assert.deepEqual(gated.batches, [[1]], 'splitAt callers wait, but not behind the long write');
    await waitFor('a writer beside the long write', () => gated.batches.length === 2, 5000);
    assert.deepEqual(gated.batches, [[1], [2, 3]]);
    assert.deepEqual(gated.lanes, ['pipelined', 'beside']);
    gated.releaseAll();
    assert.deepEqual(await Promise.all([long, ...waiting]), [1, 2, 3]);
  });

  test('past maxQueued callers waiting, a caller is refused at once, and the others are written', async () => {
    const gated = gatedWrite((items: number[]) => items);
    const submit = createGroupCommit(gated.write, { ...ONE_WRITER, maxQueued: 3 });
    const first = submit(1);
    await settle();
    // The first is being written; three wait, the most that may.
    const waiting = [submit(2), submit(3), submit(4)];
    await assert.rejects(submit(5), Overloaded);
    gated.releaseAll();
    assert.equal(await first, 1);
    await settle();
    gated.releaseAll();
    assert.deepEqual(await Promise.all(waiting), [2, 3, 4]);
    // Room again: a caller now waits its turn.
    const later = submit(6);
    await settle();
    gated.releaseAll();
    assert.equal(await later, 6);
    assert.deepEqual(gated.batches, [[1], [2, 3, 4], [6]]);
  });

  test('callers waiting hold four batches’ worth of batchSize at most: past that a caller is refused at once', async () => {
    const gated = gatedWrite((items: string[]) => items.map((item) => item.length));
    const submit = createGroupCommit(gated.write, {
      ...ONE_WRITER,
      batchSize: { of: (item: string) => item.length, max: 10 },
    });
    const first = submit('x'.repeat(10));
    await settle();
    // The first is being written, out of the queue; 40 characters' worth may wait.
    const waiting = [submit('a'.repeat(10)), submit('b'.repeat(25)), submit('c'.repeat(5))];
    // Refused at once: a caller let in would wait for the gate instead.
    await assert.rejects(Promise.race([submit('d'), settle()]), Overloaded);
    gated.releaseAll();
    assert.equal(await first, 10);
    // Taken into the next batch, a caller frees its room for another.
    await settle();
    assert.deepEqual(gated.batches.at(-1), ['a'.repeat(10)]);
    waiting.push(submit('f'.repeat(10)));
    let done = false;
    const all = Promise.all(waiting).finally(() => {
      done = true;
    });
    await waitFor('every waiting caller written', () => {
      gated.releaseAll();
      return done;
    });
    assert.deepEqual(await all, [10, 25, 5, 10]);
  });

  test('refuses a splitAt outside 1..maxBatch, and no writer on the pipeline', () => {
    const write = async (items: number[]) => items;
    const options = { ...ONE_WRITER, maxBatch: 10, pipelined: 2, beside: 1, splitAt: 5 };
    for (const splitAt of [0, 11]) {
      assert.throws(() => createGroupCommit(write, { ...options, splitAt }), RangeError);
    }
    assert.throws(() => createGroupCommit(write, { ...options, pipelined: 0 }), RangeError);
    assert.doesNotThrow(() => createGroupCommit(write, options));
  });

  test('a batch holds at most maxBatch items', async () => {
    const sizes: number[] = [];
    const submit = createGroupCommit(
      async (items: number[]) => {
        sizes.push(items.length);
        return items;
      },
      { ...ONE_WRITER, maxBatch: 3, splitAt: 3 },
    );
    assert.deepEqual(await Promise.all([1, 2, 3, 4, 5, 6, 7].map(submit)), [1, 2, 3, 4, 5, 6, 7]);
    assert.ok(Math.max(...sizes) <= 3, `batches of ${sizes.join(', ')}`);
  });

  test('when the database rejects a batch, each item is written alone and only the bad one fails, whatever the language of its severity', async () => {
    // A server with lc_messages other than English names its severity in that language.
    for (const severity of ['ERROR', 'FEHLER', 'ERREUR']) {
      const calls: string[][] = [];
      const submit = createGroupCommit(async (items: string[]) => {
        calls.push(items);
        if (items.includes('bad'))
          throw Object.assign(new Error('violates a constraint'), { severity, code: '23503' });
        return items.map((s) => s.toUpperCase());
      }, ONE_WRITER);
      const results = await Promise.allSettled(['a', 'bad', 'c'].map(submit));
      assert.deepEqual(
        results.map((r) => (r.status === 'fulfilled' ? r.value : (r.reason as Error).message)),
        ['A', 'violates a constraint', 'C'],
        severity,
      );
      assert.ok(
        calls.some((c) => c.length === 1 && c[0] === 'a'),
        `${severity}: a was retried on its own`,
      );
    }
  });

  test('the items of a batch refused for a lock it waited on are written alone beside the pipeline, not one after another on it', async () => {
    const calls: { items: string[]; lane: WriteLane }[] = [];
    const submit = createGroupCommit(
      async (items: string[], lane: WriteLane) => {
        calls.push({ items, lane });
        if (items.length > 1 || items[0] === 'held')
          throw Object.assign(new Error('canceling statement due to lock timeout'), {
            severity: 'ERROR',
            code: '55P03',
          });
        return items;
      },
      { ...ONE_WRITER, beside: 1 },
    );
    const first = submit('a');
    const rest = ['b', 'held', 'c'].map(submit);
    await first;
    const results = await Promise.allSettled(rest);
    assert.deepEqual(
      results.map((r) => r.status),
      ['fulfilled', 'rejected', 'fulfilled'],
    );
    assert.deepEqual(
      calls.filter((c) => c.items.length === 1 && c.items[0] !== 'a').map((c) => c.lane),
      ['beside', 'beside', 'beside'],
    );
  });

  test('a batch that timed out, or that the server was shutting down for or had no resources for, fails whole: its items are not written alone', async () => {
    for (const code of ['57014', '57P01', '53200']) {
      const calls: string[][] = [];
      const submit = createGroupCommit(async (items: string[]) => {
        calls.push(items);
        if (items.length > 1) throw Object.assign(new Error(`failed: ${code}`), { severity: 'ERROR', code });
        return items;
      }, ONE_WRITER);
      const first = submit('a');
      const rest = ['b', 'c', 'd'].map(submit);
      await first;
      const results = await Promise.allSettled(rest);
      assert.deepEqual(
        results.map((r) => r.status),
        ['rejected', 'rejected', 'rejected'],
      );
      assert.deepEqual(calls, [['a'], ['b', 'c', 'd']], `${code}: one write, not one per item after it`);
    }
  });

  test('every committed write is reported with its items and its time; a rejected one is not', async () => {
    const reported: { items: number; seconds: number }[] = [];
    const gated = gatedWrite((items: string[]) => {
      if (items.includes('bad'))
        throw Object.assign(new Error('violates a constraint'), { severity: 'ERROR', code: '23505' });
      return items;
    });
    const submit = createGroupCommit(gated.write, {
      ...ONE_WRITER,
      written: (results, seconds) => reported.push({ items: results.length, seconds }),
    });
    const first = submit('a');
    await settle();
    const rest = ['b', 'bad', 'c'].map(submit);
    // The first write is held open for 20 ms: its reported time covers the wait for its commit.
    await new Promise((resolve) => setTimeout(resolve, 20));
    gated.releaseAll();
    await first;
    // [b, bad, c] is rejected; then b, bad and c go alone, and only b and c commit.
    await waitFor('the batch and its items alone to be written', () => {
      gated.releaseAll();
      return gated.batches.length === 5;
    });
    gated.releaseAll();
    await Promise.allSettled(rest);
    assert.deepEqual(
      reported.map((r) => r.items),
      [1, 1, 1],
      'a; then b and c alone — never the rejected batch of three, nor bad',
    );
    assert.ok(reported[0]!.seconds >= 0.015, `the first write took ${reported[0]!.seconds} s`);
  });

  test('an error that may follow the commit fails every caller and is not retried', async () => {
    let writes = 0;
    const submit = createGroupCommit(async (items: string[]) => {
      writes++;
      await settle();
      throw Object.assign(new Error('Connection terminated unexpectedly'), { items });
    }, ONE_WRITER);
    const first = submit('a');
    const others = ['b', 'c'].map(submit);
    const results = await Promise.allSettled([first, ...others]);
    assert.ok(results.every((r) => r.status === 'rejected'));
    assert.equal(writes, 2, 'one write for a, one for b and c together; no retries');
  });
});

// One database for every test below that needs one: each works in apps of its own.
let database: TestDatabase;
before(async () => {
  database = await freshDatabase('group_commit');
});
after(async () => {
  await database.drop();
});

describe('publishMessages: several messages in one call', () => {
  const message = (appId: string, over: Partial<NewMessage> = {}): NewMessage & { actor: string } => ({
    ...newMessage(appId, { eventType: 'order.paid', payload: '{"n":1}', ...over }),
    actor: 'test',
  });

  test('each message gets its own fan-out by its own filters, and its own audit entry', async () => {
    const db = database.db;
    const app = await seedApp(db, 'multi');
    const other = await seedApp(db, 'multi-other');
    await seedEndpoint(db, app.id, 'http://127.0.0.1:1/a');
    await seedEndpoint(db, app.id, 'http://127.0.0.1:1/b');
    const filtered = await seedEndpoint(db, app.id, 'http://127.0.0.1:1/c');
    await db.query(`update endpoint set filter_types = '{order.refunded}' where id = $1`, [filtered.id]);
    await seedEndpoint(db, other.id, 'http://127.0.0.1:1/d');

    const results = await publishMessages(db, [
      message(app.id),
      message(app.id, { eventType: 'order.refunded' }),
      message(other.id),
    ]);
    assert.deepEqual(
      results.map((r) => (r.kind === 'created' ? r.deliveries : r.kind)),
      [2, 3, 1],
    );
    for (const r of results) {
      assert.equal(r.kind, 'created');
      const deliveries = await db.query<{ n: number }>(
        'select count(*)::int as n from delivery where message_id = $1',
        [r.message.id],
      );
      assert.equal(deliveries.rows[0]!.n, (r as { deliveries: number }).deliveries);
      const audit = await db.query<{ n: number }>(
        `select count(*)::int as n from audit_entry where action = 'message.created' and target_id = $1`,
        [messageOf(r).id],
      );
      assert.equal(audit.rows[0]!.n, 1, `audit entry of ${messageOf(r).id}`);
    }
    assert.equal(messageOf(results[2]!).appId, other.id);
  });

  test('one idempotency key twice in one batch: one message; same content replays, other content conflicts', async () => {
    const db = database.db;
    const app = await seedApp(db, 'multi-idem');
    await seedEndpoint(db, app.id, 'http://127.0.0.1:1/a');
    const hash = (s: string) => Buffer.from(s.padEnd(32, '.'));
    const results = await publishMessages(db, [
      message(app.id, { idempotencyKey: 'k1', requestHash: hash('one') }),
      message(app.id, { idempotencyKey: 'k1', requestHash: hash('one') }),
      message(app.id, { idempotencyKey: 'k1', requestHash: hash('two') }),
    ]);
    assert.deepEqual(
      results.map((r) => r.kind),
      ['created', 'replayed', 'conflict'],
    );
    assert.equal(messageOf(results[1]!).id, messageOf(results[0]!).id);
    const stored = await db.query<{ n: number }>(
      `select count(*)::int as n from message where app_id = $1 and idempotency_key = 'k1'`,
      [app.id],
    );
    assert.equal(stored.rows[0]!.n, 1);
  });

  test('through the group commit, a message for a vanished app fails alone', async () => {
    const db = database.db;
    const app = await seedApp(db, 'multi-vanished');
    await seedEndpoint(db, app.id, 'http://127.0.0.1:1/a');
    // On a real pipeline, as publishes go: the rejected batch and then its items alone, each
    // statement its own transaction on the one connection.
    const pipeline = db.pipeline();
    const submit = createGroupCommit(
      (items: (NewMessage & { actor: string })[]) => publishMessages(pipeline, items),
      ONE_WRITER,
    );
    const results = await Promise.allSettled([
      submit(message(app.id)),
      submit(message(app.id)),
      submit(message('app_does_not_exist')),
      submit(message(app.id)),
    ]).finally(() => pipeline.close());
    assert.deepEqual(
      results.map((r) => r.status),
      ['fulfilled', 'fulfilled', 'rejected', 'fulfilled'],
    );
    assert.equal(((results[2] as PromiseRejectedResult).reason as { code?: string }).code, '23503');
    const stored = await db.query<{ n: number }>('select count(*)::int as n from message where app_id = $1', [
      app.id,
    ]);
    assert.equal(stored.rows[0]!.n, 3, 'the good messages were published, once each');
  });
});

describe('recordReceipts: a batch of receipts in one call', () => {
  test('the first receipt of an id claims and relays; a repeat in the batch and an earlier claim are duplicates', async () => {
    const db = database.db;
    const app = await seedApp(db, 'intake-batch');
    await seedEndpoint(db, app.id, 'http://127.0.0.1:1/intake');
    const source = await seedSource(db, app.id, 'intake-batch');
    const receipt = (deliveryId: string, businessKey = deliveryId) =>
      seedReceipt(source.id, deliveryId, businessKey);
    const [earlier] = await recordReceipts(db, [receipt('d-old')], 90);
    assert.equal(earlier!.claimed, true);
    assert.equal(earlier!.relayed, true);

    const results = await recordReceipts(
      db,
      [receipt('d-b'), receipt('d-a'), receipt('d-b'), receipt('d-old'), receipt('d-c', 'd-a')],
      90,
    );
    assert.deepEqual(
      results.map((r) => [r.claimed, r.relayed]),
      [
        [true, true],
        [true, true],
        [false, false],
        [false, false],
        [true, false],
      ],
    );
    assert.equal(
      results[2]!.intakeId,
      results[0]!.intakeId,
      'the repeat points at the claim made in this batch',
    );
    assert.equal(results[2]!.messageId, results[0]!.messageId);
    assert.equal(results[3]!.intakeId, earlier!.intakeId, 'the earlier claim is found');
    assert.equal(results[3]!.messageId, earlier!.messageId);
    assert.equal(
      results[4]!.messageId,
      results[1]!.messageId,
      'another id with the same business key joins its message',
    );
    const stored = await db.query<{
      claims: number;
      observations: number;
      messages: number;
      deliveries: number;
    }>(
      `select (select count(*)::int from intake where source_id = $1) as claims,
              (select count(*)::int from intake_observation o join intake i on i.id = o.intake_id
                where i.source_id = $1) as observations,
              (select count(*)::int from message where app_id = $2) as messages,
              (select count(*)::int from delivery where app_id = $2) as deliveries`,
      [source.id, app.id],
    );
    assert.deepEqual(stored.rows[0], { claims: 4, observations: 6, messages: 3, deliveries: 3 });
  });
});

describe('publishGroup: the apps of a batch looked up together', () => {
  test("by id or uid; a missing app or one out of the key's reach fails its own publish only", async () => {
    const db = database.db;
    const a = await seedApp(db, 'grp-a');
    const b = await seedApp(db, 'grp-b');
    await seedEndpoint(db, a.id, 'http://127.0.0.1:1/a');
    const admin = { id: 'test', scopes: ['admin'] as const, appIds: null };
    const onlyB = { id: 'test-b', scopes: ['publish'] as const, appIds: [b.id] };
    const messageFor = (app: { id: string }) => newMessage(app.id, { eventType: 'order.paid' });
    const outcomes = await publishGroup(
      db,
      [
        { appRef: 'grp-a', actor: admin, messageFor, size: 2 },
        { appRef: a.id, actor: admin, messageFor, size: 2 },
        { appRef: 'grp-missing', actor: admin, messageFor, size: 2 },
        { appRef: 'grp-a', actor: onlyB, messageFor, size: 2 },
        { appRef: 'grp-b', actor: onlyB, messageFor, size: 2 },
      ],
      (refs) => findApps(db, refs),
    );
    const kinds = outcomes.map((o) => (o instanceof Error ? (o as { kind?: string }).kind : o.kind));
    assert.deepEqual(kinds, ['created', 'created', 'not_found', 'not_found', 'created']);
    const appOf = (o: (typeof outcomes)[number]) => (o instanceof Error ? null : messageOf(o).appId);
    assert.deepEqual(outcomes.map(appOf), [a.id, a.id, null, null, b.id]);
  });
});

describe('coalesced calls', () => {
  test('calls during a run share one run after it; every caller’s run starts after its call', async () => {
    const starts: number[] = [];
    const ends: (() => void)[] = [];
    const call = coalesced(async () => {
      starts.push(starts.length);
      await new Promise<void>((resolve) => ends.push(resolve));
    });
    const first = call();
    assert.equal(starts.length, 1, 'an idle call runs at once');
    const overlapping = Array.from({ length: 5 }, () => call());
    assert.equal(starts.length, 1, 'calls during a run do not start runs of their own');
    ends.shift()!();
    await first;
    await waitUntil(() => starts.length === 2);
    assert.equal(starts.length, 2, 'the overlapping calls share one run after the first');
    ends.shift()!();
    await Promise.all(overlapping);
    assert.equal(starts.length, 2);
  });

  test('a failed run fails its callers, and the next call runs again', async () => {
    let runs = 0;
    const call = coalesced(async () => {
      runs++;
      throw new Error(`run ${runs} failed`);
    });
    await assert.rejects(call(), /run 1 failed/);
    await assert.rejects(call(), /run 2 failed/);
  });
});

/** Lets queued promise reactions run until `done()` (microtasks only: no timers involved). */
async function waitUntil(done: () => boolean): Promise<void> {
  for (let i = 0; i < 100 && !done(); i++) await Promise.resolve();
}

// Batches take their rows' index entries in one order (key order), never crosswise: a batch
// waiting for a key another transaction holds has taken nothing after it, so it blocks nobody
// there. Shown with a third transaction that may wait at most 2 s: in item order it would wait for
// the waiting batch's uncommitted key (and two such batches would deadlock).
describe('lock order: concurrent batches cannot deadlock', () => {
  /** Runs `fn` with a held transaction and a third connection that gives up waiting after 2 s. */
  async function withHolderAndThird(
    fn: (holder: Queryable, third: Queryable) => Promise<void>,
  ): Promise<void> {
    const holder = new pg.Client({ connectionString: database.url });
    const third = new pg.Client({ connectionString: database.url });
    await holder.connect();
    await third.connect();
    try {
      await holder.query('begin');
      await third.query(`set lock_timeout = '2s'`);
      await fn(asQueryable(holder), asQueryable(third));
    } finally {
      await holder.end();
      await third.end();
    }
  }

  test('publish: a batch waiting on its first key holds none of the later ones', async () => {
    const app = await seedApp(database.db, 'lock-order');
    const keyed = (key: string) => ({
      ...newMessage(app.id, { idempotencyKey: key, requestHash: Buffer.alloc(32) }),
      actor: 'test',
    });
    await withHolderAndThird(async (holder, third) => {
      await publishMessages(holder, [keyed('k1')]);
      // Item order k2, k1; key order k1, k2: it waits on k1 before touching k2.
      const waiting = publishMessages(database.db, [keyed('k2'), keyed('k1')]);
      await waitForLockWaiter(database.db, 'herald_publish_messages');
      const [alone] = await publishMessages(third, [keyed('k2')]);
      assert.equal(alone?.kind, 'created', 'k2 was free while the batch waited on k1');
      await holder.query('commit');
      assert.deepEqual(
        (await waiting).map((r) => r.kind),
        ['replayed', 'replayed'],
        'the waiting batch then finds both keys taken',
      );
    });
  });

  test('receipts: a batch waiting on its first delivery id holds none of the later ones', async () => {
    const app = await seedApp(database.db, 'lock-order-in');
    const source = await seedSource(database.db, app.id, 'lock-order-in');
    await withHolderAndThird(async (holder, third) => {
      await recordReceipts(holder, [seedReceipt(source.id, 'd1')], 1);
      const waiting = recordReceipts(
        database.db,
        [seedReceipt(source.id, 'd2'), seedReceipt(source.id, 'd1')],
        1,
      );
      await waitForLockWaiter(database.db, 'herald_record_receipts');
      const [alone] = await recordReceipts(third, [seedReceipt(source.id, 'd2')], 1);
      assert.equal(alone?.claimed, true, 'd2 was free while the batch waited on d1');
      await holder.query('commit');
      assert.deepEqual(
        (await waiting).map((r) => r.claimed),
        [false, false],
        'the waiting batch then finds both delivery ids claimed',
      );
    });
  });
});

test('a receipt whose business key’s message was deleted while it joined it is refused (40001), not acknowledged without a message', async () => {
  const own = await freshDatabase('receipt_holder_gone');
  try {
    const app = await seedApp(own.db, 'holder-gone');
    const source = await seedSource(own.db, app.id, 'holder-gone');
    // What herald_publish_messages answers when an item's key was taken as it inserted and its
    // holder gone when it read it back (history retention committed in between): no id.
    await own.db.query('alter function herald_publish_messages(jsonb, boolean) rename to publish_as_it_was');
    await own.db.query(`create function herald_publish_messages(items jsonb, wake boolean)
      returns table (ord int, created boolean, id text, app_id text, event_type text, event_id text,
                     payload text, channels text[], tags text[], created_at timestamptz, request_hash bytea,
                     deliveries int, event_id_taken boolean)
      language sql as $$
        select (x->>'ord')::int, false, null::text, null::text, null::text, null::text, null::text, null::text[],
               null::text[], null::timestamptz, null::bytea, 0, false
          from jsonb_array_elements(items) x
      $$`);
    await assert.rejects(
      recordReceipts(own.db, [seedReceipt(source.id, 'd1')], 1),
      (error: { code?: string }) => {
        assert.equal(error.code, '40001');
        return true;
      },
    );
    const claims = await own.db.query('select 1 from intake');
    assert.equal(claims.rowCount, 0, 'no claim was left without its message');
  } finally {
    await own.drop();
  }
});
