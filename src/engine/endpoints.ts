// Endpoint administration: destination checks, sealed secrets, headers, and the audit trail.

import type { z } from 'zod';
import { urlOrigin } from '../config.ts';
import { openHeaders, sealHeaders } from '../crypto/sealed-headers.ts';
import type { AppRow } from '../db/apps.ts';
import { recordAudit } from '../db/audit.ts';
import { liftEndpointPause } from '../db/deliveries.ts';
import {
  currentSecret,
  insertCurrentSecret,
  MAX_PREVIOUS_SECRETS,
  rotateSecret,
} from '../db/endpoint-secrets.ts';
import {
  type EndpointFields,
  type EndpointRow,
  findEndpoint,
  insertEndpoint,
  lockEndpoint,
  setEndpointHeaders,
  updateEndpoint,
} from '../db/endpoints.ts';
import type { Queryable } from '../db/port.ts';
import { HeraldError, invalidField, notFound } from '../errors.ts';
import { emitEndpointEvent } from '../ops/operational-webhooks.ts';
import type { EndpointIn, EndpointPatch, EndpointUpdate } from '../schemas/svix.ts';
import { checkDestination } from '../sender/send.ts';
import { generateEndpointSecret } from '../signing/standard-webhooks.ts';
import { type Actor, type Core, forCaller, openForCaller } from './core.ts';

/** Headers herald sets itself, or that would change how the request is framed. */
const RESERVED_HEADER =
  /^(webhook-|svix-|host$|content-length$|content-type$|connection$|transfer-encoding$|te$|upgrade$|keep-alive$|proxy-|expect$|idempotency-key$)/i;
const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9a-zA-Z-]+$/;
/**
 * Visible ASCII, spaces and tabs. The HTTP client refuses a control character, and text beyond
 * Latin-1, at every attempt (which would fail each one against the endpoint until it is
 * disabled); Latin-1 text would leave as bytes a receiver reads as other characters.
 */
const HEADER_VALUE = /^[\t\x20-\x7e]*$/;

export const DEFAULT_GRACE_SECONDS = 24 * 3600;

/** Refuses a URL herald would never send to, naming the reason (invariant 10). */
async function assertDestination(core: Core, url: string): Promise<void> {
  const verdict = await checkDestination(url, core.addressPolicy);
  if (!verdict.ok) throw invalidField(['url'], verdict.reason);
}

/**
 * Checks the URL an endpoint is about to take — any URL for a new endpoint (`current` null), a
 * changed one for an existing endpoint — and returns it, to be passed to createEndpoint or
 * replaceEndpoint as checked; null when there is nothing to check. The check may wait on DNS for
 * seconds: it belongs before the transaction opens — the embedded database runs one at a time,
 * and a server's holds a pooled connection.
 */
export async function checkNewUrl(
  core: Core,
  current: EndpointRow | null,
  url: string,
): Promise<string | null> {
  if (current !== null && url === current.url) return null;
  await assertDestination(core, url);
  return url;
}

type EndpointInput = z.infer<typeof EndpointUpdate>;

function toFields(input: EndpointInput): EndpointFields {
  return {
    uid: input.uid ?? null,
    url: input.url,
    description: input.description ?? '',
    version: input.version ?? 1,
    throttleRate: input.throttleRate ?? input.rateLimit ?? null,
    filterTypes: input.filterTypes ?? input.eventTypes ?? null,
    channels: input.channels ?? null,
    metadata: input.metadata ?? {},
    disabled: input.disabled ?? false,
    idempotent: input.idempotent ?? true,
    clientErrorPolicy: input.clientErrorPolicy ?? 'retry',
  };
}

/** `checkedUrl`: what checkNewUrl answered before the transaction, if it was called. */
export async function createEndpoint(
  core: Core,
  tx: Queryable,
  actor: Actor,
  app: AppRow,
  input: EndpointIn,
  checkedUrl: string | null = null,
): Promise<EndpointRow> {
  if (input.url !== checkedUrl) await assertDestination(core, input.url);
  const endpoint = await insertEndpoint(tx, app.id, toFields(input));
  const secret = input.secret ?? generateEndpointSecret();
  await insertCurrentSecret(tx, app.id, endpoint.id, core.box.seal(secret, endpoint.id));
  // The origin only: a URL's path or query may be its credential (a chat webhook's is).
  await audit(tx, actor, 'endpoint.created', endpoint, { url: urlOrigin(endpoint.url) });
  // In this transaction: the operator hears of the endpoint if and only if it was created.
  await emitEndpointEvent(tx, 'endpoint.created', endpoint);
  return endpoint;
}

