// The receiving side (invariant 11): verify the raw bytes, then in ONE transaction claim the
// delivery id, publish the relayed message with its business key, and record the observation.
// The caller answers 2xx only after this resolves, i.e. after COMMIT. A redelivery of a claimed
// id records a duplicate observation and publishes nothing.

import crypto from 'node:crypto';
import type { Logger } from 'pino';
import type { SecretBox } from '../crypto/secret-box.ts';
import { type AppRow, findApps } from '../db/apps.ts';
import { createGroupCommit } from '../db/group-commit.ts';
import { claimIntakes, linkIntakeMessages, recordObservations } from '../db/intake.ts';
import { publishMessages } from '../db/messages.ts';
import type { Db, Queryable } from '../db/port.ts';
import { findSource, liveSourceSecrets, type SourceRow } from '../db/sources.ts';
import { DEFAULT_RETENTION_DAYS } from '../engine/publish.ts';
import { HeraldError, notFound } from '../errors.ts';
import { failpoint } from '../ops/failpoints.ts';
import type { Metrics } from '../ops/metrics.ts';
import { type BusinessKeyTemplate, compileBusinessKey } from './business-key.ts';
import {
  createVerifier,
  type FetchText,
  type InboundRequest,
  isSnsUrl,
  type Verifier,
} from './verifiers/index.ts';

export interface IngestDeps {
  db: Db;
  box: SecretBox;
  log: Logger;
  fetchText: FetchText;
  metrics?: Metrics;
}

export type IngestResult =
  | { kind: 'accepted'; intakeId: string; messageId: string | null; duplicate: boolean }
  | { kind: 'subscription'; confirmed: boolean };

export interface Ingestor {
  ingest(sourceIdOrUid: string, request: InboundRequest): Promise<IngestResult>;
}

/** Verifiers keep caches (JWKS, certificates): one per source, rebuilt when the source changes or a
 * secret’s rotation overlap ends. */
interface CachedSource {
  version: number;
  /** A secret in its rotation overlap stops verifying at its expiry: rebuild then. */
  validUntil: number;
  verifier: Verifier;
  businessKey: BusinessKeyTemplate;
}

export function createIngestor(deps: IngestDeps): Ingestor {
  const cache = new Map<string, CachedSource>();
  // Receipts that arrive together share one transaction and one commit (group commit).
  const submitIntake = createGroupCommit(
    (items: IntakeItem[]) => deps.db.transaction((tx) => recordIntakes(tx, items)),
    { maxBatch: 64, parallel: 2 },
  );

  async function prepared(source: SourceRow): Promise<CachedSource> {
    const version = source.updatedAt.getTime();
    const cached = cache.get(source.id);
    if (cached?.version === version && Date.now() < cached.validUntil) return cached;
    const secrets = await liveSourceSecrets(deps.db, source.id);
    const verifier = createVerifier(
      { ...source.settings, scheme: source.scheme } as never,
      secrets.sealed.map((sealed) => deps.box.open(sealed, source.id)),
      { fetchText: deps.fetchText },
    );
    const entry: CachedSource = {
      version,
      validUntil: secrets.firstExpiry?.getTime() ?? Number.POSITIVE_INFINITY,
      verifier,
      businessKey: compileBusinessKey(source.businessKey),
    };
    cache.set(source.id, entry);
    return entry;
  }

  async function confirmSubscription(source: SourceRow, payload: unknown): Promise<IngestResult> {
    const url = (payload as { SubscribeURL?: unknown }).SubscribeURL;
    if (source.settings['confirmSubscriptions'] !== true || typeof url !== 'string' || !isSnsUrl(url)) {
      deps.log.warn(
        { sourceId: source.id },
        'SNS subscription confirmation not enabled for this source; ignored',
      );
      return { kind: 'subscription', confirmed: false };
    }
    await deps.fetchText(url);
    deps.log.info({ sourceId: source.id }, 'SNS subscription confirmed');
    return { kind: 'subscription', confirmed: true };
  }

  return {
    async ingest(sourceIdOrUid, request) {
      const source = await findSource(deps.db, sourceIdOrUid);
      if (!source) throw notFound('source');
      const { verifier, businessKey: template } = await prepared(source);
      // Counted per source only once the source exists: the path is the sender's to choose, and
      // unknown names must not grow the metric set.
      const label = source.uid ?? source.id;
      const verdict = await verifier.verify(request, new Date());
      if (!verdict.ok) {
        deps.metrics?.intake(label, 'rejected');
        throw new HeraldError(verdict.code, verdict.reason);
      }
      if (
        source.scheme === 'aws-sns' &&
        (verdict.payload as { Type?: string })?.Type === 'SubscriptionConfirmation'
      ) {
        return confirmSubscription(source, verdict.payload);
      }
      const businessKey = template.render({
        deliveryId: verdict.deliveryId,
        headers: request.headers,
        payload: verdict.payload,
      });
      if (businessKey === null) {
        deps.metrics?.intake(label, 'rejected');
        throw new HeraldError(
          'missing_business_key',
          `the business key template ${source.businessKey} names a missing field`,
        );
      }
      failpoint('ingest.before_claim');
      const recorded = await submitIntake({
        source,
        deliveryId: verdict.deliveryId,
        businessKey,
        bodySha256: crypto.createHash('sha256').update(request.rawBody).digest(),
        payload: relayedPayload(request.rawBody, verdict.payload),
      });
      const { relayed, ...result } = recorded;
      failpoint('ingest.after_commit');
      // Counted after COMMIT, like the 2xx: a rolled-back claim is not a claim.
      deps.metrics?.intake(label, result.duplicate ? 'duplicate' : 'claimed');
      if (relayed) deps.metrics?.published('ingest');
      return result;
    },
  };
}

