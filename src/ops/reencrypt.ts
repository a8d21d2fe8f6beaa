// Re-encrypts every sealed secret under the current master key. Run it after deploying a new
// HERALD_MASTER_KEY with the old one in HERALD_PREVIOUS_MASTER_KEYS; once it reports zero left,
// the old key can be dropped. Safe to run while herald serves: each row is swapped only if it
// still holds the ciphertext that was read.

import type { SecretBox } from '../crypto/secret-box.ts';
import { resealSecret, sealedSecretsAfter } from '../db/endpoint-secrets.ts';
import type { Queryable } from '../db/port.ts';

export interface ReencryptReport {
  examined: number;
  reencrypted: number;
  /** Rows no known key opens (tampered, or sealed under a key no longer configured). */
  unreadable: number[];
}

export async function reencryptSecrets(db: Queryable, box: SecretBox, batch = 500): Promise<ReencryptReport> {
  const report: ReencryptReport = { examined: 0, reencrypted: 0, unreadable: [] };
  let after = 0;
  for (;;) {
    const rows = await sealedSecretsAfter(db, after, batch);
    if (rows.length === 0) return report;
    for (const row of rows) {
      report.examined++;
      if (box.keyIdOf(row.sealed) === box.currentKeyId) continue;
      let plaintext: string;
      try {
        plaintext = box.open(row.sealed, row.endpointId);
      } catch {
        report.unreadable.push(row.id);
        continue;
      }
      const resealed = box.seal(plaintext, row.endpointId);
      if (await resealSecret(db, row.id, row.sealed, resealed)) report.reencrypted++;
    }
    after = rows.at(-1)!.id;
  }
}
