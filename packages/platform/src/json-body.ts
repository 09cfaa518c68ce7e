/**
 * The first key that one JSON object of `text` names twice (decoded, so `"a"` and `"\u0061"`
 * are the same key), or null when every object names each key once. Iterative (a body nested
 * 200,000 levels deep costs one stack entry per level, never a call frame); text that is not
 * valid JSON gives null or a key, never a throw, and is left for `JSON.parse` to refuse.
 * The rule's one owner: docs/decisions/0687-a-json-body-names-each-key-once.md.
 */
export function duplicateJsonKey(text: string): string | null {
  const objects: Array<Set<string> | null> = [];
  let expectKey = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      let end = i + 1;
      while (end < text.length && text[end] !== '"') end += text[end] === '\\' ? 2 : 1;
      if (expectKey) {
        const key = decodedKey(text.slice(i, end + 1));
        const keys = objects.at(-1);
        if (key === null || !keys) return null;
        if (keys.has(key)) return key;
        keys.add(key);
        expectKey = false;
      }
      i = end;
    } else if (c === '{') {
      objects.push(new Set());
      expectKey = true;
    } else if (c === '[') {
      objects.push(null);
      expectKey = false;
    } else if (c === '}' || c === ']') {
      objects.pop();
      expectKey = false;
    } else if (c === ',') {
      expectKey = objects.at(-1) instanceof Set;
    }
  }
  return null;
}

/** A JSON string token's value, or null when it is not one. */
function decodedKey(token: string): string | null {
  try {
    return JSON.parse(token) as string;
  } catch {
    return null;
  }
}

/** body-parser's error `type` of a JSON body naming a key twice (mapped in http-errors.ts). */
export const DUPLICATE_KEY_TYPE = 'entity.duplicate.key';

/**
 * body-parser's `verify` hook for `express.json`: refuses a body whose objects name a key twice
 * ({@link duplicateJsonKey}), so what the caller meant is never decided by JSON.parse's "last one
 * wins" (`{"decision":"deny","decision":"approve"}` is not an approval).
 * `buf` is the raw (inflated) body, `encoding` its charset (body-parser checked that it exists).
 * @throws Error with `status` 400 and `type` {@link DUPLICATE_KEY_TYPE} (answered 400
 *   `invalid_body`), or `status` 415 and `type` `charset.unsupported` for a charset the platform's
 *   TextDecoder cannot read (utf-32: JSON is UTF-8, RFC 8259 §8.1; utf-16 is still read).
 */
export function refuseDuplicateJsonKeys(_req: unknown, _res: unknown, buf: Buffer, encoding: string | null): void {
  let text: string;
  try {
    text = new TextDecoder(encoding ?? 'utf-8').decode(buf);
  } catch {
    throw Object.assign(new Error(`unsupported charset "${String(encoding).toUpperCase()}"`), {
      status: 415,
      type: 'charset.unsupported',
    });
  }
  if (duplicateJsonKey(text) !== null) {
    throw Object.assign(new Error('a JSON object of the body names a key twice'), { status: 400, type: DUPLICATE_KEY_TYPE });
  }
}
