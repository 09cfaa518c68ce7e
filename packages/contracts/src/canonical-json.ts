import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';

// `canonicalize` (RFC 8785 JCS, maintained by the RFC's author) is CommonJS whose typings
// claim an ES default export; load it through require to get the function itself.
const canonicalize = createRequire(import.meta.url)('canonicalize') as (value: unknown) => string | undefined;

/**
 * RFC 8785 (JCS) canonical JSON of a value.
 * @throws Error for values JSON cannot represent (undefined at the root, functions).
 */
export function canonicalJson(value: unknown): string {
  const text = canonicalize(value);
  if (text === undefined) throw new Error('value cannot be canonicalized');
  return text;
}

/** SHA-256, hex, of a UTF-8 string. */
export function sha256Hex(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}