interface IntakeItem {
  source: SourceRow;
  deliveryId: string;
  businessKey: string;
  bodySha256: Buffer;
  /** The relayed message's payload. */
  payload: string;
}

type RecordedIntake = Extract<IngestResult, { kind: 'accepted' }> & { relayed: boolean };

/**
 * Claims the delivery ids, publishes a relayed message for each new claim, and records every
 * receipt as an observation — inside the caller's transaction, in a handful of statements whatever
 * the number of receipts.
 */
async function recordIntakes(tx: Queryable, items: readonly IntakeItem[]): Promise<RecordedIntake[]> {
  const claims = await claimIntakes(
    tx,
    items.map((item) => ({
      sourceId: item.source.id,
      appId: item.source.appId,
      deliveryId: item.deliveryId,
      businessKey: item.businessKey,
      bodySha256: item.bodySha256,
    })),
  );
  const fresh = items.flatMap((item, at) => (claims[at]!.claimed ? [{ item, at }] : []));
  // The business key is the message's idempotency key: another delivery id carrying the same
  // business event joins the message the first one produced. Key order keeps concurrent batches
  // from deadlocking on one another's keys.
  fresh.sort((a, b) => compareText(idempotencyKeyOf(a.item), idempotencyKeyOf(b.item)));
  // A relayed payload is kept for the source's retention, else its app's, else the default.
  const appsToAsk = fresh.filter((f) => f.item.source.retentionDays === null).map((f) => f.item.source.appId);
  const apps =
    appsToAsk.length === 0 ? new Map<string, AppRow>() : await findApps(tx, [...new Set(appsToAsk)]);
  const published = await publishMessages(
    tx,
    fresh.map(({ item }) => ({
      appId: item.source.appId,
      eventType: item.source.eventType,
      eventId: null,
      payload: item.payload,
      channels: null,
      tags: null,
      idempotencyKey: idempotencyKeyOf(item),
      requestHash: crypto.createHash('sha256').update(item.businessKey).digest(),
      retentionDays:
        item.source.retentionDays ?? apps.get(item.source.appId)?.retentionDays ?? DEFAULT_RETENTION_DAYS,
      businessKey: item.businessKey,
      actor: `source:${item.source.id}`,
    })),
  );
  const messageOf = new Map<string, string>();
  const relayed = new Set<number>();
  for (const [i, { at }] of fresh.entries()) {
    const result = published[i]!;
    messageOf.set(claims[at]!.intakeId, result.message.id);
    // Another delivery id with the same business key joins the existing message: not new.
    if (result.kind === 'created') relayed.add(at);
  }
  await linkIntakeMessages(
    tx,
    [...messageOf].map(([intakeId, messageId]) => ({ intakeId, messageId })),
  );
  await recordObservations(
    tx,
    items.map((item, at) => ({
      intakeId: claims[at]!.intakeId,
      appId: item.source.appId,
      duplicate: !claims[at]!.claimed,
      bodySha256: item.bodySha256,
    })),
  );
  failpoint('ingest.after_claim');
  return items.map((_, at) => {
    const claim = claims[at]!;
    return {
      kind: 'accepted',
      intakeId: claim.intakeId,
      // A duplicate of a receipt in this same batch takes the message its first receipt produced.
      messageId: claim.messageId ?? messageOf.get(claim.intakeId) ?? null,
      duplicate: !claim.claimed,
      relayed: relayed.has(at),
    };
  });
}

const idempotencyKeyOf = (item: IntakeItem) => `intake:${item.source.id}:${item.businessKey}`;
const compareText = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

/**
 * The relayed message's payload: a JSON object body exactly as the provider sent it (so the
 * downstream receiver sees the provider's bytes), anything else wrapped as {"body": …}.
 */
function relayedPayload(rawBody: Buffer, parsed: unknown): string {
  if (parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed))
    return rawBody.toString('utf8');
  return JSON.stringify({ body: parsed ?? rawBody.toString('utf8') });
}
