// What a Standard Webhooks provider sends with each request to /ingest: the headers signed over
// the raw body with the source's secret; and an ingestor on a database of its own, with an app.

import pino, { type Logger } from 'pino';
import type { Webhook } from 'standardwebhooks';
import { createSecretBox } from '../../src/crypto/secret-box.ts';
import type { AppRow } from '../../src/db/apps.ts';
import { insertSource } from '../../src/db/sources.ts';
import { createIngestor, type Ingestor } from '../../src/inbound/ingest.ts';
import type { FetchText } from '../../src/inbound/verifiers/index.ts';
import { freshDatabase, type TestDatabase } from './database.ts';
import { MASTER_KEY } from './herald.ts';
import { seedApp } from './seed.ts';

/** JSON content type, the delivery id, the timestamp and its signature by `signer`. */
export function signedHeaders(signer: Webhook, id: string, body: string, timestamp = new Date()) {
  return {
    'content-type': 'application/json',
    'webhook-id': id,
    'webhook-timestamp': String(Math.floor(timestamp.getTime() / 1000)),
    'webhook-signature': signer.sign(id, timestamp, body),
  };
}

export interface IngestorRig {
  database: TestDatabase;
  ingestor: Ingestor;
  /** A source of `scheme` with these settings, relaying to the rig's app as `order.placed`. */
  addSource(uid: string, scheme: string, settings: Record<string, unknown>): Promise<void>;
}

/**
 * Runs `run` with an ingestor (logging to `log`) on a fresh database holding an app; closes and
 * drops both after.
 */
export async function withIngestor(
  label: string,
  fetchText: FetchText,
  run: (rig: IngestorRig) => Promise<void>,
  log: Logger = pino({ level: 'silent' }),
): Promise<void> {
  const database = await freshDatabase(label);
  const ingestor = createIngestor({
    db: database.db,
    box: createSecretBox([Buffer.from(MASTER_KEY, 'base64')]),
    log,
    fetchText,
  });
  try {
    const app: AppRow = await seedApp(database.db, 'orders');
    const addSource = async (uid: string, scheme: string, settings: Record<string, unknown>) => {
      await insertSource(database.db, {
        uid,
        scheme,
        settings,
        appId: app.id,
        eventType: 'order.placed',
        businessKey: '{{delivery_id}}',
        retentionDays: null,
      });
    };
    await run({ database, ingestor, addSource });
  } finally {
    await ingestor.close();
    await database.drop();
  }
}
