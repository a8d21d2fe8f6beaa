// Re-encrypts every sealed secret — endpoint signing secrets and headers, inbound source secrets —
// under the current master key. Run it after deploying a new HERALD_MASTER_KEY with the old one in
// HERALD_PREVIOUS_MASTER_KEYS; once a run re-encrypts nothing and finds nothing unreadable, the old
// key can be dropped. Safe to run while herald serves: each row is swapped only if it still holds
// the ciphertext that was read.

import type { SecretBox } from '../crypto/secret-box.ts';
import { recordAudit } from '../db/audit.ts';
import type { Db } from '../db/port.ts';
import { resealSecret, SEALED_COLUMNS, sealedSecretsAfter } from '../db/sealed-secrets.ts';

export interface ReencryptReport {
  /** Per kind of sealed secret (SEALED_COLUMNS' names). */
  tables: {
    table: string;
    examined: number;
    reencrypted: number;
    /**
     * Rows no known key opens (tampered, or sealed under a key no longer configured), each with
     * its owner (the endpoint's or source's id): what an operator looks up, not the row's id.
     */
    unreadable: { key: string | number; owner: string }[];
  }[];
}

/**
 * Re-encrypts, then records the run (by `actorId`) with what it did in the audit log. Each batch's
 * new ciphertexts commit together with an entry of their own (`keys.reencrypted_batch`): a run
 * stopped midway (Ctrl-C, a crash, the database gone) leaves no re-encrypted secret unrecorded.
 */
export async function reencryptSecrets(
  db: Db,
  box: SecretBox,
  actorId: string,
  batch = 500,
): Promise<ReencryptReport> {
  const report: ReencryptReport = { tables: [] };
  for (const column of SEALED_COLUMNS) {
    const counts = {
      table: column.name,
      examined: 0,
      reencrypted: 0,
      unreadable: [] as { key: string | number; owner: string }[],
    };
    report.tables.push(counts);
    for (let after = column.firstKey; ; ) {
      const rows = await sealedSecretsAfter(db, column, after, batch);
      if (rows.length === 0) break;
      const resealed: { key: string | number; previous: Buffer; sealed: Buffer }[] = [];
      for (const row of rows) {
        counts.examined++;
        let plaintext: string;
        try {
          // A row too damaged to name its key is unreadable like one sealed with a key not given:
          // counted, and the run goes on to the others.
          if (box.keyIdOf(row.sealed) === box.currentKeyId) continue;
          plaintext = box.open(row.sealed, column.binding(row.ownerId));
        } catch {
          counts.unreadable.push({ key: row.key, owner: row.ownerId });
          continue;
        }
        resealed.push({
          key: row.key,
          previous: row.sealed,
          sealed: box.seal(plaintext, column.binding(row.ownerId)),
        });
      }
      // A batch with nothing to reseal (the usual one, once a rotation is done) opens no transaction.
      if (resealed.length > 0)
        counts.reencrypted += await db.transaction(async (tx) => {
          let swapped = 0;
          for (const r of resealed)
            if (await resealSecret(tx, column, r.key, r.previous, r.sealed)) swapped++;
          if (swapped > 0) {
            await recordAudit(tx, {
              actor: actorId,
              action: 'keys.reencrypted_batch',
              appId: null,
              targetType: 'master_key',
              targetId: box.currentKeyId,
              details: {
                table: column.name,
                reencrypted: swapped,
                fromId: rows[0]!.key,
                toId: rows.at(-1)!.key,
              },
            });
          }
          return swapped;
        });
      after = rows.at(-1)!.key;
    }
  }
  await recordAudit(db, {
    actor: actorId,
    action: 'keys.reencrypted',
    appId: null,
    targetType: 'master_key',
    targetId: box.currentKeyId,
    details: {
      tables: report.tables.map(({ table, examined, reencrypted, unreadable }) => ({
        table,
        examined,
        reencrypted,
        unreadable: unreadable.length,
      })),
    },
  });
  return report;
}
