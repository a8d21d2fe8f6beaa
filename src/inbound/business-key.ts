// The business key: what makes two inbound deliveries the same business event. A template over
// the delivery — `{{delivery_id}}`, `{{body_sha256}}`, `{{header.x-request-id}}`,
// `{{body.ticket.id}}:{{body.action}}` — rendered after verification. Every outbound attempt of the
// relayed message carries it as Idempotency-Key, so the receiver can apply the event once however
// often it arrives.

import { parseJsonBody } from './verifiers/verdict.ts';

export interface BusinessKeyInput {
  deliveryId: string;
  headers: Record<string, string | undefined>;
  /** The verified body, parsed. */
  payload: unknown;
  /** The bytes it was parsed from: a number in a key is their text, not the parsed double. */
  rawBody: Buffer;
  /** Their SHA-256, which the intake records anyway: `{{body_sha256}}` is its hex. */
  bodySha256: Buffer;
}

type Part =
  | { literal: string }
  | { field: 'delivery_id' | 'body_sha256' }
  | { header: string }
  | { body: string[] };

const PLACEHOLDER = /\{\{\s*([^}]*?)\s*\}\}/g;
const MAX_KEY_LENGTH = 512;

export class BusinessKeyTemplateError extends Error {}

/** A rendered key, or null with what made it unusable (for the refusal, which names the part). */
export type RenderedKey = { key: string } | { key: null; why: string };

export interface BusinessKeyTemplate {
  readonly source: string;
  render(input: BusinessKeyInput): RenderedKey;
}

const spelled = (part: Part): string =>
  'literal' in part
    ? part.literal
    : 'field' in part
      ? `{{${part.field}}}`
      : 'header' in part
        ? `{{header.${part.header}}}`
        : `{{body.${part.body.join('.')}}}`;

function parsePlaceholder(expression: string): Part {
  if (expression === 'delivery_id' || expression === 'body_sha256') return { field: expression };
  if (/^header\.[A-Za-z0-9-]+$/.test(expression))
    return { header: expression.slice('header.'.length).toLowerCase() };
  if (/^body(\.[A-Za-z0-9_-]+)+$/.test(expression)) return { body: expression.split('.').slice(1) };
  throw new BusinessKeyTemplateError(
    `unknown placeholder {{${expression}}}: use delivery_id, body_sha256, header.<name> or body.<path>`,
  );
}

function partsOf(template: string): Part[] {
  const parts: Part[] = [];
  let last = 0;
  for (const match of template.matchAll(PLACEHOLDER)) {
    if (match.index > last) parts.push({ literal: template.slice(last, match.index) });
    parts.push(parsePlaceholder(match[1]!));
    last = match.index + match[0].length;
  }
  if (last < template.length) parts.push({ literal: template.slice(last) });
  return parts;
}

/**
 * Refuses a template with two fields side by side: with nothing between them no escaping tells
 * where one value ends — `{{body.a}}{{body.b}}` renders `abc` for "ab" + "c" and for "a" + "bc",
 * two events, one key. Asked of a new or changed template only: a stored one goes on rendering the
 * keys its deliveries already have.
 */
export function assertFieldsSeparated(template: string): void {
  const parts = partsOf(template);
  for (const [i, part] of parts.entries()) {
    const next = parts[i + 1];
    if (next !== undefined && !('literal' in part) && !('literal' in next)) {
      throw new BusinessKeyTemplateError(
        `${spelled(part)}${spelled(next)}: put a separator between two fields (as in {{body.a}}:{{body.b}}), or two events could render one key`,
      );
    }
  }
}

