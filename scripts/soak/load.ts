// The load generator: a client of herald's API as a real product and a real provider would be.
// Publishes carry an idempotency key and are retried with the SAME key and body after a timeout,
// a network error, a 429 or a 5xx (sometimes double-submitted at once). Inbound deliveries are
// signed as Standard Webhooks with a business key in the body, and redelivered on purpose: later,
// concurrently, and under a new delivery id. Every request and response is logged.

import { Webhook } from 'standardwebhooks';
import { createJournal, type Journal, now, sleep } from './journal.ts';
import { forkRng, type Rng } from './rng.ts';

export const EVENT_TYPES = [
  ['soak.a', 55],
  ['soak.b', 30],
  ['soak.c', 15],
] as const;
export const INBOUND_EVENT_TYPE = 'soak.inbound';
export const BUSINESS_KEY_TEMPLATE = '{{body.data.object.id}}:{{body.type}}';

/** One HTTP request the client made, and what came back. */
export interface ClientRequest {
  t0: number;
  t1: number;
  kind: 'setup' | 'publish' | 'ingest';
  op: string;
  api: string;
  method: string;
  path: string;
  /** publish: the idempotency key; ingest: the delivery id. */
  key: string | null;
  try: number;
  status: number | null;
  error: string | null;
  /** publish 2xx: the message id in the answer. */
  messageId: string | null;
}

export interface PublishOp {
  id: string;
  key: string;
  eventType: string;
  payload: Record<string, unknown>;
  doubleSubmit: boolean;
  firstSentAt: number;
  /** Every 2xx answer: when it arrived and the message id it named. */
  acks: { t: number; messageId: string }[];
  /** Final non-retryable answers (4xx other than 429): a retry of the same content must never get one. */
  refusals: { t: number; status: number; body: string }[];
  gaveUp: boolean;
  done: boolean;
}

export interface InboundDelivery {
  deliveryId: string;
  firstSentAt: number;
  acks: number[];
  refusals: { t: number; status: number; body: string }[];
  gaveUp: boolean;
}

export interface BusinessEvent {
  id: string;
  businessKey: string;
  eventType: string;
  pattern: 'single' | 'redeliver' | 'concurrent' | 'new-id' | 'concurrent-new-id';
  body: string;
  deliveries: InboundDelivery[];
  done: boolean;
}

export interface ApiResult {
  status: number | null;
  // biome-ignore lint/suspicious/noExplicitAny: JSON answers are inspected loosely
  body: any;
  text: string;
  error: string | null;
}

export interface Client {
  readonly requests: Journal<ClientRequest>;
  call(
    meta: { kind: ClientRequest['kind']; op: string; key?: string | null; try?: number; api?: number },
    method: string,
    path: string,
    body?: string,
    headers?: Record<string, string>,
  ): Promise<ApiResult>;
}

const REQUEST_TIMEOUT_MS = 5000;

export function createClient(apiUrls: readonly string[], adminKey: string, outDir: string): Client {
  const requests = createJournal<ClientRequest>(outDir, 'client');
  let rr = 0;
  return {
    requests,
    async call(meta, method, path, body, headers = {}) {
      const api = apiUrls[(meta.api ?? rr++) % apiUrls.length]!;
      const t0 = now();
      let result: ApiResult;
      try {
        const response = await fetch(api + path, {
          method,
          headers: {
            authorization: `Bearer ${adminKey}`,
            ...(body === undefined ? {} : { 'content-type': 'application/json' }),
            ...headers,
          },
          body: body ?? null,
          signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
        });
        const text = await response.text();
        let parsed: unknown = null;
        try {
          parsed = text ? JSON.parse(text) : null;
        } catch {
          parsed = null;
        }
        result = { status: response.status, body: parsed, text, error: null };
      } catch (error) {
        const e = error as Error & { cause?: { code?: string } };
        result = { status: null, body: null, text: '', error: `${e.name}: ${e.cause?.code ?? e.message}` };
      }
      requests.push({
        t0,
        t1: now(),
        kind: meta.kind,
        op: meta.op,
        api,
        method,
        path,
        key: meta.key ?? null,
        try: meta.try ?? 1,
        status: result.status,
        error: result.error,
        messageId:
          meta.kind === 'publish' && result.status !== null && result.status < 300
            ? (result.body?.id ?? null)
            : null,
      });
      return result;
    },
  };
}

