// Pure destination checks (invariant 10): is this URL acceptable, and may we connect to this
// address? No network here; resolving names is the caller's job.

import { isIP, isIPv4, isIPv6 } from 'node:net';
import ipaddr from 'ipaddr.js';
import type { Logger } from 'pino';

export type UrlVerdict = { ok: true; url: URL } | { ok: false; reason: string };

const MAX_URL_LENGTH = 2048;

/**
 * Syntax only. WHATWG URL parsing already normalises the alternate IPv4 spellings (decimal
 * `2130706433`, octal `0177.0.0.1`, hex `0x7f.1`, short `127.1`) to a dotted quad, so the
 * address policy only ever sees canonical literals.
 */
export function checkDestinationUrl(raw: string): UrlVerdict {
  if (raw.length > MAX_URL_LENGTH) {
    return { ok: false, reason: `URL is longer than ${MAX_URL_LENGTH} characters` };
  }
  // WHATWG parsing silently strips tabs, newlines and leading or trailing controls; refuse
  // them instead, so the URL we store is the URL we send and no header injection rides on it.
  if (/[\s\p{Cc}]/u.test(raw)) {
    return { ok: false, reason: 'URL contains whitespace or control characters' };
  }
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return { ok: false, reason: 'URL is not valid' };
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    return { ok: false, reason: 'URL scheme must be http or https' };
  }
  // Credentials in a URL end up in logs and in the attempt history; endpoints put secrets in
  // headers instead.
  if (url.username !== '' || url.password !== '') {
    return { ok: false, reason: 'URL must not contain credentials' };
  }
  if (url.hostname === '') return { ok: false, reason: 'URL must have a host' };
  return { ok: true, url };
}

/** What can be judged of a URL without the network (checkUrlOffline). */
export type OfflineVerdict =
  | { ok: true; url: URL; host: string; literal: boolean }
  | { ok: false; reason: string; forbidden: boolean };

/**
 * The checks of a URL that need no network: its syntax, then — for an IP literal, which Node
 * connects to without the socket lookup where resolved addresses are judged — its address. A host
 * name's addresses are the resolver's to judge. `forbidden`: refused for its address, not its form.
 */
export function checkUrlOffline(raw: string, policy: AddressPolicy): OfflineVerdict {
  const verdict = checkDestinationUrl(raw);
  if (!verdict.ok) return { ...verdict, forbidden: false };
  const host = hostOf(verdict.url);
  const literal = isIpLiteral(host);
  if (literal && policy.isForbidden(host)) {
    return { ok: false, reason: `${host} is a private or reserved address`, forbidden: true };
  }
  return { ok: true, url: verdict.url, host, literal };
}

/** The host to resolve or judge: an IPv6 literal loses the brackets it wears in a URL. */
export function hostOf(url: URL): string {
  return url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
}

/** True when the URL's host is an IP literal, which no resolver (and no socket lookup) sees. */
function isIpLiteral(host: string): boolean {
  return isIP(host) !== 0;
}

export interface AddressPolicy {
  /** true = refuse to connect to this address. */
  isForbidden(ip: string): boolean;
}

type Cidr = [ipaddr.IPv4 | ipaddr.IPv6, number];

// Everything that is not globally routable unicast, or that embeds/tunnels another address
// we could not judge (NAT64, 6to4, Teredo, IPv4-compatible). IPv4-mapped IPv6 never reaches
// this list as such: it is unmapped first and judged as the IPv4 address it stands for.
const FORBIDDEN_CIDRS: readonly string[] = [
  '0.0.0.0/8',
  '10.0.0.0/8',
  '100.64.0.0/10',
  '127.0.0.0/8',
  '169.254.0.0/16',
  '172.16.0.0/12',
  '192.0.0.0/24',
  '192.0.2.0/24',
  '192.88.99.0/24',
  '192.168.0.0/16',
  '198.18.0.0/15',
  '198.51.100.0/24',
  '203.0.113.0/24',
  '224.0.0.0/4',
  '240.0.0.0/4',
  '255.255.255.255/32',
  '::/8',
  '64:ff9b::/96',
  '64:ff9b:1::/48',
  '100::/64',
  '2001::/23',
  '2001:db8::/32',
  '2002::/16',
  '3fff::/20',
  '5f00::/16',
  'fc00::/7',
  'fe80::/10',
  'fec0::/10',
  'ff00::/8',
];

