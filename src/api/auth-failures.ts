// Counts failed authentications per client address, so that one address presenting unknown or
// revoked keys over and over (a client still using a deleted key, a scanner guessing) is refused
// before each of its tokens costs a key lookup in the database. The count is per fixed window of
// a minute and per API process; IPv6 addresses count per /64, the block one host usually holds.
//
// Only tokens that cost a lookup are refused: the admin key, and keys this process has seen
// authenticate, are still accepted from a blocked address — many clients behind one proxy share
// its address, and one of them with a stale key must not lock the others out.

import ipaddr from 'ipaddr.js';

export interface AuthFailureLimiter {
  /** Seconds until the address may present unknown tokens again; 0 when it may now. */
  blockedFor(address: string): number;
  /** Counts one failed authentication; true when this one put the address over the limit. */
  recordFailure(address: string): boolean;
}

/** Addresses tracked per window at most: past that, new ones are not counted until the next window. */
const MAX_ADDRESSES = 100_000;

export function createAuthFailureLimiter(options: {
  /** Failed authentications per address per window (0: no limit). */
  limit: number;
  windowMs?: number;
  now?: () => number;
}): AuthFailureLimiter {
  const { limit, windowMs = 60_000, now = Date.now } = options;
  let failures = new Map<string, number>();
  let windowEndsAt = 0;

  /** The current window's counts, started afresh once the last window ended. */
  const current = (): Map<string, number> => {
    const at = now();
    if (at >= windowEndsAt) {
      failures = new Map();
      windowEndsAt = at + windowMs;
    }
    return failures;
  };

  return {
    blockedFor(address) {
      if (limit === 0) return 0;
      const count = current().get(clientOf(address)) ?? 0;
      return count >= limit ? Math.max(1, Math.ceil((windowEndsAt - now()) / 1000)) : 0;
    },
    recordFailure(address) {
      if (limit === 0) return false;
      const counts = current();
      const client = clientOf(address);
      const count = counts.get(client);
      if (count === undefined && counts.size >= MAX_ADDRESSES) return false;
      counts.set(client, (count ?? 0) + 1);
      return (count ?? 0) + 1 === limit;
    },
  };
}

/** The unit counted: an IPv4 address (IPv4-mapped IPv6 too), or an IPv6 address's /64. */
export function clientOf(address: string): string {
  if (!ipaddr.isValid(address)) return address;
  const parsed = ipaddr.process(address);
  if (parsed.kind() === 'ipv4') return parsed.toString();
  return `${ipaddr.IPv6.networkAddressFromCIDR(`${parsed.toString()}/64`).toString()}/64`;
}
