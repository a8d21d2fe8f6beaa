// Small builders for tests: an app with endpoints, created through the real HTTP API.

import assert from 'node:assert/strict';
import type { TestHerald } from './herald.ts';

export async function createApp(t: TestHerald, uid: string): Promise<string> {
  const created = await t.call('POST', '/api/v1/app', { name: uid, uid });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  return created.body.id;
}

export async function createEndpoint(
  t: TestHerald,
  app: string,
  body: Record<string, unknown>,
): Promise<string> {
  const created = await t.call('POST', `/api/v1/app/${app}/endpoint`, body);
  assert.equal(created.status, 201, JSON.stringify(created.body));
  return created.body.id;
}

export async function publishVia(
  t: TestHerald,
  app: string,
  body: Record<string, unknown>,
  headers: Record<string, string> = {},
): Promise<string> {
  const published = await t.call('POST', `/api/v1/app/${app}/msg`, body, headers);
  assert.equal(published.status, 202, JSON.stringify(published.body));
  return published.body.id;
}

export async function deliveryOf(t: TestHerald, messageId: string, endpointId: string) {
  const result = await t.database.db.query<{
    id: string;
    state: string;
    cycle: number;
    attempts_in_cycle: number;
    attempts_total: number;
  }>(
    'select id, state, cycle, attempts_in_cycle, attempts_total from delivery where message_id = $1 and endpoint_id = $2',
    [messageId, endpointId],
  );
  return result.rows[0];
}

export async function attemptsOf(t: TestHerald, deliveryId: string) {
  const result = await t.database.db.query<{
    id: string;
    cycle: number;
    outcome: string | null;
    status_code: number | null;
    response_class: string | null;
    response_body: string | null;
    lease_token: string;
  }>('select * from attempt where delivery_id = $1 order by id', [deliveryId]);
  return result.rows;
}
