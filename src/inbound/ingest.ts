// The receiving side (invariant 11): verify the raw bytes, then in ONE transaction claim the
// delivery id, publish the relayed message with its business key, and record the observation.
// The caller answers 2xx only after this resolves, i.e. after COMMIT. A redelivery of a claimed
// id records a duplicate observation and publishes nothing.

import { isUtf8 } from 'node:buffer';
import crypto from 'node:crypto';
import type { Logger } from 'pino';
import type { SecretBox } from '../crypto/secret-box.ts';
import { createGroupCommit, MAX_BATCH_CHARS } from '../db/group-commit.ts';
import { claimedBusinessKey, type IntakeReceipt, recordReceipts } from '../db/intake.ts';
import { createNotifiedCache, loadOne } from '../db/notified-cache.ts';
import type { Db } from '../db/port.ts';
import {
  findSource,
  keepSubscriptionToken,
  liveSourceSecrets,
  SOURCE_CHANGED_CHANNEL,
  type SourceRow,
} from '../db/sources.ts';
import { MAX_PAYLOAD_DEPTH, nestedDeeperThan } from '../domain/json-depth.ts';
import { steadyNow } from '../domain/steady-clock.ts';
import { DEFAULT_RETENTION_DAYS } from '../engine/publish.ts';
import { HeraldError, notFound } from '../errors.ts';
import { failpoint } from '../ops/failpoints.ts';
import { type Metrics, sourceLabel } from '../ops/metrics.ts';
import { type BusinessKeyTemplate, compileBusinessKey } from './business-key.ts';
import {
  createSnsCertificates,
  createVerifier,
  type FetchText,
  type InboundRequest,
  isSnsUrl,
  type Verifier,
} from './verifiers/index.ts';
import { field } from './verifiers/verdict.ts';

export interface IngestDeps {
  db: Db;
  box: SecretBox;
  log: Logger;
  fetchText: FetchText;
  metrics?: Metrics;
}

export type IngestResult =
  | { kind: 'accepted'; intakeId: string; messageId: string | null; duplicate: boolean }
  | { kind: 'subscription'; confirmed: boolean }
  /** A provider's handshake (Slack's url_verification): its challenge is answered, nothing stored. */
  | { kind: 'challenge'; challenge: string }
  /** A provider's notice to the operator (Slack's app_rate_limited): logged, acknowledged, not stored. */
  | { kind: 'notice' };

export interface Ingestor {
  /** The source of this id or uid, if there is one: asked before a request's body is read. */
  find(sourceIdOrUid: string): Promise<SourceRow | null>;
  /** `found`: what find() answered for this request, so that the source is not looked up twice. */
  ingest(sourceIdOrUid: string, request: InboundRequest, found?: SourceRow): Promise<IngestResult>;
  close(): Promise<void>;
}

/** Verifiers keep caches (JWKS, certificates): one per source, rebuilt when the source changes or a
 * secret’s rotation overlap ends. */
interface CachedSource {
  version: string;
  /** A secret in its rotation overlap stops verifying at its expiry: rebuild then. */
  validUntil: number;
  verifier: Verifier;
  businessKey: BusinessKeyTemplate;
}

