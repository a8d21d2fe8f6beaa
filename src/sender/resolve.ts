// Name resolution with every answer judged (invariant 10). Used by the socket lookup of each
// new connection and by the registration-time check, so both apply the same rule.

import { lookup } from 'node:dns/promises';
import type { LookupFunction } from 'node:net';
import type { AddressPolicy } from './destination.ts';
import { DestinationForbiddenError, DnsFailureError } from './errors.ts';

export interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}

export type Resolver = (hostname: string) => Promise<ResolvedAddress[]>;

const lookingUp = new Map<string, Promise<ResolvedAddress[]>>();

/**
 * A and AAAA through the system resolver, as the OS would (hosts file included). Concurrent
 * lookups of one name share one: the system resolver runs on node's small thread pool (4 threads
 * unless UV_THREADPOOL_SIZE says otherwise), and a lookup there cannot be cancelled, so the
 * connections of a name whose servers never answer would otherwise take every thread, and the
 * lookups of every other endpoint would wait behind them until their attempts timed out. Nothing
 * is kept once the answer is in: each new lookup asks again.
 */
export const systemResolver: Resolver = (hostname) => {
  let answer = lookingUp.get(hostname);
  if (answer === undefined) {
    answer = lookup(hostname, { all: true })
      .then((answers) =>
        answers.map((a): ResolvedAddress => ({ address: a.address, family: a.family === 6 ? 6 : 4 })),
      )
      .finally(() => lookingUp.delete(hostname));
    lookingUp.set(hostname, answer);
  }
  return answer;
};

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
