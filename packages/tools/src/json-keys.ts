/**
 * The first key that one JSON object of `text` names twice (decoded, so `"a"` and `"\u0061"`
 * are the same key), or null when every object names each key once. Iterative (a body nested
 * 200,000 levels deep costs one stack entry per level, never a call frame); text that is not
 * valid JSON gives null or a key, never a throw, and is left for `JSON.parse` to refuse.
 * The rule's one owner (docs/decisions/0687-a-json-body-names-each-key-once.md): the HTTP
 * services' JSON bodies (platform's `refuseDuplicateJsonKeys`) and the model's arguments
 * (`parseProposal`) both ask it.
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
