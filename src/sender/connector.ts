// The connector of the sender's undici Agent: pinned lookup, trusted CAs, and a TLS error
// that says "the handshake failed" whatever OpenSSL's code for it was.

import { isIP, type Socket } from 'node:net';
import { getCACertificates } from 'node:tls';
import { buildConnector } from 'undici';
import type { AddressPolicy } from './destination.ts';
import { TlsHandshakeError } from './errors.ts';
import { createPinnedLookup, type Resolver } from './resolve.ts';

export interface PinnedConnectorOptions {
  policy: AddressPolicy;
  resolve: Resolver;
  /** Where the connections under way are kept, for a sender that tells their stages apart (send.ts); none kept without it. */
  underway?: ConnectionsUnderway;
  /** Bounds a connection attempt that outlives the attempt that asked for it. */
  timeoutMs: number;
  extraCaPem?: string | undefined;
}

export function createPinnedConnector(opts: PinnedConnectorOptions): buildConnector.connector {
  const { underway } = opts;
  const connect = buildConnector({
    lookup: createPinnedLookup(opts.policy, opts.resolve),
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
    const stages = underway === undefined ? null : connectionStages(underway, options);
    // An error between TCP connect and the end of the handshake is a TLS failure: untrusted,
    // expired or misnamed certificate, protocol mismatch. Deciding by stage rather than by
    // error code covers every OpenSSL verify code without listing them.
    // undici's own connector returns its socket although its type says void; undici takes it
    // back to cancel a connection it no longer wants (a servername change). A request whose
    // attempt ended while its connection was being made does not cancel it: see exchange.ts.
    let socket: Socket;
    try {
      socket = connect(options, (...args) => {
        stages?.moveTo(null);
        const [err] = args;
        if (err !== null && tcpConnected && options.protocol === 'https:') {
          callback(new TlsHandshakeError('TLS handshake failed', { cause: err }), null);
        } else {
          callback(...args);
        }
      }) as unknown as Socket;
    } catch (error) {
      stages?.moveTo(null);
      throw error;
    }
    socket.once('connect', () => {
      tcpConnected = true;
    });
    if (stages) {
      socket.once('lookup', () => stages.moveTo('handshake'));
      socket.once('close', () => stages.moveTo(null));
    }
    return socket;
  };
}

type Stage = 'lookup' | 'handshake';

/**
 * One connection's stage in `underway`, from its start until it is made or has failed (null). A
 * connection to a host name is looked up first (Node skips that for an IP literal), then made;
 * it only ever moves on.
 */
function connectionStages(underway: ConnectionsUnderway, options: buildConnector.Options) {
  const origin = originKey(options.protocol, options.hostname, options.port);
  let stage: Stage | null = isIP(options.hostname) === 0 ? 'lookup' : 'handshake';
  underway.entered(origin, stage);
  return {
    moveTo(next: Stage | null): void {
      if (stage === null || stage === next) return;
      underway.left(origin, stage);
      stage = next;
      if (next !== null) underway.entered(origin, next);
    },
  };
}

/**
 * Where the connections being made to each origin stand: their host name being looked up, or
 * past that and connecting (TCP, then TLS). An attempt whose deadline passes while its origin's
 * connections are all being looked up failed on name resolution — this host's resolver (or the
 * name's servers) did not answer in time, not a receiver that did not answer: it is told apart
 * (DnsTimeoutError), and not held against the endpoint. Per origin, as undici's connections
 * are: a lookup of the same name for another port's connection is not this attempt's.
 */
export interface ConnectionsUnderway {
  entered(origin: string, stage: Stage): void;
  left(origin: string, stage: Stage): void;
  /** Some connection to `origin` is being looked up, and none is past its lookup. */
  onlyLookingUp(origin: string): boolean;
}

export function createConnectionsUnderway(): ConnectionsUnderway {
  const counts: Record<Stage, Map<string, number>> = { lookup: new Map(), handshake: new Map() };
  return {
    entered: (origin, stage) => void counts[stage].set(origin, (counts[stage].get(origin) ?? 0) + 1),
    left(origin, stage) {
      const left = (counts[stage].get(origin) ?? 1) - 1;
      if (left > 0) counts[stage].set(origin, left);
      else counts[stage].delete(origin);
    },
    onlyLookingUp: (origin) => counts.lookup.has(origin) && !counts.handshake.has(origin),
  };
}

const DEFAULT_PORTS: Readonly<Record<string, string>> = { 'http:': '80', 'https:': '443' };

/** One spelling of an origin for the connector's options and a request's URL alike. */
export function originKey(
  protocol: string,
  hostname: string,
  port: string | number | null | undefined,
): string {
  const explicit = port === undefined || port === null ? '' : String(port);
  return `${protocol}//${hostname}:${explicit === '' ? (DEFAULT_PORTS[protocol] ?? '') : explicit}`;
}
