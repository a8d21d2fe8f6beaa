// Endpoint headers written before herald sealed them (crypto/sealed-headers.ts) are in clear in
// their row. A process that migrates (a server, the library), holding the master key, seals them
// as it starts: one pass in id order, each row only if it still holds what was read (a change
// through the API meanwhile has sealed its own). Every later start finds none, for one read of
// the endpoint table.

import { sealHeaders } from '../crypto/sealed-headers.ts';
import type { SecretBox } from '../crypto/secret-box.ts';
import type { Queryable } from './port.ts';

/** Seals the headers still in clear; returns how many endpoints' it sealed. */
export async function sealClearHeaders(db: Queryable, box: SecretBox, batch = 500): Promise<number> {
  let sealed = 0;
  for (let after = ''; ; ) {
    const { rows } = await db.query<{ id: string; headers: Record<string, string> }>(
      `select id, sealed_headers as headers from endpoint
        where id > $1 and jsonb_typeof(sealed_headers) = 'object' and sealed_headers <> '{}' order by id limit $2`,
      [after, batch],
    );
    if (rows.length === 0) return sealed;
    for (const { id, headers } of rows) {
      const result = await db.query(
        'update endpoint set sealed_headers = $2 where id = $1 and sealed_headers = $3',
        [id, JSON.stringify(sealHeaders(box, id, headers)), JSON.stringify(headers)],
      );
      sealed += result.rowCount;
    }
    after = rows.at(-1)!.id;
  }
}
