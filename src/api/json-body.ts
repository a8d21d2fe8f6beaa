// The API's JSON body parser: fastify's own (which refuses `__proto__` and `constructor.prototype`
// keys), with two differences a publisher relies on.
//
// - A message's payload is sent to receivers as the publisher wrote its numbers
//   (domain/json-numbers.ts): when the body has a number a double may not give back as written,
//   the payload is parsed again keeping those numbers' text. Only the top-level `payload`:
//   elsewhere the schemas read numbers as numbers, and `30.0` must stay the 30 they accept.
// - An empty body with `content-type: application/json` (what some clients send on a DELETE or a
//   resend) is no body, not malformed JSON.

import type { FastifyInstance } from 'fastify';
import { MAX_PAYLOAD_DEPTH, nestedDeeperThan } from '../domain/json-depth.ts';
import { mayLoseANumber, parseKeepingNumbers } from '../domain/json-numbers.ts';
import { PROTOTYPE_KEY_REFUSED } from '../domain/prototype-keys.ts';
import { HeraldError } from '../errors.ts';

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
    // Before any parse: the parsers and the checks after them recurse as deep as the body nests.
    if (nestedDeeperThan(body as string, MAX_BODY_DEPTH)) {
      done(tooDeep(), undefined);
      return;
    }
    standard(request, body as string, (error, value) => {
      if (error) return done(isJson(body as string) ? poisoningRefused() : error, undefined);
      if (!isObject(value) || !Object.hasOwn(value, 'payload') || !mayLoseANumber(body as string))
        return done(null, value);
      const exact = parseKeepingNumbers(body as string) as Record<string, unknown>;
      done(null, { ...value, payload: exact['payload'] });
    });
  });
}

const isJson = (text: string): boolean => {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
};

/**
 * JSON that fastify's parser refused all the same holds a `__proto__` or `constructor.prototype`
 * key: refused, as a copy of it into an object would set that object's prototype (a payload
 * would lose the key, or worse); said as that, not as malformed JSON, which it is not.
 */
const poisoningRefused = () => new HeraldError('bad_request', `the body ${PROTOTYPE_KEY_REFUSED}`);

/** Twice what a payload may nest: no request of the API needs more. */
const MAX_BODY_DEPTH = 2 * MAX_PAYLOAD_DEPTH;

const tooDeep = () => {
  const msg = `nested more than ${MAX_BODY_DEPTH} objects and arrays deep (a payload may nest ${MAX_PAYLOAD_DEPTH})`;
  return new HeraldError('validation', `body: ${msg}`, [{ loc: ['body'], msg, type: 'value_error' }]);
};
