// Reading request headers. An empty value counts as absent: "X-Signature:" signs nothing.

import type { InboundRequest } from './types.ts';

/** The first of `names` that is present and non-empty, trimmed. Names must be lower-case. */
export function headerValue(request: InboundRequest, ...names: string[]): string | undefined {
  for (const name of names) {
    const raw: unknown = request.headers[name];
    // A caller that passes node's string[] for a repeated header gets "absent", not a TypeError.
    const value = typeof raw === 'string' ? raw.trim() : '';
    if (value !== '') return value;
  }
  return undefined;
}

/** The ABNF token of RFC 9110, which a header name must be. */
export const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