/**
 * Changes an endpoint as `change` says, given its current row: read again under its lock, as the
 * row the caller read may be stale (a worker may have disabled the endpoint since), and a change
 * made from it would silently undo that. `checkedUrl`: what checkNewUrl answered before the
 * transaction, for what `change` made of the row the caller read; another new URL is checked
 * here, under the lock.
 */
export async function replaceEndpoint(
  core: Core,
  tx: Queryable,
  actor: Actor,
  endpoint: EndpointRow,
  change: (current: EndpointRow) => EndpointInput,
  checkedUrl: string | null = null,
): Promise<EndpointRow> {
  const current = await lockEndpoint(tx, endpoint.id);
  if (!current) throw notFound('endpoint');
  const input = change(current);
  if (input.url !== current.url && input.url !== checkedUrl) await assertDestination(core, input.url);
  let updated = await updateEndpoint(tx, current.id, toFields(input));
  await audit(tx, actor, 'endpoint.updated', updated, changes(current, updated));
  if (current.disabled !== updated.disabled) {
    await audit(tx, actor, updated.disabled ? 'endpoint.disabled' : 'endpoint.enabled', updated, {});
  }
  // Enabled again, or sent to a new URL: its failures are forgiven (and, enabled, its retries due
  // now: updateEndpoint), and so is the rest they imposed; the answer shows the endpoint as the
  // lift left it.
  if (!updated.disabled && (current.disabled || current.url !== updated.url)) {
    await liftEndpointPause(tx, updated.id, true);
    updated = (await lockEndpoint(tx, updated.id)) ?? updated;
  }
  // Svix's endpoint.disabled means "disabled automatically"; an operator's change is an update.
  await emitEndpointEvent(tx, 'endpoint.updated', updated);
  return updated;
}

/**
 * A PUT replaces what Svix's API knows of an endpoint. herald's own fields (`idempotent`,
 * `clientErrorPolicy`) and `version`, which a Svix SDK's update does not send, keep their values unless the body names
 * them: an SDK's update of the URL must not make an endpoint marked not idempotent retried blind.
 * A body without `uid` keeps the uid (`null` removes it): the path may be that very uid, and an
 * upsert repeated by uid would otherwise clear it, then create a second endpoint beside the first.
 */
export function keepHeraldOwn(current: EndpointRow, input: EndpointInput): EndpointInput {
  return {
    ...input,
    uid: input.uid === undefined ? current.uid : input.uid,
    // Not in the contract's EndpointUpdate: an SDK's PUT would otherwise set it back to 1.
    version: input.version ?? current.version,
    idempotent: input.idempotent ?? current.idempotent,
    clientErrorPolicy: input.clientErrorPolicy ?? current.clientErrorPolicy,
  };
}

export function patchToUpdate(current: EndpointRow, patch: z.infer<typeof EndpointPatch>): EndpointInput {
  return {
    url: patch.url ?? current.url,
    description: patch.description ?? current.description,
    uid: patch.uid === undefined ? current.uid : patch.uid,
    version: patch.version ?? current.version,
    throttleRate: patch.throttleRate === undefined ? current.throttleRate : patch.throttleRate,
    filterTypes:
      patch.filterTypes !== undefined
        ? patch.filterTypes
        : patch.eventTypes !== undefined
          ? patch.eventTypes
          : current.filterTypes,
    channels: patch.channels === undefined ? current.channels : patch.channels,
    metadata: patch.metadata ?? current.metadata,
    disabled: patch.disabled ?? current.disabled,
    idempotent: patch.idempotent ?? current.idempotent,
    clientErrorPolicy: patch.clientErrorPolicy ?? current.clientErrorPolicy,
  };
}