/** Retryable: no answer at all, a 429, or a 5xx. */
const retryable = (r: ApiResult) => r.status === null || r.status === 429 || r.status >= 500;

const OP_DEADLINE_MS = 45_000;
const MAX_TRIES = 40;

/** Sends one request until it gets a final answer, retrying as a well-behaved client does. */
async function untilFinal(
  rng: Rng,
  send: (tryNo: number) => Promise<ApiResult>,
): Promise<{ result: ApiResult | null; t: number }> {
  const deadline = now() + OP_DEADLINE_MS;
  for (let tryNo = 1; tryNo <= MAX_TRIES && now() < deadline; tryNo++) {
    const result = await send(tryNo);
    if (!retryable(result)) return { result, t: now() };
    await sleep(Math.min(2000, 100 * 2 ** Math.min(tryNo, 5)) + rng.int(0, 100));
  }
  return { result: null, t: now() };
}

export interface LoadOptions {
  seed: number;
  client: Client;
  appUid: string;
  sourceUid: string;
  sourceSecret: string;
  /** Publishes per second. */
  publishRate: number;
  /** New inbound business events per second. */
  ingestRate: number;
  durationMs: number;
  /** Most operations in flight at once (further ticks are skipped, and counted). */
  maxInFlight: number;
  /** Called once, at this point of the run (a mid-soak subscription). */
  midway?: { atMs: number; run: () => Promise<void> };
}

export interface Load {
  readonly publishes: PublishOp[];
  readonly events: BusinessEvent[];
  readonly skipped: number;
  run(): Promise<void>;
}

