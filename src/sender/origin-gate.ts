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
// A request may carry the latest moment it may start (`startBy`: beyond it, its deadline no longer
// fits in the worker's lease). If its turn has not come by then, it leaves the queue at that moment,
// not let through: nothing was sent, and the caller gives the work back.
//
// An origin's lane exists only while someone is in it or waiting for it, so memory is bounded by
// the origins in use, not by every origin ever seen.

export type GateEntry =
  /** Let through: the request may go to undici now; `leave()` once it is completely done. */
  | { entered: true; waitedMs: number; leave: () => void }
  /** Its startBy passed before its turn came: it must not be sent. */
  | { entered: false; waitedMs: number };

export interface OriginGate {
  enter(origin: string, startBy?: Date): Promise<GateEntry>;
  /** Resolves once no origin has a request inside or waiting. */
  idle(): Promise<void>;
  /** Lanes alive now (origins with a request inside or waiting). */
  readonly origins: number;
}

const MAX_TIMER_MS = 2 ** 31 - 1;

interface Waiter {
  startBy: number;
  queuedAt: number;
  /** Fires at startBy, taking the waiter out of the queue unsent. */
  timer: ReturnType<typeof setTimeout> | null;
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
      waitedMs: Date.now() - queuedAt,
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
      lane.waiting.delete(waiter);
      if (waiter.timer !== null) clearTimeout(waiter.timer);
      const now = Date.now();
      if (now > waiter.startBy) {
        // Its timer has not fired yet, but its moment has passed all the same.
        waiter.settle({ entered: false, waitedMs: now - waiter.queuedAt });
        continue;
      }
      waiter.settle(admit(origin, lane, waiter.queuedAt));
    }
    dropIfIdle(origin, lane);
  }

  return {
    get origins() {
      return lanes.size;
    },
    enter(origin, startBy) {
      const now = Date.now();
      const latest = startBy === undefined ? Number.POSITIVE_INFINITY : startBy.getTime();
      if (now > latest) return Promise.resolve({ entered: false, waitedMs: 0 });
      let lane = lanes.get(origin);
      if (lane === undefined) {
        lane = { inside: 0, waiting: new Set() };
        lanes.set(origin, lane);
      }
      // Nobody overtakes a waiter: a free place with a queue is about to be handed on anyway.
      if (lane.inside < limit && lane.waiting.size === 0) return Promise.resolve(admit(origin, lane, now));
      const queue = lane;
      return new Promise<GateEntry>((settle) => {
        const waiter: Waiter = { startBy: latest, queuedAt: now, timer: null, settle };
        // A startBy beyond what a timer can hold (about 24.8 days) is checked when its turn comes.
        if (latest - now <= MAX_TIMER_MS) {
          waiter.timer = setTimeout(() => {
            queue.waiting.delete(waiter);
            settle({ entered: false, waitedMs: Date.now() - now });
            dropIfIdle(origin, queue);
          }, latest - now);
        }
        queue.waiting.add(waiter);
      });
    },
    idle() {
      if (lanes.size === 0) return Promise.resolve();
      return new Promise((resolve) => idleWaiters.push(resolve));
    },
  };
}
