// The per-origin gate in front of the sender's undici Agent.
//
// The Agent opens at most `connectionsPerOrigin` connections to one origin, but a worker may hold
// many more claims than that whose endpoints share one origin (one receiving service behind many
// URLs). Handed to undici at once, the surplus would wait in undici's pool queue while their
// deadlines ran, and a request that never left herald would end as a `timeout` — a known failure
// of an endpoint that did nothing wrong. So requests wait here instead, in FIFO order, at most
// `limit` of one origin inside undici at a time, and the attempt's deadline starts only once a
// request is let through.
//
// A request may carry the latest moment it may start (`startBy`, on the steady clock of
// domain/steady-clock.ts: beyond it, its deadline no longer fits in the worker's lease). If its
// turn has not come by then, it leaves the queue at that moment, not let through: nothing was
// sent, and the caller gives the work back.
//
// An origin's lane exists only while someone is in it or waiting for it, so memory is bounded by
// the origins in use, not by every origin ever seen.

import { steadyNow } from '../domain/steady-clock.ts';

export type GateEntry =
  /** Let through: the request may go to undici now; `leave()` once it is completely done. */
  | { entered: true; waitedMs: number; leave: () => void }
  /** Its startBy passed before its turn came: it must not be sent. */
  | { entered: false; waitedMs: number };

export interface OriginGate {
  enter(origin: string, startBy?: Date): Promise<GateEntry>;
  /**
   * Lets no request with a startBy in from now on: those waiting leave at once, not let through,
   * and later ones are turned away as they come. Requests without a startBy wait as before.
   */
  closeDoors(): void;
  /** Lets requests in again (a worker started again after a stop). */
  openDoors(): void;
  /** Resolves once no origin has a request inside or waiting. */
  idle(): Promise<void>;
  /** Lanes alive now (origins with a request inside or waiting). */
  readonly origins: number;
}

const MAX_TIMER_MS = 2 ** 31 - 1;

interface Waiter {
  /** ms since the epoch; +Infinity: no limit. */
  startBy: number;
  queuedAt: number;
  settle: (entry: GateEntry) => void;
}

interface Lane {
  inside: number;
  /** A Set keeps insertion order (FIFO) and removes an expired waiter in O(1). */
  waiting: Set<Waiter>;
}

export function createOriginGate(limit: number): OriginGate {
  const lanes = new Map<string, Lane>();
  let idleWaiters: (() => void)[] = [];
  /** Waiters in every lane. */
  let waiting = 0;
  // ONE timer for the whole gate, due at the earliest startBy of those waiting: a busy worker has
  // hundreds of requests waiting at once, and a timer each cost ~3 % of its CPU.
  let expiry: { at: number; timer: ReturnType<typeof setTimeout> } | null = null;
  let doorsClosed = false;

  function expireAt(at: number): void {
    if (!Number.isFinite(at) || (expiry !== null && expiry.at <= at)) return;
    if (expiry !== null) clearTimeout(expiry.timer);
    // A startBy beyond what a timer can hold (about 24.8 days) is looked at again then.
    const delay = Math.min(Math.max(0, at - steadyNow()), MAX_TIMER_MS);
    expiry = { at, timer: setTimeout(turnAwayExpired, delay) };
  }

  /** Takes every waiter whose startBy has come out of its queue, unsent; waits for the next one. */
  function turnAwayExpired(): void {
    expiry = null;
    const now = steadyNow();
    let next = Number.POSITIVE_INFINITY;
    for (const [origin, lane] of lanes) {
      for (const waiter of lane.waiting) {
        if (waiter.startBy > now) {
          next = Math.min(next, waiter.startBy);
          continue;
        }
        turnAway(lane, waiter, now);
      }
      dropIfIdle(origin, lane);
    }
    expireAt(next);
  }

  /** Takes a waiter out of its queue, not let through: it must not be sent. */
  function turnAway(lane: Lane, waiter: Waiter, now: number): void {
    lane.waiting.delete(waiter);
    waiting--;
    waiter.settle({ entered: false, waitedMs: now - waiter.queuedAt });
  }

  /** Nobody waits any more: no timer keeps the process alive. */
  function stopExpiryIfNoneWait(): void {
    if (waiting > 0 || expiry === null) return;
    clearTimeout(expiry.timer);
    expiry = null;
  }

  function dropIfIdle(origin: string, lane: Lane): void {
    if (lane.inside > 0 || lane.waiting.size > 0) return;
    lanes.delete(origin);
    if (lanes.size === 0 && idleWaiters.length > 0) {
      const waiters = idleWaiters;
      idleWaiters = [];
      for (const resolve of waiters) resolve();
    }
  }

  function admit(origin: string, lane: Lane, queuedAt: number): GateEntry {
    lane.inside++;
    let inside = true;
    return {
      entered: true,
      waitedMs: steadyNow() - queuedAt,
      leave() {
        if (!inside) return;
        inside = false;
        lane.inside--;
        passOn(origin, lane);
      },
    };
  }

  /** A place inside is free: the first waiter whose startBy has not passed takes it. */
  function passOn(origin: string, lane: Lane): void {
    while (lane.inside < limit) {
      const next = lane.waiting.values().next();
      if (next.done) break;
      const waiter = next.value;
      const now = steadyNow();
      // Its timer has not fired yet, but its moment may have passed all the same.
      if (now > waiter.startBy) {
        turnAway(lane, waiter, now);
        continue;
      }
      lane.waiting.delete(waiter);
      waiting--;
      waiter.settle(admit(origin, lane, waiter.queuedAt));
    }
    stopExpiryIfNoneWait();
    dropIfIdle(origin, lane);
  }

  return {
    get origins() {
      return lanes.size;
    },
    enter(origin, startBy) {
      const now = steadyNow();
      const latest = startBy === undefined ? Number.POSITIVE_INFINITY : startBy.getTime();
      if (now > latest || (doorsClosed && startBy !== undefined)) {
        return Promise.resolve({ entered: false, waitedMs: 0 });
      }
      let lane = lanes.get(origin);
      if (lane === undefined) {
        lane = { inside: 0, waiting: new Set() };
        lanes.set(origin, lane);
      }
      // Nobody overtakes a waiter: a free place with a queue is about to be handed on anyway.
      if (lane.inside < limit && lane.waiting.size === 0) return Promise.resolve(admit(origin, lane, now));
      const queue = lane;
      return new Promise<GateEntry>((settle) => {
        queue.waiting.add({ startBy: latest, queuedAt: now, settle });
        waiting++;
        expireAt(latest);
      });
    },
    openDoors() {
      doorsClosed = false;
    },
    closeDoors() {
      doorsClosed = true;
      const now = steadyNow();
      for (const [origin, lane] of lanes) {
        for (const waiter of lane.waiting) {
          if (Number.isFinite(waiter.startBy)) turnAway(lane, waiter, now);
        }
        dropIfIdle(origin, lane);
      }
      stopExpiryIfNoneWait();
    },
    idle() {
      if (lanes.size === 0) return Promise.resolve();
      return new Promise((resolve) => idleWaiters.push(resolve));
    },
  };
}
