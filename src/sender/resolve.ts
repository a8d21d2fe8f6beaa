// Name resolution with every answer judged (invariant 10). Used by the socket lookup of each
// new connection and by the registration-time check, so both apply the same rule.

import { lookup } from 'node:dns/promises';
import type { LookupFunction } from 'node:net';
import { steadyNow } from '../domain/steady-clock.ts';
import type { AddressPolicy } from './destination.ts';
import { DestinationForbiddenError, DnsFailureError, DnsTimeoutError } from './errors.ts';

export interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}

export type Resolver = (hostname: string) => Promise<ResolvedAddress[]>;

const lookingUp = new Map<string, Promise<ResolvedAddress[]>>();

// Lanes for lookups. A lookup takes one of node's pool threads until the system resolver answers
// or gives up (seconds, when a name's servers never answer), and cannot be cancelled; one tenant's
// endpoints under names whose servers never answer could otherwise hold every thread, and every
// other tenant's lookups would time out behind them. So names that have answered lately (in time)
// are looked up at once, and the others share at most half of the threads: a lookup beyond that
// waits for a place, and gives up after a while as the resolver's "try again" would — herald's
// own trouble, never held against the endpoint. A proven name that turns slow loses its standing.
// Only a delivery's lookup proves a name, not a registration check, which anyone with an admin
// key may run at will. (A tenant who has its names answer deliveries promptly and then stall them
// all at once can still hold the threads, until the resolver gives up on them: lanes by tenant
// would be needed against that.)

/** Threads node's pool has (the `herald` command sets 16; node's default is 4). */
const POOL_THREADS = Number(process.env['UV_THREADPOOL_SIZE']) || 4;
/** Lookups of names not proven lately, at most at once: half of the pool's threads. */
export const UNPROVEN_LOOKUPS = Math.max(1, Math.floor(POOL_THREADS / 2));
/** A lookup answered within this proves its name; one still running past it unproves it. */
const PROMPT_MS = 2_000;
/** How long a proven name stays proven without another prompt answer. */
const PROVEN_FOR_MS = 10 * 60_000;
const MAX_PROVEN = 10_000;
/**
 * How long a lookup of an unproven name waits for a place before it gives up: within the default
 * attempt deadline (15 s), so that the attempt learns why.
 */
const WAIT_FOR_PLACE_MS = 10_000;

const provenUntil = new Map<string, number>();
let unprovenRunning = 0;
const waitingForPlace: (() => void)[] = [];

function isProven(hostname: string): boolean {
  const until = provenUntil.get(hostname);
  if (until !== undefined && until > steadyNow()) return true;
  provenUntil.delete(hostname);
  return false;
}

function prove(hostname: string): void {
  provenUntil.delete(hostname);
  if (provenUntil.size >= MAX_PROVEN) provenUntil.delete(provenUntil.keys().next().value!);
  provenUntil.set(hostname, steadyNow() + PROVEN_FOR_MS);
}

/** A place among the unproven lookups: at once when one is free, else when one frees up, or given up. */
function placeForUnproven(hostname: string): Promise<void> {
  if (unprovenRunning < UNPROVEN_LOOKUPS) {
    unprovenRunning++;
    return Promise.resolve();
  }
  return new Promise((resolve, reject) => {
    const start = () => {
      clearTimeout(timer);
      unprovenRunning++;
      resolve();
    };
    const timer = setTimeout(() => {
      waitingForPlace.splice(waitingForPlace.indexOf(start), 1);
      reject(new DnsTimeoutError(`${hostname} waited too long for a lookup thread`));
    }, WAIT_FOR_PLACE_MS);
    waitingForPlace.push(start);
  });
}

function leavePlace(): void {
  unprovenRunning--;
  waitingForPlace.shift()?.();
}

/**
 * One lookup through the system resolver: an answer within PROMPT_MS proves its name (when
 * `proving`), and a lookup still running then unproves it.
 */
async function timedLookup(hostname: string, proving: boolean): Promise<ResolvedAddress[]> {
  const slow = setTimeout(() => provenUntil.delete(hostname), PROMPT_MS);
  const startedAt = steadyNow();
  try {
    const answers = await lookup(hostname, { all: true });
    if (proving && steadyNow() - startedAt < PROMPT_MS) prove(hostname);
    return answers.map((a): ResolvedAddress => ({ address: a.address, family: a.family === 6 ? 6 : 4 }));
  } finally {
    clearTimeout(slow);
  }
}

async function laneLookup(hostname: string, proving: boolean): Promise<ResolvedAddress[]> {
  if (isProven(hostname)) return timedLookup(hostname, proving);
  await placeForUnproven(hostname);
  try {
    return await timedLookup(hostname, proving);
  } finally {
    leavePlace();
  }
}

function sharedLookup(hostname: string, proving: boolean): Promise<ResolvedAddress[]> {
  let answer = lookingUp.get(hostname);
  if (answer === undefined) {
    answer = laneLookup(hostname, proving).finally(() => lookingUp.delete(hostname));
    lookingUp.set(hostname, answer);
  }
  return answer;
}

/**
 * A and AAAA through the system resolver, as the OS would (hosts file included), for a delivery's
 * connection. Concurrent lookups of one name share one, and names not proven lately take at most
 * half of the pool's threads (above). Nothing is kept once the answer is in: each new lookup asks
 * again.
 */
export const systemResolver: Resolver = (hostname) => sharedLookup(hostname, true);

/** The same for a check anyone may run at will (an endpoint's registration): it proves nothing. */
export const checkingResolver: Resolver = (hostname) => sharedLookup(hostname, false);

/**
 * Resolves `hostname` and returns its addresses only if EVERY one is allowed. One forbidden
 * answer refuses the lot: otherwise the owner of the name, not herald, would pick which of
 * its answers a connection uses.
 */
export async function resolveAllowed(
  hostname: string,
  policy: AddressPolicy,
  resolve: Resolver,
): Promise<ResolvedAddress[]> {
  let answers: ResolvedAddress[];
  try {
    answers = await resolve(hostname);
  } catch (err) {
    throw new DnsFailureError(`${hostname} did not resolve`, { cause: err });
  }
  if (answers.length === 0) throw new DnsFailureError(`${hostname} has no addresses`);
  if (answers.some((answer) => policy.isForbidden(answer.address))) {
    throw new DestinationForbiddenError(`${hostname} resolves to a private or reserved address`);
  }
  return answers;
}

/**
 * A `lookup` for net/tls.connect. Node calls it for every new connection to a host name (never
 * for an IP literal), after which the socket connects to the address we hand back — so each
 * connection is pinned to an address judged for that very connection, while the host name
 * stays in the Host header and in TLS SNI and certificate checks. A resolver that answers
 * public first and private next (DNS rebinding) is judged again, and refused, on the next
 * connection.
 */
export function createPinnedLookup(policy: AddressPolicy, resolve: Resolver): LookupFunction {
  return (hostname, options, callback) => {
    resolveAllowed(hostname, policy, resolve).then(
      (answers) => {
        const usable =
          options.family === 4 || options.family === 6
            ? answers.filter((answer) => answer.family === options.family)
            : answers;
        const first = usable[0];
        if (first === undefined) {
          callback(new DnsFailureError(`${hostname} has no IPv${options.family} address`), '');
        } else if (options.all) {
          callback(null, usable);
        } else {
          callback(null, first.address, first.family);
        }
      },
      (err: Error) => callback(err, ''),
    );
  };
}