export function createLoad(options: LoadOptions): Load {
  const { client, seed } = options;
  const plan = forkRng(seed, 'load');
  const publishes: PublishOp[] = [];
  const events: BusinessEvent[] = [];
  const signer = new Webhook(options.sourceSecret);
  let skipped = 0;
  let inFlight = 0;

  async function publish(n: number): Promise<void> {
    const rng = forkRng(seed, `publish:${n}`);
    const op: PublishOp = {
      id: `p${n}`,
      key: `soak-${seed}-${n}`,
      eventType: rng.weighted(EVENT_TYPES),
      payload: { n, seed, amount: rng.int(1, 100_000), note: rng.pick(['alpha', 'beta', 'gamma', 'delta']) },
      doubleSubmit: rng.chance(0.08),
      firstSentAt: now(),
      acks: [],
      refusals: [],
      gaveUp: false,
      done: false,
    };
    publishes.push(op);
    // The body is fixed once: a retry sends exactly the same content with the same key.
    const body = JSON.stringify({ eventType: op.eventType, payload: op.payload });
    const lane = async (laneNo: number) => {
      const { result, t } = await untilFinal(rng, (tryNo) =>
        client.call(
          { kind: 'publish', op: op.id, key: op.key, try: tryNo, api: n + tryNo + laneNo },
          'POST',
          `/api/v1/app/${options.appUid}/msg`,
          body,
          { 'idempotency-key': op.key },
        ),
      );
      if (!result) op.gaveUp = true;
      else if (result.status! < 300) op.acks.push({ t, messageId: result.body?.id });
      else op.refusals.push({ t, status: result.status!, body: result.text.slice(0, 300) });
    };
    await Promise.all(op.doubleSubmit ? [lane(0), lane(1)] : [lane(0)]);
    op.done = true;
  }

  async function deliver(n: number, event: BusinessEvent, deliveryId: string, rng: Rng): Promise<void> {
    let delivery = event.deliveries.find((d) => d.deliveryId === deliveryId);
    if (!delivery) {
      delivery = { deliveryId, firstSentAt: now(), acks: [], refusals: [], gaveUp: false };
      event.deliveries.push(delivery);
    }
    const record = delivery;
    const { result, t } = await untilFinal(rng, (tryNo) => {
      // A provider signs each (re)delivery afresh; the delivery id stays the same.
      const timestamp = new Date();
      return client.call(
        { kind: 'ingest', op: event.id, key: deliveryId, try: tryNo, api: n + tryNo },
        'POST',
        `/ingest/${options.sourceUid}`,
        event.body,
        {
          'webhook-id': deliveryId,
          'webhook-timestamp': String(Math.floor(timestamp.getTime() / 1000)),
          'webhook-signature': signer.sign(deliveryId, timestamp, event.body),
        },
      );
    });
    if (!result) record.gaveUp = true;
    else if (result.status! < 300) record.acks.push(t);
    else record.refusals.push({ t, status: result.status!, body: result.text.slice(0, 300) });
  }

  async function ingest(n: number): Promise<void> {
    const rng = forkRng(seed, `ingest:${n}`);
    const orderId = `ord-${seed}-${n}`;
    const type = rng.pick(['order.paid', 'order.shipped', 'order.refunded']);
    const event: BusinessEvent = {
      id: `i${n}`,
      businessKey: `${orderId}:${type}`,
      eventType: INBOUND_EVENT_TYPE,
      pattern: rng.weighted([
        ['single', 40],
        ['redeliver', 20],
        ['concurrent', 20],
        ['new-id', 10],
        ['concurrent-new-id', 10],
      ] as const),
      body: JSON.stringify({
        type,
        id: `evt-${n}`,
        data: { object: { id: orderId, amount: rng.int(1, 9999) } },
      }),
      deliveries: [],
      done: false,
    };
    events.push(event);
    const first = `msgin_${seed}_${n}`;
    const second = `${first}_again`;
    switch (event.pattern) {
      case 'single':
        await deliver(n, event, first, rng);
        break;
      case 'redeliver':
        await deliver(n, event, first, rng);
        await sleep(rng.int(300, 2500));
        await deliver(n, event, first, rng);
        break;
      case 'concurrent':
        await Promise.all([0, 1, 2].map(() => deliver(n, event, first, rng)));
        break;
      case 'new-id':
        await deliver(n, event, first, rng);
        await sleep(rng.int(200, 1500));
        await deliver(n, event, second, rng);
        break;
      case 'concurrent-new-id':
        await Promise.all([deliver(n, event, first, rng), deliver(n, event, second, rng)]);
        break;
    }
    event.done = true;
  }

  return {
    publishes,
    events,
    get skipped() {
      return skipped;
    },
    async run() {
      const started = now();
      const end = started + options.durationMs;
      const totalRate = options.publishRate + options.ingestRate;
      const tickMs = 1000 / totalRate;
      const ops = new Set<Promise<void>>();
      let publishN = 0;
      let ingestN = 0;
      let midwayDone = !options.midway;
      for (let tick = 0; ; tick++) {
        const at = started + tick * tickMs;
        if (at >= end) break;
        await sleep(at - now());
        if (!midwayDone && now() - started >= options.midway!.atMs) {
          midwayDone = true;
          const midway = options.midway!.run();
          ops.add(midway);
          void midway.finally(() => ops.delete(midway));
        }
        // Drawn every tick, whether or not the op runs, so the plan does not depend on timing.
        const isPublish = plan.next() * totalRate < options.publishRate;
        if (inFlight >= options.maxInFlight) {
          skipped++;
          continue;
        }
        inFlight++;
        const op = (isPublish ? publish(publishN++) : ingest(ingestN++)).finally(() => {
          inFlight--;
        });
        ops.add(op);
        void op.finally(() => ops.delete(op));
      }
      // Every operation ends by itself (answers, or gives up at its deadline).
      await Promise.all([...ops]);
    },
  };
}