function changes(before: EndpointRow, after: EndpointRow): Record<string, unknown> {
  const fields = [
    'url',
    'description',
    'uid',
    'filterTypes',
    'channels',
    'disabled',
    'throttleRate',
    'metadata',
    // What herald may do when an outcome is unknown, and with a refused request: worth a record.
    'idempotent',
    'clientErrorPolicy',
  ] as const;
  return { changed: fields.filter((f) => JSON.stringify(before[f]) !== JSON.stringify(after[f])) };
}

export async function requireEndpoint(db: Queryable, app: AppRow, idOrUid: string): Promise<EndpointRow> {
  const endpoint = await findEndpoint(db, app.id, idOrUid);
  if (!endpoint) throw notFound('endpoint');
  return endpoint;
}

export async function revealSecret(core: Core, db: Queryable, endpoint: EndpointRow): Promise<string> {
  const sealed = await currentSecret(db, endpoint.id);
  if (!sealed) throw notFound('endpoint secret');
  return openForCaller(core.box, sealed, endpoint.id, "this endpoint's signing secret");
}

/** revealSecret for a caller of the API: who read a signing secret is on record. */
export async function revealSecretTo(
  core: Core,
  tx: Queryable,
  actor: Actor,
  endpoint: EndpointRow,
): Promise<string> {
  const secret = await revealSecret(core, tx, endpoint);
  await audit(tx, actor, 'endpoint.secret_revealed', endpoint, {});
  return secret;
}

export async function rotateEndpointSecret(
  core: Core,
  tx: Queryable,
  actor: Actor,
  endpoint: EndpointRow,
  newSecret: string | null,
  graceSeconds: number | null,
): Promise<void> {
  const secret = newSecret ?? generateEndpointSecret();
  const rotated = await rotateSecret(
    tx,
    endpoint.appId,
    endpoint.id,
    core.box.seal(secret, endpoint.id),
    graceSeconds ?? DEFAULT_GRACE_SECONDS,
  );
  if (!rotated) {
    throw new HeraldError(
      'limit_reached',
      `${MAX_PREVIOUS_SECRETS} previous secrets still sign this endpoint's requests; rotate again once the grace period of the oldest has ended, or with gracePeriodSeconds 0 to replace the current secret at once (a leaked one)`,
    );
  }
  await audit(tx, actor, 'endpoint.secret_rotated', endpoint, {
    graceSeconds: graceSeconds ?? DEFAULT_GRACE_SECONDS,
  });
}

/**
 * What an endpoint's own headers may take, beside herald's (signatures, ids, the business key: up
 * to ~2 KiB): receivers refuse a request whose headers outgrow their buffers (nginx: 8 KiB a
 * line, 32 KiB in all) with a 431 or 400, and every attempt would fail until the endpoint is
 * disabled.
 */
const MAX_HEADER_VALUE_CHARS = 4096;
const MAX_HEADERS = 64;
const MAX_HEADERS_CHARS = 8192;

export function validateHeaders(headers: Record<string, string | null>): void {
  const entries = Object.entries(headers);
  if (entries.length > MAX_HEADERS) throw invalidField(['headers'], `at most ${MAX_HEADERS} headers`);
  const total = entries.reduce((sum, [name, value]) => sum + name.length + (value?.length ?? 0), 0);
  if (total > MAX_HEADERS_CHARS) {
    throw invalidField(['headers'], `at most ${MAX_HEADERS_CHARS} characters of names and values in all`);
  }
  const names = new Set<string>();
  for (const [name, value] of entries) {
    if (!HEADER_NAME.test(name)) throw invalidField(['headers', name], 'not a valid header name');
    // Header names are case-insensitive: two spellings of one would both go out.
    if (names.has(name.toLowerCase()))
      throw invalidField(['headers', name], 'this header is named twice (names are case-insensitive)');
    names.add(name.toLowerCase());
    if (RESERVED_HEADER.test(name)) throw invalidField(['headers', name], 'this header is set by herald');
    if (value !== null && !HEADER_VALUE.test(value))
      throw invalidField(['headers', name], 'only visible ASCII characters, spaces and tabs');
    if (value !== null && value.length > MAX_HEADER_VALUE_CHARS)
      throw invalidField(['headers', name], `at most ${MAX_HEADER_VALUE_CHARS} characters`);
  }
}

