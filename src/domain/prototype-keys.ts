// `__proto__` and `constructor.prototype` keys are refused anywhere in what a publisher sends.
// Copied into an object, such a key sets the object's prototype instead of a field: zod's record
// drops a top-level `__proto__`, a spread or Object.assign of a nested one poisons what receives
// it, so a payload would lose the key, or worse. The API's body parser refuses them in the text
// (fastify's parser); the library's callers hand herald objects, walked here.

/** Says what is refused, after "the body" or "the message". */
export const PROTOTYPE_KEY_REFUSED =
  'holds a "__proto__" or "constructor": {"prototype": …} key, which herald refuses anywhere in a request (payloads included)';

/** Whether `value`, or anything inside it, has such a key of its own. */
export function holdsPrototypeKey(value: unknown): boolean {
  const seen = new Set<object>();
  const pending: unknown[] = [value];
  while (pending.length > 0) {
    const next = pending.pop();
    if (typeof next !== 'object' || next === null || seen.has(next)) continue;
    seen.add(next);
    if (Object.hasOwn(next, '__proto__')) return true;
    const ctor: unknown = Object.hasOwn(next, 'constructor') ? Reflect.get(next, 'constructor') : undefined;
    if (typeof ctor === 'object' && ctor !== null && Object.hasOwn(ctor, 'prototype')) return true;
    pending.push(...Object.values(next));
  }
  return false;
}