const FORBIDDEN: readonly Cidr[] = FORBIDDEN_CIDRS.map((cidr) => ipaddr.parseCIDR(cidr));

/**
 * A CIDR whose address is written the one standard way, or null. ipaddr.js also reads old IPv4
 * spellings — `010.0.0.0/8` as 8.0.0.0/8, `127.1/8`, `0x7f.0.0.0/8` — so an operator's
 * `192.168.001.010/32` would allow 192.168.1.8, another host than the one meant.
 */
export function parseStrictCidr(text: string): Cidr | null {
  const address = text.slice(0, text.indexOf('/'));
  if (address.includes('%') || isIP(address) === 0) return null;
  try {
    return ipaddr.parseCIDR(text);
  } catch {
    return null;
  }
}

function parseAllowed(cidr: string): Cidr {
  const parsed = parseStrictCidr(cidr.trim());
  if (parsed === null) {
    throw new Error(`allowed private network "${cidr}" is not a CIDR (expected e.g. 127.0.0.0/8 or ::1/128)`);
  }
  return parsed;
}

/** NAT64's well-known prefix (RFC 6052): the last 32 bits are the IPv4 host its gateway reaches. */
const WELL_KNOWN_NAT64 = ipaddr.parseCIDR('64:ff9b::/96');

/** The IPv4 host an address of the well-known NAT64 prefix reaches through its gateway, or null. */
function nat64Target(addr: ipaddr.IPv4 | ipaddr.IPv6): ipaddr.IPv4 | null {
  if (!(addr instanceof ipaddr.IPv6) || !addr.match(WELL_KNOWN_NAT64)) return null;
  return new ipaddr.IPv4(addr.toByteArray().slice(12));
}

function inAny(addr: ipaddr.IPv4 | ipaddr.IPv6, cidrs: readonly Cidr[]): boolean {
  // ipaddr.js throws when matching across families, so compare like with like.
  return cidrs.some((cidr) => cidr[0].kind() === addr.kind() && addr.match(cidr));
}

/** Strict parse of a resolver answer or canonical URL host; null when it is not an address. */
function parseAddress(ip: string): ipaddr.IPv4 | ipaddr.IPv6 | null {
  if (isIPv4(ip)) return ipaddr.IPv4.parse(ip);
  if (!isIPv6(ip)) return null;
  // ipaddr.js reads "::a.b.c.d" as IPv4-mapped (::ffff:a.b.c.d), but it is the deprecated
  // IPv4-compatible form inside ::/8, and resolvers print such answers exactly that way.
  // The WHATWG serialiser writes every IPv6 address in hex, which ipaddr.js reads faithfully.
  // A zone id only scopes a link-local address, which is forbidden whatever the zone.
  const bare = ip.split('%')[0];
  return ipaddr.IPv6.parse(new URL(`http://[${bare}]/`).hostname.slice(1, -1));
}

/**
 * Logged by what reaches out under the policy (a worker's sender, the API's key fetches), once it
 * starts to: an operator sees which private ranges the guard lets through, and what for.
 */
export function warnOfPrivateNetworks(log: Logger, allowCidrs: readonly string[], what: string): void {
  if (allowCidrs.length > 0) {
    log.warn({ allowPrivateNetworks: allowCidrs }, `${what} may resolve to these private networks`);
  }
}

/**
 * @param allowCidrs private ranges an operator explicitly opened (e.g. `127.0.0.0/8` in
 *   tests). An allowed range wins over the forbidden list. Invalid entries throw now, at
 *   start-up, rather than at the first delivery.
 */
export function createAddressPolicy(allowCidrs: readonly string[]): AddressPolicy {
  const allowed = allowCidrs.map(parseAllowed);
  return {
    isForbidden(ip: string): boolean {
      const parsed = parseAddress(ip);
      if (parsed === null) return true;
      // An IPv4-mapped address reaches the IPv4 host it names, so that host is what we judge.
      const judged =
        parsed instanceof ipaddr.IPv6 && parsed.isIPv4MappedAddress() ? parsed.toIPv4Address() : parsed;
      // Allowing the NAT64 prefix (an IPv6-only network behind DNS64) lets public IPv4 hosts
      // through it, not the private ones a gateway would translate to as readily.
      const translated = nat64Target(judged);
      if (translated !== null && inAny(translated, FORBIDDEN) && !inAny(translated, allowed)) return true;
      if (inAny(judged, allowed) || inAny(parsed, allowed)) return false;
      return inAny(judged, FORBIDDEN);
    },
  };
}