export function createIngestor(deps: IngestDeps): Ingestor {
  // The source of every request, without a query per request: evicted when a change is announced.
  const sources = createNotifiedCache<SourceRow>({
    db: deps.db,
    channel: SOURCE_CHANGED_CHANNEL,
    // One request names one source: a read of one row.
    load: loadOne((idOrUid) => findSource(deps.db, idOrUid)),
    idOf: (source) => source.id,
    log: deps.log,
  });
  const cache = new Map<string, CachedSource>();
  // Shared by every SNS source's verifier, and kept when one is rebuilt.
  const snsCertificates = createSnsCertificates(deps.fetchText);
  // Receipts that arrive together are recorded by one call, in one transaction (group commit), on
  // a pipeline of their own: once 16 wait, a second write goes right behind the one under way.
  // Recording a receipt is database-heavy (claim, message, delivery, audit, observation): once
  // receipts have waited 5 ms, a writer beside the pipeline puts the database's other core to
  // work, and stays while they wait (see group-commit.ts).
  const intakePipeline = deps.db.pipeline();
  const submitIntake = createGroupCommit(
    async (receipts: IntakeReceipt[], lane) =>
      (
        await recordReceipts(
          lane === 'pipelined' ? intakePipeline : deps.db,
          receipts,
          DEFAULT_RETENTION_DAYS,
        )
      ).map(({ claimed, ...r }): RecordedIntake => ({ kind: 'accepted', ...r, duplicate: !claimed })),
    {
      maxBatch: 64,
      pipelined: 2,
      beside: 1,
      besideStays: true,
      splitAt: 16,
      maxWaitMs: 5,
      // Not acknowledged: the sender delivers it again.
      overloaded: () =>
        new HeraldError(
          'overloaded',
          'too many deliveries are waiting for the database; deliver again later',
        ),
      written: (results, seconds) => deps.metrics?.batchWritten('intake', results.length, seconds),
      // 64 bodies of up to 8 MiB (more with a larger HERALD_INGEST_MAX_BODY_BYTES), escaped into
      // one JSON parameter, could pass what a string can hold: large ones go in smaller batches.
      batchSize: { of: (receipt) => receipt.payload.length, max: MAX_BATCH_CHARS },
    },
  );

  // Whatever a verifier is built from: a change to any of it (made anywhere; a change of secrets
  // bumps updated_at) rebuilds the verifier. Worked out once per row read.
  const versions = new WeakMap<SourceRow, string>();
  const versionOf = (source: SourceRow): string => {
    let version = versions.get(source);
    if (version === undefined) {
      version = [
        source.updatedAt.getTime(),
        source.scheme,
        source.businessKey,
        JSON.stringify(source.settings),
      ].join('\u0000');
      versions.set(source, version);
    }
    return version;
  };

  /** Builds under way, by source and version: requests that find none cached share one. */
  const building = new Map<string, Promise<CachedSource>>();

  function prepared(source: SourceRow): Promise<CachedSource> {
    const version = versionOf(source);
    const cached = cache.get(source.id);
    if (cached?.version === version && steadyNow() < cached.validUntil) return Promise.resolve(cached);
    // Requests that come together for a source not cached (a start, a change) build its verifier
    // once: each its own would read the secrets and fetch its JWKS anew, the last one kept.
    const key = `${source.id}\u0000${version}`;
    let build = building.get(key);
    if (build === undefined) {
      build = prepare(source, version).finally(() => building.delete(key));
      building.set(key, build);
    }
    return build;
  }

  async function prepare(source: SourceRow, version: string): Promise<CachedSource> {
    // A database failure here is the store's (503 store_unavailable), not the source's.
    const secrets = await liveSourceSecrets(deps.db, source.id);
    let entry: CachedSource;
    try {
      entry = {
        version,
        validUntil:
          secrets.firstExpiresInMs === null
            ? Number.POSITIVE_INFINITY
            : steadyNow() + secrets.firstExpiresInMs,
        verifier: createVerifier(
          { ...source.settings, scheme: source.scheme } as never,
          secrets.sealed.map((sealed) => deps.box.open(sealed, source.id)),
          { fetchText: deps.fetchText, snsCertificates },
        ),
        businessKey: compileBusinessKey(source.businessKey),
      };
    } catch (error) {
      // Its settings or secrets cannot make a verifier (changed in SQL, or sealed with another
      // master key): nothing can be accepted, and the sender should retry once it is mended.
      deps.log.error(
        { sourceId: source.id, err: (error as Error).message },
        'the source cannot verify requests',
      );
      throw new HeraldError(
        'verification_unavailable',
        'this source cannot verify requests now; retry later',
      );
    }
    cache.set(source.id, entry);
    return entry;
  }

  async function confirmSubscription(source: SourceRow, payload: unknown): Promise<IngestResult> {
    const url = (payload as { SubscribeURL?: unknown }).SubscribeURL;
    if (source.settings['confirmSubscriptions'] !== true) {
      // The operator confirms it (with AuthenticateOnUnsubscribe), and needs its token for that:
      // kept, as SNS does not send a confirmation again once it was answered. A failed write is
      // a 503, for SNS to send it again.
      const topicArn = field(payload, 'TopicArn');
      const token = field(payload, 'Token');
      if (typeof topicArn === 'string' && typeof token === 'string') {
        await keepSubscriptionToken(deps.db, source.id, topicArn, deps.box.seal(token, source.id));
      }
      deps.log.warn(
        { sourceId: source.id, topicArn },
        'SNS subscription confirmation kept for the operator: `herald sources confirmations <source>` prints the command that confirms it',
      );
      return { kind: 'subscription', confirmed: false };
    }
    if (typeof url !== 'string' || !isSnsUrl(url)) {
      deps.log.warn(
        { sourceId: source.id },
        'SNS subscription confirmation without a SubscribeURL on an SNS host; ignored',
      );
      return { kind: 'subscription', confirmed: false };
    }
    try {
      await deps.fetchText(url);
    } catch (error) {
      // SNS sends the confirmation again: a 503 asks it to, as for a store failure.
      deps.log.warn(
        { sourceId: source.id, err: (error as Error).message },
        'SNS subscription could not be confirmed: its SubscribeURL did not answer',
      );
      throw new HeraldError(
        'verification_unavailable',
        'the subscription could not be confirmed now (its SubscribeURL did not answer); retry later',
      );
    }
    deps.log.info({ sourceId: source.id }, 'SNS subscription confirmed');
    return { kind: 'subscription', confirmed: true };
  }

  return {
    find: (sourceIdOrUid) => sources.get(sourceIdOrUid),
    async ingest(sourceIdOrUid, request, found) {
      const source = found ?? (await sources.get(sourceIdOrUid));
      if (!source) throw notFound('source');
      // Counted per source only once the source exists: the path is the sender's to choose, and
      // unknown names must not grow the metric set.
      const label = sourceLabel(source);
      const { verifier, businessKey: template } = await prepared(source).catch((error: unknown) => {
        // A source that cannot verify refuses every delivery: counted, so that its alert fires.
        if (error instanceof HeraldError) deps.metrics?.intake(label, 'rejected');
        throw error;
      });
      const verdict = await verifier.verify(request, new Date());
      if (!verdict.ok) {
        deps.metrics?.intake(label, 'rejected');
        // The sender hears only that herald could not verify; the operator needs why.
        if (verdict.cause !== undefined) {
          deps.log.warn({ sourceId: source.id, err: verdict.cause }, `ingest: ${verdict.reason}`);
        }
        throw new HeraldError(verdict.code, verdict.reason);
      }
      // Told apart by its type, not its id: an event's own id may read the same. The verifier
      // accepted it only with a challenge.
      if (source.scheme === 'slack' && field(verdict.payload, 'type') === 'url_verification') {
        return { kind: 'challenge', challenge: field(verdict.payload, 'challenge') as string };
      }
      if (source.scheme === 'slack' && field(verdict.payload, 'type') === 'app_rate_limited') {
        deps.log.warn(
          {
            sourceId: source.id,
            teamId: field(verdict.payload, 'team_id'),
            minuteRateLimited: field(verdict.payload, 'minute_rate_limited'),
          },
          'Slack: this app is rate limited; Slack drops its events for that minute (not redelivered)',
        );
        return { kind: 'notice' };
      }
      if (source.scheme === 'aws-sns') {
        const type = field(verdict.payload, 'Type');
        if (type === 'SubscriptionConfirmation') return confirmSubscription(source, verdict.payload);
        // SNS telling that herald's subscription ended is news for the operator, not an event.
        if (type === 'UnsubscribeConfirmation') {
          deps.log.warn({ sourceId: source.id }, 'SNS: the subscription of this source was ended');
          return { kind: 'subscription', confirmed: false };
        }
      }
      const bodySha256 = crypto.createHash('sha256').update(request.rawBody).digest();
      const rendered = template.render({
        deliveryId: verdict.deliveryId,
        headers: request.headers,
        payload: verdict.payload,
        rawBody: request.rawBody,
        bodySha256,
      });
      // A redelivery of a claimed id is a duplicate whatever the template makes of it now (the
      // template changed since, or reads a header retries do not carry): it keeps its claim's key.
      const missingKey = (why: string): never => {
        deps.metrics?.intake(label, 'rejected');
        // An authentic event refused, and nothing stored: many providers never send it again. The
        // log is where an operator finds which one to ask for (a delivery id is visible ASCII,
        // and a forged request never gets this far, so it cannot flood the log).
        deps.log.warn(
          { sourceId: source.id, deliveryId: verdict.deliveryId, why },
          'a verified delivery was refused: the business-key template made no key of it (400 missing_business_key); ask the provider to redeliver it once the template is fixed',
        );
        throw new HeraldError(
          'missing_business_key',
          `no business key from the template ${source.businessKey}: ${why}`,
        );
      };
      const businessKey =
        rendered.key ??
        (await claimedBusinessKey(deps.db, source.id, verdict.deliveryId)) ??
        missingKey(rendered.why);
      failpoint('ingest.before_claim');
      const recorded = await submitIntake({
        sourceId: source.id,
        deliveryId: verdict.deliveryId,
        businessKey,
        bodySha256,
        // An SNS envelope is verified field by field, on its parsed object: relayed as that object,
        // so that a key given twice (which parsers read apart: the last, or the first) reaches the
        // receiver once, with the value whose signature was checked.
        payload:
          source.scheme === 'aws-sns'
            ? JSON.stringify(verdict.payload)
            : relayedPayload(request.rawBody, verdict.payload),
      });
      const { relayed, ...result } = recorded;
      failpoint('ingest.after_commit');
      // Counted after COMMIT, like the 2xx: a rolled-back claim is not a claim. A new delivery id
      // whose business key had a message already joined it, and nothing was relayed again: said
      // apart, as it may be the same event redelivered under a new id, or a template that lets two
      // events share a key (the observations keep each body's digest to tell).
      const joined = !result.duplicate && !relayed;
      deps.metrics?.intake(label, result.duplicate ? 'duplicate' : joined ? 'joined' : 'claimed');
      if (joined) {
        deps.log.info(
          { sourceId: source.id, deliveryId: verdict.deliveryId, messageId: result.messageId },
          'a new delivery id carried a business key that had a message already: joined it, not relayed again',
        );
      }
      if (relayed) deps.metrics?.published('ingest');
      return result;
    },
    async close() {
      await sources.close();
      await intakePipeline.close();
    },
  };
}

