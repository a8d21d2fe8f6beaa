// `idempotency-key` on the API's POSTs (publishing keeps its own, on the message): the first
// request with a key runs, and its answer is kept with the key in the transaction of its effect
// (migration 0025); a repeat with the same request gets that answer again, marked
// `idempotent-replayed: true`, and has no effect; the same key with another request at the same
// URL is a 409 (at another URL, it is another key, as in Svix). A request that fails keeps
// nothing: it may be tried again.

import type { FastifyReply, FastifyRequest } from 'fastify';
import { findKeptAnswer, type KeptAnswer, keepAnswer, takeKey } from '../db/api-idempotency.ts';
import type { Queryable } from '../db/port.ts';
import type { Core } from '../engine/core.ts';
import { assertIdempotencyKeyLength, HeraldError } from '../errors.ts';

export interface Answer {
  status: number;
  /** undefined: no body (204). */
  body?: unknown;
  /**
   * What follows the work once its transaction has committed, before the answer is sent; not kept
   * with the answer (a repeat has nothing new to follow up).
   */
  afterCommit?: () => Promise<void>;
  /**
   * What a repeat is answered instead, when this answer holds what must not be kept (an API key's
   * token, shown once): the repeat is told what its first request did, not given it again.
   */
  keptAs?: { status: number; body: unknown };
}

/** The key's holder committed meanwhile: this transaction rolls back, and its answer is replayed. */
class KeyTaken extends Error {}

/**
 * Runs `work` in one transaction and answers what it returns — once per caller and key when the
 * request carries an `idempotency-key`. `prepare` runs first, outside the transaction (a check of
 * the network, say), and only when there is no kept answer to replay: a repeat gets its answer
 * even when the check would fail now.
 */
export async function answerOnce<P = undefined>(
  core: Pick<Core, 'db' | 'box'>,
  request: FastifyRequest,
  reply: FastifyReply,
  work: (tx: Queryable, prepared: P) => Promise<Answer>,
  prepare: () => Promise<P> = async () => undefined as P,
): Promise<FastifyReply> {
  const { db } = core;
  const header = request.headers['idempotency-key'];
  const key = typeof header === 'string' && header !== '' ? header : null;
  if (key === null) {
    const prepared = await prepare();
    const answer = await db.transaction((tx) => work(tx, prepared));
    await answer.afterCommit?.();
    return send(reply, answer);
  }
  assertIdempotencyKeyLength(key);
  // Per caller, method and URL, as in Svix: one business key (`order-42`) may create an app and
  // then its endpoint; only a repeat at the same URL is the same request.
  const scope = `${request.actor.id} ${request.method} ${request.url}`;
  // Keyed: a body may hold a secret (a source's, a rotation's key), and the digest is kept a day
  // in the database, where a plain hash would let its reader test guesses of the secret.
  const digests = core.box.digests(
    'idempotency request',
    `${request.method} ${request.url}\n${JSON.stringify(request.body ?? null)}`,
  );
  const [requestSha256] = digests;
  const kept =
    (await findKeptAnswer(db, scope, key)) ?? (await keptPerCaller(db, request.actor.id, key, digests));
  if (kept) return replay(reply, kept, digests);
  const prepared = await prepare();
  try {
    const answer = await db.transaction(async (tx) => {
      if (!(await takeKey(tx, scope, key, requestSha256))) throw new KeyTaken();
      const done = await work(tx, prepared);
      const kept = done.keptAs ?? done;
      await keepAnswer(tx, scope, key, kept.status, kept.body);
      return done;
    });
    await answer.afterCommit?.();
    return send(reply, answer);
  } catch (error) {
    if (!(error instanceof KeyTaken)) throw error;
    const winner = await findKeptAnswer(db, scope, key);
    if (!winner) throw error;
    return replay(reply, winner, digests);
  }
}

/**
 * An answer kept before keys were scoped by URL, under the caller alone, for a repeat of that
 * very request (its digest covers method, URL and body): a retry across the upgrade replays it.
 * Such answers are forgotten with the others after KEPT_FOR_HOURS.
 */
async function keptPerCaller(
  db: Queryable,
  caller: string,
  key: string,
  digests: readonly Buffer[],
): Promise<KeptAnswer | null> {
  const kept = await findKeptAnswer(db, caller, key);
  return kept && isSameRequest(kept, digests) ? kept : null;
}

/** Kept under the current master key or a previous one still listed (a rotation in between). */
function isSameRequest(kept: KeptAnswer, digests: readonly Buffer[]): boolean {
  return digests.some((digest) => kept.requestSha256.equals(digest));
}

function replay(reply: FastifyReply, kept: KeptAnswer, digests: readonly Buffer[]): FastifyReply {
  if (!isSameRequest(kept, digests)) {
    throw new HeraldError('idempotency_conflict', 'this idempotency-key was used for another request');
  }
  reply.header('idempotent-replayed', 'true');
  return send(reply, { status: kept.status, body: kept.body ?? undefined });
}

function send(reply: FastifyReply, answer: Answer): FastifyReply {
  return reply.status(answer.status).send(answer.body);
}