/**
 * An endpoint's headers, opened for a caller of the API: 503 `secret_unavailable` when they are
 * sealed under a master key this process lacks.
 */
export function endpointHeaders(core: Core, endpoint: EndpointRow): Record<string, string> {
  return forCaller(() => openHeaders(core.box, endpoint.id, endpoint.headers), "this endpoint's headers");
}

/**
 * An endpoint's headers with a PATCH's applied: a name set or removed replaces every spelling of
 * it (`authorization` replaces `Authorization`), as header names are case-insensitive on the wire.
 */
function mergeHeaders(
  current: Record<string, string>,
  changes: Record<string, string | null>,
  deletions: readonly string[],
): Record<string, string> {
  const removed = new Set([...Object.keys(changes), ...deletions].map((name) => name.toLowerCase()));
  const merged = Object.fromEntries(
    Object.entries(current).filter(([name]) => !removed.has(name.toLowerCase())),
  );
  for (const [name, value] of Object.entries(changes)) if (value !== null) merged[name] = value;
  return merged;
}

/**
 * Sets and removes some of an endpoint's headers, merged into the headers it has under its row
 * lock: two changes at once each keep what the other set, where a merge into the row read before
 * the transaction lost the first one's.
 */
export async function patchHeaders(
  core: Core,
  tx: Queryable,
  actor: Actor,
  endpointId: string,
  set: Record<string, string | null>,
  remove: readonly string[],
): Promise<void> {
  const current = await lockEndpoint(tx, endpointId);
  if (!current) throw notFound('endpoint');
  const held = endpointHeaders(core, current);
  await writeHeaders(core, tx, actor, current, held, mergeHeaders(held, set, remove));
}

export async function replaceHeaders(
  core: Core,
  tx: Queryable,
  actor: Actor,
  endpoint: EndpointRow,
  headers: Record<string, string>,
): Promise<void> {
  const current = await lockEndpoint(tx, endpoint.id);
  if (!current) throw notFound('endpoint');
  // Replaced whatever they are: headers that do not open (a key this process lacks) are written.
  let held: Record<string, string> | null;
  try {
    held = openHeaders(core.box, current.id, current.headers);
  } catch {
    held = null;
  }
  await writeHeaders(core, tx, actor, current, held, headers);
}

/**
 * Sets the headers of an endpoint whose row the transaction has locked (`current`), which holds
 * `held` (opened by the caller; null: they do not open). Sealed anew, the same headers are another
 * value, which workers hear of as a change of the endpoint (they withdraw its requests waiting to
 * leave): so headers the row holds already are not written again.
 */
async function writeHeaders(
  core: Core,
  tx: Queryable,
  actor: Actor,
  current: EndpointRow,
  held: Record<string, string> | null,
  headers: Record<string, string>,
): Promise<void> {
  validateHeaders(headers);
  if (!holdsHeaders(current, held, headers)) {
    await setEndpointHeaders(tx, current.id, sealHeaders(core.box, current.id, headers));
  }
  // Header values often carry credentials: the audit keeps their names only.
  await audit(tx, actor, 'endpoint.headers_updated', current, { headers: Object.keys(headers) });
}

/**
 * Whether the endpoint holds these headers already (`held`), sealed, in whatever order (a PATCH
 * setting a header to its value moves it to the end). Headers still in clear (but none, which
 * needs no sealing), or that do not open, are written again.
 */
function holdsHeaders(
  endpoint: EndpointRow,
  held: Record<string, string> | null,
  headers: Record<string, string>,
): boolean {
  const sealed = typeof endpoint.headers === 'string' || Object.keys(endpoint.headers).length === 0;
  const inOrder = (set: Record<string, string>) => JSON.stringify(Object.entries(set).sort());
  return sealed && held !== null && inOrder(held) === inOrder(headers);
}

export async function audit(
  tx: Queryable,
  actor: Actor,
  action: string,
  endpoint: EndpointRow,
  details: Record<string, unknown>,
): Promise<void> {
  await recordAudit(tx, {
    actor: actor.id,
    action,
    appId: endpoint.appId,
    targetType: 'endpoint',
    targetId: endpoint.id,
    details,
  });
}
