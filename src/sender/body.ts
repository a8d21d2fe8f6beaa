// Bounded reading of a response body: a huge or endless body costs neither memory nor time.

import type { Readable } from 'node:stream';

/**
 * Reads at most about `maxBytes` of `body` (whole chunks, so up to one chunk more) and keeps
 * only its first `keepBytes`. At the limit the loop breaks, which destroys the stream and with
 * it the connection. An error mid-body (connection lost, deadline) ends reading quietly: the
 * status already decided the outcome, and what arrived so far is kept.
 */
export async function readBodyPrefix(body: Readable, maxBytes: number, keepBytes: number): Promise<Buffer> {
  const kept: Buffer[] = [];
  let keptBytes = 0;
  let readBytes = 0;
  try {
    for await (const chunk of body as AsyncIterable<Buffer>) {
      readBytes += chunk.length;
      if (keptBytes < keepBytes) {
        const part = chunk.subarray(0, keepBytes - keptBytes);
        kept.push(part);
        keptBytes += part.length;
      }
      if (readBytes >= maxBytes) break;
    }
  } catch {
    // See above: the body is evidence for operators, not part of the outcome.
  }
  return Buffer.concat(kept);
}

/**
 * UTF-8, lossy: invalid sequences (including a character cut at the byte limit) become U+FFFD.
 * So does NUL, which a PostgreSQL text column refuses.
 */
export function decodeStoredBody(bytes: Buffer): string {
  return bytes.toString('utf8').replaceAll('\u0000', '\uFFFD');
}
