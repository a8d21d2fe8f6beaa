// An endpoint's own headers often carry the receiver's credentials (an Authorization, an API
// key), so they are sealed under the master key as signing and source secrets are, bound to
// their endpoint: a dump or a backup of the database does not hand them out.
//
// The endpoint's `sealed_headers` column (migration 0046) holds `{}` when it has none, which is
// most endpoints and is opened for nothing, or else the sealed JSON of its headers as a base64
// string. An object with names in it is a row written before headers were sealed: it reads as it
// is, and the first process that migrates, holding the master key, seals it (db/clear-headers.ts).

import type { SecretBox } from './secret-box.ts';

/** An endpoint's own headers, by name. */
export type HeaderSet = Record<string, string>;

/** What the column holds: headers sealed (a string), or none / not sealed yet (an object). */
export type StoredHeaders = Readonly<HeaderSet> | string;

/**
 * The additional data a sealed set is bound to: its endpoint, and what it is, so that it opens
 * neither on another endpoint's row nor as that endpoint's signing secret.
 */
export const headersBinding = (endpointId: string) => `endpoint-headers:${endpointId}`;

export function sealHeaders(box: SecretBox, endpointId: string, headers: HeaderSet): StoredHeaders {
  if (Object.keys(headers).length === 0) return {};
  return box.seal(JSON.stringify(headers), headersBinding(endpointId)).toString('base64');
}

/**
 * The headers a stored value holds. Throws UnknownMasterKeyError for a set sealed under a master
 * key the box lacks, and an Error for one that does not open (moved to another row, damaged).
 */
export function openHeaders(box: SecretBox, endpointId: string, stored: StoredHeaders): HeaderSet {
  if (typeof stored !== 'string') return { ...stored };
  const opened = box.open(Buffer.from(stored, 'base64'), headersBinding(endpointId));
  return JSON.parse(opened) as HeaderSet;
}
