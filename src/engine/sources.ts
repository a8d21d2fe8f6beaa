// Inbound source administration: scheme settings checked once, secrets sealed with the source id
// as additional data, business-key templates compiled before they are stored, everything audited.

import { recordAudit } from '../db/audit.ts';
import type { Queryable } from '../db/port.ts';
import {
  findSource,
  insertSource,
  insertSourceSecret,
  liveSourceSecrets,
  lockSource,
  MAX_OVERLAPPING_SOURCE_SECRETS,
  rotateSourceSecrets,
  type SourceFields,
  type SourceRow,
  updateSource,
} from '../db/sources.ts';
import { HeraldError, invalidField, notFound } from '../errors.ts';
import {
  assertFieldsSeparated,
  BusinessKeyTemplateError,
  compileBusinessKey,
} from '../inbound/business-key.ts';
import { createVerifier, SchemeConfig } from '../inbound/verifiers/index.ts';
import type { SourceIn, SourcePatch } from '../schemas/sources.ts';
import { assertAppAllowed, requireApp } from './apps.ts';
import { type Actor, type Core, openForCaller } from './core.ts';

export const DEFAULT_SECRET_OVERLAP_SECONDS = 24 * 3600;
const SCHEMES_WITHOUT_SECRET = new Set(['gcp-pubsub', 'aws-sns']);

/**
 * `storedTemplate`: the template the source has, on a change — kept as it is, it is not judged
 * again by rules newer than it (assertFieldsSeparated): its keys stay as its deliveries have them.
 */
async function checkedFields(
  db: Queryable,
  actor: Actor,
  input: SourceIn,
  storedTemplate?: string,
): Promise<SourceFields> {
  // Only "not found" (or out of the key's reach) is the field's fault: a database that failed is
  // a 503 to retry, not a 422.
  const app = await requireApp(db, actor, input.app).catch((error: unknown) => {
    if (error instanceof HeraldError && error.kind === 'not_found')
      throw invalidField(['app'], `application ${input.app} not found`);
    throw error;
  });
  const config = SchemeConfig.safeParse({ ...(input.settings ?? {}), scheme: input.scheme });
  if (!config.success) {
    const issue = config.error.issues[0]!;
    throw invalidField(['settings', ...issue.path.map(String)], issue.message);
  }
  const businessKey = input.businessKey ?? '{{delivery_id}}';
  try {
    compileBusinessKey(businessKey);
    if (businessKey !== storedTemplate) assertFieldsSeparated(businessKey);
  } catch (error) {
    if (error instanceof BusinessKeyTemplateError) throw invalidField(['businessKey'], error.message);
    throw error;
  }
  const { scheme: _scheme, ...settings } = config.data as Record<string, unknown>;
  return {
    uid: input.uid ?? null,
    scheme: input.scheme,
    settings,
    appId: app.id,
    eventType: input.eventType,
    businessKey,
    retentionDays: input.retentionDays ?? null,
  };
}

/** Building a verifier fetches nothing; a check that did would be a fault of the check. */
const NO_FETCH = {
  fetchText: () => Promise.reject(new Error('nothing is fetched while a source is checked')),
};

/**
 * Refuses a source no verifier can be built for (a scheme that needs a secret and has none, a
 * secret in the wrong form for its scheme): every request to it would be turned away with a 503,
 * for as long as it stayed that way.
 */
function assertVerifiable(fields: SourceFields, secrets: readonly string[]): void {
  try {
    createVerifier({ ...fields.settings, scheme: fields.scheme } as never, secrets, NO_FETCH);
  } catch (error) {
    throw invalidField(
      ['secret'],
      `the ${fields.scheme} scheme cannot verify with the secrets the source would have (${(error as Error).message})`,
    );
  }
}

const secretsOf = (input: { secret?: string | string[] | null | undefined }): string[] =>
  input.secret === undefined || input.secret === null ? [] : [input.secret].flat();

export async function createSource(
  core: Core,
  tx: Queryable,
  actor: Actor,
  input: SourceIn,
): Promise<SourceRow> {
  const fields = await checkedFields(tx, actor, input);
  const secrets = secretsOf(input);
  if (secrets.length === 0 && !SCHEMES_WITHOUT_SECRET.has(input.scheme)) {
    throw invalidField(['secret'], `the ${input.scheme} scheme needs a secret`);
  }
  assertVerifiable(fields, secrets);
  const source = await insertSource(tx, fields);
  for (const secret of secrets) await insertSourceSecret(tx, source.id, core.box.seal(secret, source.id));
  await audit(tx, actor, 'source.created', source, { scheme: source.scheme });
  return source;
}

export async function changeSource(
  core: Core,
  tx: Queryable,
  actor: Actor,
  sourceId: string,
  patch: SourcePatch,
): Promise<SourceRow> {
  // Read again under its lock: the row the caller read may be stale, and a merge onto it would
  // silently undo a change that committed since.
  const current = await lockSource(tx, sourceId);
  if (!current) throw notFound('source');
  assertAppAllowed(actor, current.appId, 'source');
  const merged: SourceIn = {
    uid: patch.uid === undefined ? current.uid : patch.uid,
    scheme: patch.scheme ?? (current.scheme as SourceIn['scheme']),
    settings: patch.settings ?? current.settings,
    app: patch.app ?? current.appId,
    eventType: patch.eventType ?? current.eventType,
    businessKey: patch.businessKey ?? current.businessKey,
    retentionDays: patch.retentionDays === undefined ? current.retentionDays : patch.retentionDays,
  };
  const fields = await checkedFields(tx, actor, merged, current.businessKey);
  const updated = await updateSource(tx, current.id, fields);
  const secrets = secretsOf(patch);
  if (
    secrets.length > 0 &&
    !(await rotateSourceSecrets(
      tx,
      current.id,
      secrets.map((secret) => core.box.seal(secret, current.id)),
      patch.secretOverlapSeconds ?? DEFAULT_SECRET_OVERLAP_SECONDS,
    ))
  ) {
    throw new HeraldError(
      'limit_reached',
      `secret: more than ${MAX_OVERLAPPING_SOURCE_SECRETS} secrets would still verify this source's requests beside the new ones; rotate again once the overlap of the oldest has ended, or with secretOverlapSeconds 0 to replace them all at once (a leaked secret)`,
    );
  }
  // With the secrets that verify from now on: a new scheme may not take the ones it had.
  const live = await liveSourceSecrets(tx, current.id);
  assertVerifiable(
    fields,
    live.sealed.map((sealed) => openForCaller(core.box, sealed, current.id, 'a secret of this source')),
  );
  await audit(tx, actor, 'source.updated', updated, { secretRotated: secrets.length > 0 });
  return updated;
}

export async function requireSource(db: Queryable, idOrUid: string): Promise<SourceRow> {
  const source = await findSource(db, idOrUid);
  if (!source) throw notFound('source');
  return source;
}

export async function audit(tx: Queryable, actor: Actor, action: string, source: SourceRow, details: object) {
  await recordAudit(tx, {
    actor: actor.id,
    action,
    appId: source.appId,
    targetType: 'source',
    targetId: source.id,
    details: { ...details },
  });
}
