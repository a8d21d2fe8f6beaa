// PostgreSQL text and jsonb cannot hold U+0000, and jsonb refuses a lone UTF-16 surrogate (text
// would hold U+FFFD in its place, silently): refused in the schema, naming the field, rather than
// by the INSERT, whose error names none and answers 500.

import { z } from 'zod';

const NUL_REFUSED = 'must not contain NUL characters';
const LONE_SURROGATE_REFUSED = 'must be well-formed Unicode: no lone UTF-16 surrogate';
export const UNSTORABLE_REFUSED = 'must not contain NUL characters or lone UTF-16 surrogates';

/** A string the database keeps as it was given: without U+0000, without a lone surrogate. */
export const text = () =>
  z
    .string()
    .regex(/^[^\0]*$/, NUL_REFUSED)
    .refine((s) => s.isWellFormed(), LONE_SURROGATE_REFUSED);

/** Whether every string and key of a JSON value, at any depth, is what `text` takes. */
export const storable = (value: unknown): boolean =>
  typeof value === 'string'
    ? !value.includes('\0') && value.isWellFormed()
    : typeof value === 'object' && value !== null
      ? Object.entries(value).every(([k, v]) => storable(k) && storable(v))
      : true;
