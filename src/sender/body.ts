// Bounded reading of a response body: a huge or endless body costs neither memory nor time.

import type { Readable } from 'node:stream';

/**
 * Reads at most about `maxBytes` of `body` (whole chunks, so up to one chunk more) and keeps
 * only its first `keepBytes`. At the limit the stream is destroyed, and with it the connection.
 * An error mid-body (connection lost, deadline) ends reading quietly: the status already decided
 * the outcome, and what arrived so far is kept.
 *
 * Listeners, not `for await`: an async iterator costs a promise and its machinery per chunk and
 * per request, and with hundreds of requests in flight that garbage is a worker's largest cost.
 */
export function readBodyPrefix(body: Readable, maxBytes: number, keepBytes: number): Promise<Buffer> {
  const kept: Buffer[] = [];
  let keptBytes = 0;
  let readBytes = 0;
  return new Promise((resolve) => {
    const finish = () => {
      body.off('data', onData);
      body.off('end', finish);
      body.off('close', finish);
      resolve(Buffer.concat(kept));
    };
    const onData = (chunk: Buffer) => {
      readBytes += chunk.length;
      if (keptBytes < keepBytes) {
        const part = chunk.subarray(0, keepBytes - keptBytes);
        kept.push(part);
        keptBytes += part.length;
      }
      if (readBytes >= maxBytes) {
        finish();
        body.destroy();
      }
    };
    // See above: the body is evidence for operators, not part of the outcome. An error is
    // followed by 'close', which finishes; this listener only keeps it from being unhandled.
    body.on('error', ignore);
    body.on('data', onData);
    body.once('end', finish);
    body.once('close', finish);
  });
}

function ignore(): void {}

/**
 * UTF-8, lossy: invalid sequences (including a character cut at the byte limit) become U+FFFD.
 * So does NUL, which a PostgreSQL text column refuses.
 */
export function decodeStoredBody(bytes: Buffer): string {
  return bytes.toString('utf8').replaceAll('\u0000', '\uFFFD');
}