export function compileBusinessKey(template: string): BusinessKeyTemplate {
  const parts = partsOf(template);
  const fields = parts.filter((p) => !('literal' in p)).length;
  if (fields === 0) {
    throw new BusinessKeyTemplateError('the template names no field: every delivery would share one key');
  }
  const asKeyPart = fields > 1 ? escaperOf(parts) : (value: string) => value;
  return {
    source: template,
    render(input) {
      // The body again with every number as its text, parsed only if a key reads a number.
      let exact: { parsed: unknown } | undefined;
      const numbersAsText = () => {
        exact ??= { parsed: parseJsonBody(input.rawBody, numberSource) };
        return exact.parsed;
      };
      let key = '';
      for (const part of parts) {
        const value =
          'literal' in part
            ? part.literal
            : 'field' in part
              ? part.field === 'delivery_id'
                ? input.deliveryId
                : input.bodySha256.toString('hex')
              : 'header' in part
                ? ownValue(input.headers, part.header)
                : scalarAt(input.payload, part.body, numbersAsText);
        if (typeof value !== 'string' || value === '')
          return { key: null, why: `${spelled(part)} is missing, empty, or not a string, number or boolean` };
        // A NUL cannot be stored (nor sent in a header), and a lone surrogate would be stored as
        // U+FFFD, which two different keys could share: such a key is as good as missing.
        if (value.includes('\u0000') || !value.isWellFormed())
          return { key: null, why: `${spelled(part)} holds U+0000 or a lone UTF-16 surrogate` };
        key += 'literal' in part ? value : asKeyPart(value);
      }
      return key.length <= MAX_KEY_LENGTH
        ? { key }
        : { key: null, why: `the key is ${key.length} characters, over ${MAX_KEY_LENGTH}` };
    },
  };
}

/**
 * With two fields or more, a value holding the template's own separators would read as another
 * split of the same key: `{{body.a}}:{{body.b}}` renders `x:y:z` for a = "x:y", b = "z" and for
 * a = "x", b = "y:z" — two events, one key, and the second joins the first and is never relayed.
 * So each value has the characters of the literals between fields, and `%`, percent-encoded
 * (UTF-8): a key reads back to one tuple of values. A leading or trailing literal is fixed text
 * around them all, which no value can be read into: its characters stay as they are in values
 * (`gh:{{body.id}}:{{header.x-github-event}}` renders `gh:1:push`, not `pus%68`). A template of
 * one field needs none of it, and keeps its keys as they always were; so does every value without
 * those characters.
 */
function escaperOf(parts: readonly Part[]): (value: string) => string {
  const reserved = new Set(['%']);
  const between = parts.slice(1, -1).filter((part) => 'literal' in part);
  for (const part of between) for (const c of part.literal) reserved.add(c);
  return (value) => {
    let escaped = '';
    for (const c of value) {
      if (!reserved.has(c)) escaped += c;
      else {
        const encoded = encodeURIComponent(c);
        escaped += encoded === c ? percentOf(c) : encoded;
      }
    }
    return escaped;
  };
}

/** The %XX form of an ASCII character that encodeURIComponent leaves as it is (`-`, `!`, `.`, letters). */
function percentOf(c: string): string {
  return `%${c.charCodeAt(0).toString(16).toUpperCase().padStart(2, '0')}`;
}

/** Own properties only: `constructor` or `__proto__` must not resolve to something inherited. */
function ownValue(record: object, key: string): unknown {
  return Object.hasOwn(record, key) ? (record as Record<string, unknown>)[key] : undefined;
}

function scalarAt(
  payload: unknown,
  path: readonly string[],
  numbersAsText: () => unknown,
): string | undefined {
  const node = nodeAt(payload, path);
  if (typeof node === 'number') {
    // A parsed number is a double: ids such as 1234567890123456789 and …790 parse to one value.
    // The key takes the number as the provider wrote it.
    const text = nodeAt(numbersAsText(), path);
    return typeof text === 'string' ? text : undefined;
  }
  return typeof node === 'string' || typeof node === 'boolean' ? String(node) : undefined;
}

function nodeAt(payload: unknown, path: readonly string[]): unknown {
  let node = payload;
  for (const step of path) {
    if (node === null || typeof node !== 'object') return undefined;
    node = ownValue(node, step);
  }
  return node;
}

/** A JSON.parse reviver that keeps each number's source text (a string in its place). */
function numberSource(_key: string, value: unknown, context?: { source?: string }): unknown {
  return typeof value === 'number' ? context?.source : value;
}
