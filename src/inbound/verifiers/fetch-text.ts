// The default FetchText: an HTTPS GET under the same SSRF rules as outbound delivery
// (invariant 10) — every resolved address judged, the connection pinned to it, no redirects, one
// deadline, a bounded body. JWKS URLs come from configuration and SNS certificate URLs from the
// request itself, so neither may reach into private networks unless an operator allowed it.

import { Agent } from 'undici';
import { createPinnedConnector } from '../../sender/connector.ts';
import { checkUrlOffline, createAddressPolicy } from '../../sender/destination.ts';
import { DeadlineExceededError } from '../../sender/errors.ts';
import { type Resolver, systemResolver } from '../../sender/resolve.ts';
import type { FetchText } from './types.ts';

export interface SafeFetchTextOptions {
  /** CIDRs the host may resolve to despite the private-range guard (e.g. 127.0.0.0/8 in tests). */
  allowPrivateNetworks: readonly string[];
  /** ONE deadline for DNS + connect + TLS + the whole body. */
  timeoutMs: number;
  /** A JWKS or a PEM certificate is a few KiB; the default 64 KiB leaves room and no more. */
  maxBytes?: number;
  resolve?: Resolver;
  /** Extra trusted CA certificates (PEM), added to Node's default trust. */
  extraCaPem?: string | undefined;
}

export interface SafeFetchText {
  fetchText: FetchText;
  close(): Promise<void>;
}

export class FetchTextError extends Error {
  override readonly name = 'FetchTextError';
}

export function createSafeFetchText(options: SafeFetchTextOptions): SafeFetchText {
  const policy = createAddressPolicy(options.allowPrivateNetworks);
  const { timeoutMs } = options;
  if (!Number.isSafeInteger(timeoutMs) || timeoutMs <= 0) {
    throw new RangeError(`timeoutMs must be a positive integer, got ${timeoutMs}`);
  }
  const maxBytes = options.maxBytes ?? 64 * 1024;
  const agent = new Agent({
    connections: 2,
    maxHeaderSize: 16 * 1024,
    connect: createPinnedConnector({
      policy,
      resolve: options.resolve ?? systemResolver,
      timeoutMs,
      extraCaPem: options.extraCaPem,
    }),
  });

  async function fetchText(raw: string): Promise<string> {
    // Syntax, and an IP literal's address (Node skips the socket lookup, where the pinned lookup
    // judges a host name's addresses, for a literal).
    const verdict = checkUrlOffline(raw, policy);
    if (!verdict.ok) throw new FetchTextError(verdict.reason);
    const { url, host } = verdict;
    // Keys and certificates fetched in clear text could be swapped on the way.
    if (url.protocol !== 'https:') throw new FetchTextError('only https URLs are fetched');

    const deadline = AbortSignal.timeout(timeoutMs);
    const response = await agent.request({
      origin: url.origin,
      path: url.pathname + url.search,
      method: 'GET',
      headers: {
        accept: 'application/json, application/x-pem-file, */*',
        'user-agent': 'herald-webhooks/0.1',
      },
      signal: deadline,
    });
    if (response.statusCode !== 200) {
      // Discards the body (up to undici's small dump limit) so the connection can be reused.
      await response.body.dump().catch(() => {});
      throw new FetchTextError(`${host} answered ${response.statusCode}`);
    }
    const chunks: Buffer[] = [];
    let size = 0;
    try {
      // Leaving the loop early (break or throw) destroys the body and with it the connection.
      for await (const chunk of response.body as AsyncIterable<Buffer>) {
        size += chunk.length;
        if (size > maxBytes) break;
        chunks.push(chunk);
      }
    } catch (err) {
      if (deadline.aborted) throw new DeadlineExceededError('fetch deadline passed', { cause: err });
      throw err;
    }
    if (size > maxBytes) throw new FetchTextError(`${host} sent more than ${maxBytes} bytes`);
    return Buffer.concat(chunks).toString('utf8');
  }

  return { fetchText, close: () => agent.close() };
}
