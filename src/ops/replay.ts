// Replay: start a new cycle for many finished deliveries at once — after an outage of a receiver,
// say. It is a business action, not maintenance: it names its selection explicitly, refuses a
// selection larger than the caller's cap (nobody replays a million deliveries by accident), can
// show what it would do first (dry run), and leaves one audit entry saying who did what. Each
// delivery restarts exactly as a resend restarts it (same message id and webhook-id, lifetime
// history kept); deliveries waiting or in flight are never selected.

import type { Logger } from 'pino';
import { z } from 'zod';
import { recordAudit } from '../db/audit.ts';
import { liftEndpointPause, restartDeliveries } from '../db/deliveries.ts';
import type { Queryable } from '../db/port.ts';
import {
  countPayloadGone,
  countReplay,
  countUnreviewed,
  endpointAppId,
  type FinishedState,
  listReplay,
  type ReplayPair,
  type ReplaySelection,
} from '../db/replay.ts';
import { isAppAllowed, requireApp } from '../engine/apps.ts';
import type { Actor } from '../engine/core.ts';
import { requireEndpoint } from '../engine/endpoints.ts';
import { HeraldError, invalidField } from '../errors.ts';
import { ID_PREFIX } from '../schemas/svix.ts';
import { isoTime, UNTIL_AFTER_SINCE } from '../schemas/window.ts';

/** How many message × endpoint pairs an answer lists; `count` is always the full number. */
export const PAIRS_SHOWN = 1000;

const STATES: Record<ReplayIn['status'], FinishedState[]> = {
  failed: ['failed'],
  succeeded: ['succeeded'],
  'all-finished': ['failed', 'succeeded'],
};

// Strict: a misspelt filter (`endpointId` for `endpoint`) must be refused, not ignored — ignoring
// it would widen the selection to more than the caller meant.
export const ReplayIn = z
  .object({
    status: z.enum(['failed', 'succeeded', 'all-finished']),
    cap: z.number().int().min(1).max(1_000_000),
    dryRun: z.boolean().optional(),
    app: z.string().min(1).max(256).nullish(),
    endpoint: z.string().min(1).max(256).nullish(),
    since: isoTime().nullish(),
    until: isoTime().nullish(),
    // By id only (no app to find an eventId in): anything else selects nothing, and a replay of
    // nothing is no answer to a mistyped id.
    messageIds: z
      .array(z.string().max(256).startsWith(ID_PREFIX.message, `a message id: ${ID_PREFIX.message}…`))
      .min(1)
      .max(1000)
      .nullish(),
    includeUnreviewed: z.boolean().optional(),
  })
  .strict()
  .refine(...UNTIL_AFTER_SINCE);
export type ReplayIn = z.infer<typeof ReplayIn>;

export interface ReplayResult {
  /** The audit entry's target: `rpl_…`. */
  id: string;
  dryRun: boolean;
  /** Deliveries selected (dry run) or restarted (real run). */
  count: number;
  /** Deliveries the filters match but replay leaves: their payload is gone (retention, expunge). */
  payloadGone: number;
  /**
   * Failed deliveries the filters match whose unknown outcomes await review (`herald reconcile`),
   * to endpoints that are not idempotent: left, or with `includeUnreviewed` among those replayed.
   */
  unreviewed: number;
  cap: number;
  /** Dry run: whether the real run would refuse this selection for exceeding the cap. */
  exceedsCap: boolean;
  /** At most PAIRS_SHOWN of them, by message then endpoint. */
  deliveries: Omit<ReplayPair, 'state'>[];
  truncated: boolean;
}

/** Resolves the filters into a selection the actor may touch; app-restricted keys stay in their apps. */
async function selectionFor(db: Queryable, actor: Actor, input: ReplayIn) {
  let appIds = actor.appIds;
  let appId: string | null = null;
  let endpointId: string | null = null;
  if (input.app) {
    const app = await requireApp(db, actor, input.app).catch((error) => {
      if (error instanceof HeraldError && error.kind === 'not_found') {
        throw invalidField(['app'], `application ${input.app} not found`);
      }
      throw error;
    });
    appId = app.id;
    appIds = [app.id];
    if (input.endpoint) {
      endpointId = (
        await requireEndpoint(db, app, input.endpoint).catch(() => {
          throw invalidField(['endpoint'], `endpoint ${input.endpoint} not found in ${input.app}`);
        })
      ).id;
    }
  } else if (input.endpoint) {
    // Without an app an endpoint is named by its id (uids are unique only within an app).
    const owner = await endpointAppId(db, input.endpoint);
    // Said with what it takes: a uid is what a person types, and finds nothing without its app.
    const missing = `endpoint ${input.endpoint} not found by its id (an endpoint's uid needs its app)`;
    if (owner === null || !isAppAllowed(actor, owner)) throw invalidField(['endpoint'], missing);
    appId = owner;
    endpointId = input.endpoint;
  }
  const selection: ReplaySelection = {
    states: STATES[input.status],
    appIds,
    endpointId,
    messageIds: input.messageIds ?? null,
    since: input.since ? new Date(input.since) : null,
    until: input.until ? new Date(input.until) : null,
    includeUnreviewed: input.includeUnreviewed ?? false,
  };
  return { selection, appId };
}

