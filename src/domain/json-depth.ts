// How deeply JSON text nests. A payload nested thousands deep is stored and sent whole, but every
// reader that walks it recursively — a list's parse and serialisation, a reviver — can run out of
// stack on it: one publish could make its app's message list fail until the payload went. So
// payloads are bounded where they come in, as Svix's server bounds them (serde_json stops at 128).

/** How deeply a message's payload may nest: `{}` is 1, `{"a": [1]}` is 2. */
export const MAX_PAYLOAD_DEPTH = 128;

/** Whether `text` (JSON) opens more than `max` objects and arrays inside one another. */
export function nestedDeeperThan(text: string, max: number): boolean {
  // Shorter text cannot open that many.
  if (text.length <= max) return false;
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c)
        i++; // `\`: the next character is escaped, a quote included
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) inString = true;
    else if (c === 0x7b || c === 0x5b) {
      if (++depth > max) return true;
    } else if (c === 0x7d || c === 0x5d) depth--;
  }
  return false;
}
