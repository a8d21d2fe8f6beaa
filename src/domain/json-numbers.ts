// JSON numbers as they were written. JSON.parse gives each number as a double: 9007199254740993
// (a 64-bit id from Python, Go or Java) becomes …992, 1e400 null, 10.50 10.5. A message's payload
// is sent on as its publisher wrote it, so numbers a double may not give back are kept as their
// text (JSON.rawJSON, which JSON.stringify writes out verbatim); and two payloads are the same
// when their numbers have the same value, however written.

// Node 24 has these; the type library herald compiles against does not yet.
const { isRawJSON, rawJSON } = JSON as unknown as {
  isRawJSON(value: unknown): value is { rawJSON: string };
  rawJSON(text: string): object;
};

/**
 * A number in value position (after `:`, `,` or `[`) that may not survive a double: 16 or more
 * digits, an exponent, a trailing zero after the point, -0, or six zeros after the point (a
 * double below 1e-6 prints as 1e-7). It may also match inside a string; that costs a second
 * parse, never a changed value.
 */
const MAY_LOSE_A_NUMBER =
  /[:,[]\s*(?:-?\d[\d.]{15}|-?\d+(?:\.\d+)?[eE]|-?\d+\.\d*0(?!\d)|-0(?![\d.eE])|-?0\.0{6})/;

/** Whether `text` (JSON) may hold a number that JSON.parse would not give back as written. */
export const mayLoseANumber = (text: string): boolean => MAY_LOSE_A_NUMBER.test(text);

/** A JSON.parse reviver that keeps a number's source text when the double would not give it back. */
function keepNumberText(_key: string, value: unknown, context?: { source?: string }): unknown {
  const source = context?.source;
  return typeof value === 'number' && source !== undefined && String(value) !== source
    ? rawJSON(source)
    : value;
}

/** JSON.parse, keeping the text of every number a double would not give back as written. */
export function parseKeepingNumbers(text: string): unknown {
  if (!mayLoseANumber(text)) return JSON.parse(text);
  // JSON.parse refuses a leading byte-order mark, which fastify's parser drops.
  return JSON.parse(text.replace(/^\uFEFF/, ''), keepNumberText);
}

/**
 * A JSON.stringify replacer that writes each number kept as written by its value: as the double
 * prints it when the double is that value exactly (`10.50` as `10.5`, as it was written before
 * numbers were kept), else by its exact digits (so that 9007199254740993 is not …992).
 */
export function numberByValue(_key: string, value: unknown): unknown {
  if (!isRawJSON(value)) return value;
  const double = Number(value.rawJSON);
  const exact = decimalValue(value.rawJSON);
  return Number.isFinite(double) && decimalValue(String(double)) === exact ? double : rawJSON(exact);
}

/**
 * A JSON number's exact value, one text per value: `-0.` followed by its significant digits and
 * `e` the power of ten of the point (`10.50` and `1.05e1` are both `0.105e2`); zero is `0`.
 */
function decimalValue(text: string): string {
  const [, sign, int, fraction = '', exponent = '0'] =
    /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/.exec(text) ?? [];
  if (int === undefined) return text;
  const all = int + fraction;
  const significant = all.replace(/^0+/, '').replace(/0+$/, '');
  if (significant === '') return '0';
  const point = int.length - (all.length - all.replace(/^0+/, '').length) + Number(exponent);
  return `${sign}0.${significant}e${point}`;
}
