// Counts failed authentications per client address, so that one address presenting unknown or
// revoked keys over and over (a client still using a deleted key, a scanner guessing) is refused
// before each of its tokens costs a key lookup in the database. The count is per fixed window of
// a minute and per API process; IPv6 addresses count per /64, the block one host usually holds.
//
// Only tokens that cost a lookup are refused: the admin key, and keys this process has seen
// authenticate, are still accepted from a blocked address. Keys it has not seen yet are not:
// behind a proxy every client shares its address, and anyone could then keep new keys out. Hence
// off unless HERALD_AUTH_FAILURE_LIMIT is set, for an API that sees its clients' own addresses.

import ipaddr from 'ipaddr.js';

export interface AuthFailureLimiter {
  /** Seconds until the address may present unknown tokens again; 0 when it may now. */
  blockedFor(address: string): number;
  /** Counts one failed authentication; true when this one put the address over the limit. */
  recordFailure(address: string): boolean;
}

/**
 * Addresses tracked per window at most. Past that, the addresses not yet tracked count by the
 * wider block they are in (an IPv4 /24, an IPv6 /48), and past twice as many entries, all
 * together: a flood of addresses must not switch the limit off for everyone, nor let one
 * attacker's blocks put every other client's new keys over the limit.
 */
const MAX_ADDRESSES = 100_000;
const OVERFLOW = 'other addresses';

export function createAuthFailureLimiter(options: {
  /** Failed authentications per address per window (0: no limit). */
  limit: number;
  windowMs?: number;
  now?: () => number;
  /** Addresses tracked before the rest count as one (tests make it small). */
  maxAddresses?: number;
}): AuthFailureLimiter {
  const { limit, windowMs = 60_000, now = Date.now, maxAddresses = MAX_ADDRESSES } = options;
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
      const counts = current();
      const count = counts.get(unitOf(counts, address, maxAddresses)) ?? 0;
      return count >= limit ? Math.max(1, Math.ceil((windowEndsAt - now()) / 1000)) : 0;
    },
    recordFailure(address) {
      if (limit === 0) return false;
      const counts = current();
      const unit = unitOf(counts, address, maxAddresses);
      const count = (counts.get(unit) ?? 0) + 1;
      counts.set(unit, count);
      return count === limit;
    },
  };
}

/** Where an address counts: its own entry, else its block's once the table is full, else the overflow's. */
function unitOf(counts: Map<string, number>, address: string, maxAddresses: number): string {
  const client = clientOf(address);
  if (counts.has(client) || counts.size < maxAddresses) return client;
  const block = blockOf(address);
  return counts.has(block) || counts.size < 2 * maxAddresses ? block : OVERFLOW;
}

/** The wider block an address is in: an IPv4 /24, an IPv6 /48. */
function blockOf(address: string): string {
  if (!ipaddr.isValid(address)) return OVERFLOW;
  const parsed = ipaddr.process(address);
  return `block ${networkOf(parsed, parsed.kind() === 'ipv4' ? 24 : 48)}`;
}

/** `address/prefix` for the network of that size the address is in. */
function networkOf(parsed: ipaddr.IPv4 | ipaddr.IPv6, prefix: number): string {
  const family = parsed.kind() === 'ipv4' ? ipaddr.IPv4 : ipaddr.IPv6;
  return `${family.networkAddressFromCIDR(`${parsed.toString()}/${prefix}`).toString()}/${prefix}`;
}

/** The unit counted: an IPv4 address (IPv4-mapped IPv6 too), or an IPv6 address's /64. */
export function clientOf(address: string): string {
  if (!ipaddr.isValid(address)) return address;
  const parsed = ipaddr.process(address);
  return parsed.kind() === 'ipv4' ? parsed.toString() : networkOf(parsed, 64);
}