/** A replay's answer, and the endpoints whose rests liftRests is to end once it has committed. */
export interface ReplayRun {
  result: ReplayResult;
  endpoints: string[];
}

/**
 * Runs (or, with dryRun, only plans) a replay in the caller's transaction: the restarts and the
 * audit entry commit together or not at all; the rests of the endpoints it restarted deliveries
 * of are the caller's to lift after the commit (liftRests).
 */
export async function replay(tx: Queryable, actor: Actor, input: ReplayIn): Promise<ReplayRun> {
  const { selection, appId } = await selectionFor(tx, actor, input);
  const dryRun = input.dryRun ?? false;
  let count: number;
  let pairs: ReplayPair[];
  // Before the restarts, which end the review they bypass (when the selection includes them).
  const unreviewed = await countUnreviewed(tx, selection);
  if (dryRun) {
    count = await countReplay(tx, selection);
    pairs = await listReplay(tx, selection, PAIRS_SHOWN);
  } else {
    pairs = [];
    // Batch after batch until nothing selected is left: a restarted delivery is pending, out of
    // the selection. One pass is not enough: a row of the first batch that a resend or another
    // replay restarted between its two reads (listReplay) is passed over, the batch comes back
    // short of the cap, and the selection's rows beyond it would be left as they are, under an
    // audit entry that says the selection was replayed. One more than the cap left tells "too
    // many" without locking (or counting) a million rows.
    for (;;) {
      const locked = await listReplay(tx, selection, input.cap + 1 - pairs.length, true);
      if (locked.length === 0) break;
      if (pairs.length + locked.length > input.cap) {
        const total = pairs.length + (await countReplay(tx, selection));
        const said = `the selection has ${total} deliveries, more than the cap of ${input.cap}; narrow the filters or raise the cap`;
        throw new HeraldError('validation', `cap: ${said}`, [
          { loc: ['body', 'cap'], msg: said, type: 'value_error' },
        ]);
      }
      const restarted = await restartDeliveries(
        tx,
        locked.map((p) => p.deliveryId),
      );
      // The rows were locked in a finished state, so every one restarts; count what really did.
      const done = new Set(restarted.map((r) => r.deliveryId));
      pairs.push(...locked.filter((p) => done.has(p.deliveryId)));
      if (done.size === 0) break;
    }
    count = pairs.length;
  }
  const payloadGone = await countPayloadGone(tx, selection);
  const id = (await tx.query<{ id: string }>(`select herald_id('rpl') as id`)).rows[0]!.id;
  // The selection as the caller gave it, and how many it matched: never payloads.
  await recordAudit(tx, {
    actor: actor.id,
    // A dry run is on record too (who looked at what), as what it is: a plan, nothing started.
    action: dryRun ? 'replay.planned' : 'replay.started',
    appId,
    targetType: 'replay',
    targetId: id,
    details: {
      dryRun,
      count,
      payloadGone,
      unreviewed,
      cap: input.cap,
      filters: {
        status: input.status,
        app: input.app ?? null,
        endpoint: input.endpoint ?? null,
        since: input.since ?? null,
        until: input.until ?? null,
        messageIds: input.messageIds ?? null,
        includeUnreviewed: selection.includeUnreviewed,
      },
    },
  });
  return {
    result: {
      id,
      dryRun,
      count,
      payloadGone,
      unreviewed,
      cap: input.cap,
      exceedsCap: count > input.cap,
      deliveries: pairs.slice(0, PAIRS_SHOWN).map(({ state: _state, ...pair }) => pair),
      truncated: count > PAIRS_SHOWN,
    },
    endpoints: dryRun ? [] : [...new Set(pairs.map((p) => p.endpointId))].sort(),
  };
}

/**
 * A send now, as a resend or a recovery asks for one: the rests of the endpoints a replay restarted
 * deliveries of are lifted — after it has committed, each in a transaction of its own. Inside the
 * replay's transaction each lift held its endpoint's slot until the commit, many slots in endpoint
 * order, which a batch of outcome writes (in delivery order) or a claim (round the endpoints from
 * its cursor) could hold the other way round: a deadlock, and PostgreSQL aborted the replay or the
 * batch. A lift that fails is logged and left: the rest ends at its time anyway.
 */
export async function liftRests(db: Queryable, endpoints: readonly string[], log: Logger): Promise<void> {
  for (const endpointId of endpoints) {
    try {
      await liftEndpointPause(db, endpointId);
    } catch (error) {
      log.warn(
        { endpointId, err: (error as Error).message },
        'replay: the rest of an endpoint could not be lifted',
      );
    }
  }
}
