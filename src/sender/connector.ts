// The connector of the sender's undici Agent: pinned lookup, trusted CAs, and a TLS error
// that says "the handshake failed" whatever OpenSSL's code for it was.

import type { Socket } from 'node:net';
import { getCACertificates } from 'node:tls';
import { buildConnector } from 'undici';
import type { AddressPolicy } from './destination.ts';
import { TlsHandshakeError } from './errors.ts';
import { createLookupsUnderway, createPinnedLookup, type LookupsUnderway, type Resolver } from './resolve.ts';

export interface PinnedConnectorOptions {
  policy: AddressPolicy;
  resolve: Resolver;
  /** Where the lookups under way are kept, for a sender that tells them apart (send.ts). */
  lookups?: LookupsUnderway;
  /** Bounds a connection attempt that outlives the attempt that asked for it. */
  timeoutMs: number;
  extraCaPem?: string | undefined;
}

export function createPinnedConnector(opts: PinnedConnectorOptions): buildConnector.connector {
  const connect = buildConnector({
    lookup: createPinnedLookup(opts.policy, opts.resolve, opts.lookups ?? createLookupsUnderway()),
    timeout: opts.timeoutMs,
    // HTTP/1.1 only: there undici writes a request right after onRequestStart, which is what
    // exchange.ts relies on to tell "sent" from "not sent".
    allowH2: false,
    // Node's default trust (bundled roots, plus the system store when Node runs with
    // --use-system-ca) stays; the operator's CAs are added to it, not swapped in.
    ...(opts.extraCaPem === undefined ? {} : { ca: [...getCACertificates('default'), opts.extraCaPem] }),
  });

  return (options, callback) => {
    let tcpConnected = false;
    // An error between TCP connect and the end of the handshake is a TLS failure: untrusted,
    // expired or misnamed certificate, protocol mismatch. Deciding by stage rather than by
    // error code covers every OpenSSL verify code without listing them.
    // undici's own connector returns its socket although its type says void; undici takes it
    // back to cancel a connection it no longer wants (a servername change). A request whose
    // attempt ended while its connection was being made does not cancel it: see exchange.ts.
    const socket = connect(options, (...args) => {
      const [err] = args;
      if (err !== null && tcpConnected && options.protocol === 'https:') {
        callback(new TlsHandshakeError('TLS handshake failed', { cause: err }), null);
      } else {
        callback(...args);
      }
    }) as unknown as Socket;
    socket.once('connect', () => {
      tcpConnected = true;
    });
    return socket;
  };
}
