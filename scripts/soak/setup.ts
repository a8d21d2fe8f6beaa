// The soak's tenant, through herald's own API: one app, one endpoint per receiver (the late one is
// subscribed mid-soak), and one standard-webhooks inbound source whose business key is read from
// the body.

import crypto from 'node:crypto';
import { now, sleep } from './journal.ts';
import { BUSINESS_KEY_TEMPLATE, type Client, INBOUND_EVENT_TYPE } from './load.ts';
import type { Behaviour, ReceiverFarm, SoakReceiver } from './receivers.ts';

export interface EndpointModel {
  name: string;
  id: string;
  url: string;
  behaviour: Behaviour;
  filterTypes: string[] | null;
  late: boolean;
  /** When the client first asked for it, and when it knew it existed (committed). */
  createSentAt: number;
  createdAt: number;
}

export interface SoakModel {
  appId: string;
  appUid: string;
  sourceId: string;
  sourceUid: string;
  sourceSecret: string;
  endpoints: EndpointModel[];
}

const APP_UID = 'soak';
const SOURCE_UID = 'soak-provider';

/** Retries a setup call until it gets a final answer; bounded. */
async function settle(
  client: Client,
  op: string,
  method: string,
  path: string,
  body?: unknown,
): Promise<{ status: number; body: Record<string, unknown> }> {
  const deadline = now() + 60_000;
  for (let tryNo = 1; now() < deadline; tryNo++) {
    const r = await client.call(
      { kind: 'setup', op, try: tryNo },
      method,
      path,
      body === undefined ? undefined : JSON.stringify(body),
    );
    if (r.status !== null && r.status < 500 && r.status !== 429)
      return { status: r.status, body: r.body ?? {} };
    await sleep(300);
  }
  throw new Error(`setup call ${method} ${path} got no final answer within 60 s`);
}

function expectStatus(
  what: string,
  answer: { status: number; body: Record<string, unknown> },
  ok: number[],
): Record<string, unknown> {
  if (!ok.includes(answer.status))
    throw new Error(`${what}: HTTP ${answer.status} ${JSON.stringify(answer.body)}`);
  return answer.body;
}

/**
 * Creates the endpoint of one receiver. Its uid makes the call safe to repeat: when an earlier
 * try committed but its answer was lost, the repeat is a 409 and the endpoint is read back.
 */
async function createEndpoint(client: Client, receiver: SoakReceiver): Promise<EndpointModel> {
  const { spec } = receiver;
  const createSentAt = now();
  const answer = await settle(client, `endpoint:${spec.name}`, 'POST', `/api/v1/app/${APP_UID}/endpoint`, {
    uid: spec.name,
    url: receiver.url,
    description: `soak receiver (${spec.behaviour})`,
    filterTypes: spec.filterTypes,
    idempotent: true,
    secret: receiver.secret,
  });
  let body = answer.body;
  if (answer.status === 409) {
    body = expectStatus(
      `read back endpoint ${spec.name}`,
      await settle(client, `endpoint:${spec.name}`, 'GET', `/api/v1/app/${APP_UID}/endpoint/${spec.name}`),
      [200],
    );
  } else {
    expectStatus(`create endpoint ${spec.name}`, answer, [201]);
  }
  return {
    name: spec.name,
    id: String(body['id']),
    url: receiver.url,
    behaviour: spec.behaviour,
    filterTypes: spec.filterTypes,
    late: spec.late === true,
    createSentAt,
    createdAt: now(),
  };
}

export async function setUp(client: Client, farm: ReceiverFarm): Promise<SoakModel> {
  const app = expectStatus(
    'create app',
    await settle(client, 'app', 'POST', '/api/v1/app', { name: 'soak', uid: APP_UID }),
    [201],
  );
  const endpoints: EndpointModel[] = [];
  for (const receiver of farm.receivers) {
    if (!receiver.spec.late) endpoints.push(await createEndpoint(client, receiver));
  }
  const sourceSecret = `whsec_${crypto.randomBytes(32).toString('base64')}`;
  const source = expectStatus(
    'create source',
    await settle(client, 'source', 'POST', '/api/v1/source', {
      uid: SOURCE_UID,
      scheme: 'standard-webhooks',
      secret: sourceSecret,
      app: APP_UID,
      eventType: INBOUND_EVENT_TYPE,
      businessKey: BUSINESS_KEY_TEMPLATE,
    }),
    [201],
  );
  return {
    appId: String(app['id']),
    appUid: APP_UID,
    sourceId: String(source['id']),
    sourceUid: SOURCE_UID,
    sourceSecret,
    endpoints,
  };
}

/** The mid-soak subscription: only messages published after it exists may (and must) reach it. */
export async function subscribeLate(client: Client, farm: ReceiverFarm, model: SoakModel): Promise<void> {
  for (const receiver of farm.receivers) {
    if (receiver.spec.late) model.endpoints.push(await createEndpoint(client, receiver));
  }
}
