// What a Standard Webhooks provider sends with each request to /ingest: the headers signed over
// the raw body with the source's secret.

import type { Webhook } from 'standardwebhooks';

/** JSON content type, the delivery id, the timestamp and its signature by `signer`. */
export function signedHeaders(signer: Webhook, id: string, body: string, timestamp = new Date()) {
  return {
    'content-type': 'application/json',
    'webhook-id': id,
    'webhook-timestamp': String(Math.floor(timestamp.getTime() / 1000)),
    'webhook-signature': signer.sign(id, timestamp, body),
  };
}
