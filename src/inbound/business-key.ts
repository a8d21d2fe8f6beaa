// The business key: what makes two inbound deliveries the same business event. A template over
// the delivery — `{{delivery_id}}`, `{{header.x-request-id}}`, `{{body.ticket.id}}:{{body.action}}`
// — rendered after verification. Every outbound attempt of the relayed message carries it as
// Idempotency-Key, so the receiver can apply the event once however often it arrives.

export interface BusinessKeyInput {
  deliveryId: string;
  headers: Record<string, string | undefined>;
  payload: unknown;
}

type Part = { literal: string } | { field: 'delivery_id' } | { header: string } | { body: string[] };

const PLACEHOLDER = /\{\{\s*([^}]*?)\s*\}\}/g;
const MAX_KEY_LENGTH = 512;

export class BusinessKeyTemplateError extends Error {}

export interface BusinessKeyTemplate {
  readonly source: string;
  /** The rendered key, or null when a field it names is missing or not a scalar. */
  render(input: BusinessKeyInput): string | null;
}

function parsePlaceholder(expression: string): Part {
  if (expression === 'delivery_id') return { field: 'delivery_id' };
  if (/^header\.[A-Za-z0-9-]+$/.test(expression))
    return { header: expression.slice('header.'.length).toLowerCase() };
  if (/^body(\.[A-Za-z0-9_-]+)+$/.test(expression)) return { body: expression.split('.').slice(1) };
  throw new BusinessKeyTemplateError(
    `unknown placeholder {{${expression}}}: use delivery_id, header.<name> or body.<path>`,
  );
}

export function compileBusinessKey(template: string): BusinessKeyTemplate {
  const parts: Part[] = [];
  let last = 0;
  for (const match of template.matchAll(PLACEHOLDER)) {
    if (match.index > last) parts.push({ literal: template.slice(last, match.index) });
    parts.push(parsePlaceholder(match[1]!));
    last = match.index + match[0].length;
  }
  if (last < template.length) parts.push({ literal: template.slice(last) });
  if (!parts.some((p) => !('literal' in p))) {
    throw new BusinessKeyTemplateError('the template names no field: every delivery would share one key');
  }
  return {
    source: template,
    render(input) {
      let key = '';
      for (const part of parts) {
        const value =
          'literal' in part
            ? part.literal
            : 'field' in part
              ? input.deliveryId
              : 'header' in part
                ? ownValue(input.headers, part.header)
                : scalarAt(input.payload, part.body);
        // A NUL cannot be stored (nor sent in a header): such a key is as good as missing.
        if (typeof value !== 'string' || value === '' || value.includes('\u0000')) return null;
        key += value;
      }
      return key.length <= MAX_KEY_LENGTH ? key : null;
    },
  };
}

/** Own properties only: `constructor` or `__proto__` must not resolve to something inherited. */
function ownValue(record: object, key: string): unknown {
  return Object.hasOwn(record, key) ? (record as Record<string, unknown>)[key] : undefined;
}

function scalarAt(payload: unknown, path: readonly string[]): string | undefined {
  let node = payload;
  for (const step of path) {
    if (node === null || typeof node !== 'object') return undefined;
    node = ownValue(node, step);
  }
  return typeof node === 'string' || typeof node === 'number' || typeof node === 'boolean'
    ? String(node)
    : undefined;
}
