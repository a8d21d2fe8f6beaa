// The API's JSON body parser: fastify's own (which refuses `__proto__` and `constructor.prototype`
// keys), with two differences a publisher relies on.
//
// - A message's payload is sent to receivers as the publisher wrote its numbers. JSON.parse gives
//   each number as a double: 9007199254740993 (a 64-bit id from Python, Go or Java) would be
//   signed and delivered as …992, 1e400 as null. When the body has a number a double may not give
//   back as written, the payload is parsed again keeping those numbers' text (JSON.rawJSON, which
//   JSON.stringify writes out verbatim). Only the top-level `payload`: elsewhere the schemas read
//   numbers as numbers, and `30.0` must stay the 30 they accept. Reading a payload back
//   (parseKeepingNumbers) keeps them the same way.
// - An empty body with `content-type: application/json` (what some clients send on a DELETE or a
//   resend) is no body, not malformed JSON.

import type { FastifyInstance } from 'fastify';

/**
 * A number in value position (after `:`, `,` or `[`) that may not survive a double: 16 or more
 * digits, an exponent, a trailing zero after the point, -0, or six zeros after the point (a
 * double below 1e-6 prints as 1e-7). It may also match inside a string;
 * that costs a second parse, never a changed value.
 */
const MAY_LOSE_A_NUMBER =
  /[:,[]\s*(?:-?\d[\d.]{15}|-?\d+(?:\.\d+)?[eE]|-?\d+\.\d*0(?!\d)|-0(?![\d.eE])|-?0\.0{6})/;

// Node 24 has it; the type library herald compiles against does not yet.
const rawJSON = (JSON as unknown as { rawJSON(text: string): object }).rawJSON;

/** A JSON.parse reviver that keeps a number's source text when the double would not give it back. */
function keepNumberText(_key: string, value: unknown, context?: { source?: string }): unknown {
  const source = context?.source;
  return typeof value === 'number' && source !== undefined && String(value) !== source
    ? rawJSON(source)
    : value;
}

/** JSON.parse, keeping the text of every number a double would not give back as written. */
export const parseKeepingNumbers = (text: string): unknown =>
  MAY_LOSE_A_NUMBER.test(text) ? JSON.parse(text, keepNumberText) : JSON.parse(text);

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

export function useApiJsonParser(app: FastifyInstance): void {
  const standard = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (request, body, done) => {
    if (body === '') {
      done(null, undefined);
      return;
    }
    standard(request, body as string, (error, value) => {
      if (
        error ||
        !isObject(value) ||
        !Object.hasOwn(value, 'payload') ||
        !MAY_LOSE_A_NUMBER.test(body as string)
      )
        return done(error, value);
      // fastify's parser drops a leading byte-order mark; JSON.parse does not.
      const exact = JSON.parse((body as string).replace(/^\uFEFF/, ''), keepNumberText) as Record<
        string,
        unknown
      >;
      done(null, { ...value, payload: exact['payload'] });
    });
  });
}
