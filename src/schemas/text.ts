// PostgreSQL text and jsonb cannot hold U+0000: refused in the schema, naming the field, rather
// than by the INSERT, whose error names none.

import { z } from 'zod';

export const NUL_REFUSED = 'must not contain NUL characters';

/** A string without U+0000. */
export const text = () => z.string().regex(/^[^\0]*$/, NUL_REFUSED);

/** Whether a JSON value holds no U+0000 in any string or key, at any depth. */
export const withoutNul = (value: unknown): boolean =>
  typeof value === 'string'
    ? !value.includes('\0')
    : typeof value === 'object' && value !== null
      ? Object.entries(value).every(([k, v]) => !k.includes('\0') && withoutNul(v))
      : true;