type RecordedIntake = Extract<IngestResult, { kind: 'accepted' }> & { relayed: boolean };

/**
 * The relayed message's payload: a JSON object body exactly as the provider sent it (so the
 * downstream receiver sees the provider's bytes); any other JSON (an array, a string, a number)
 * as {"body": …} around those same bytes — parsed and written again, a number past what a double
 * holds (an id like 1234567890123456789) would change; other text as {"body": "…"}; and bytes that
 * are not UTF-8 (a Latin-1 form post, a binary body) as {"bodyBase64": …}: as text they would lose
 * what they hold for good. A leading byte-order mark is dropped from JSON: it is not part of the
 * JSON text (RFC 8259, 8.1), the parser skipped it, and a stored payload must parse as JSON
 * wherever it is read back or delivered.
 */
function relayedPayload(rawBody: Buffer, parsed: unknown): string {
  if (!isUtf8(rawBody)) return JSON.stringify({ bodyBase64: rawBody.toString('base64') });
  const decoded = rawBody.toString('utf8');
  const text = decoded.charCodeAt(0) === BYTE_ORDER_MARK ? decoded.slice(1) : decoded;
  // Nested past what a payload may be (domain/json-depth.ts): relayed whole, as text.
  if (nestedDeeperThan(text, MAX_PAYLOAD_DEPTH)) return JSON.stringify({ body: decoded });
  if (parsed !== null && typeof parsed === 'object' && !Array.isArray(parsed)) return text;
  // parseJsonBody answers null for what is not JSON, and for the JSON text `null` — around which
  // only JSON's own whitespace may stand: `trim()` also takes a no-break space or U+2028 away, and
  // `{"body": null}` with one inside is no JSON.
  if (parsed !== null || JSON_NULL.test(text)) return `{"body":${text}}`;
  // Other text whole, byte-order mark included: it is part of what was signed.
  return JSON.stringify({ body: decoded });
}

const BYTE_ORDER_MARK = 0xfeff;
const JSON_NULL = /^[ \t\n\r]*null[ \t\n\r]*$/;
