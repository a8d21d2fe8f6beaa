// The registration-time check of an endpoint URL (invariant 10, first half; every attempt
// repeats it in the socket lookup).

import { type AddressPolicy, checkUrlOffline, type UrlVerdict } from './destination.ts';
import { DestinationForbiddenError } from './errors.ts';
import { checkingResolver, type Resolver, resolveAllowed } from './resolve.ts';

const DEFAULT_DNS_TIMEOUT_MS = 5000;

/** Syntax, then the literal address or EVERY address the host name resolves to. */
export async function checkDestination(
  url: string,
  policy: AddressPolicy,
  resolve: Resolver = checkingResolver,
  dnsTimeoutMs: number = DEFAULT_DNS_TIMEOUT_MS,
): Promise<UrlVerdict> {
  const offline = checkUrlOffline(url, policy);
  if (!offline.ok) return { ok: false, reason: offline.reason };
  const verdict: UrlVerdict = { ok: true, url: offline.url };
  if (offline.literal) return verdict;
  const { host } = offline;
  let timer: NodeJS.Timeout | undefined;
  const giveUp = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error('DNS lookup timed out')), dnsTimeoutMs);
  });
  try {
    await resolveAllowed(host, policy, (name) => Promise.race([resolve(name), giveUp]));
    return verdict;
  } catch (err) {
    if (err instanceof DestinationForbiddenError) return { ok: false, reason: err.message };
    // A name that does not resolve now (NXDOMAIN, ENOTFOUND, no answer in time) may be set up
    // after the endpoint is registered. Accepting it opens nothing: every attempt resolves the
    // name again and judges every address before it connects.
    return verdict;
  } finally {
    clearTimeout(timer);
  }
}
