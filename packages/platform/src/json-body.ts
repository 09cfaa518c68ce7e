import { duplicateJsonKey } from '@gatehouse/tools';

/** body-parser's error `type` of a JSON body naming a key twice (mapped in http-errors.ts). */
export const DUPLICATE_KEY_TYPE = 'entity.duplicate.key';

/** body-parser-style error `type` of a body whose bytes are not valid in its charset (mapped in http-errors.ts). */
export const UNDECODABLE_BODY_TYPE = 'entity.undecodable';

/**
 * body-parser's `verify` hook for `express.json`: refuses a body whose bytes are not valid text
 * of its charset — JSON.parse would read each bad byte as U+FFFD, so the caller's text would be
 * stored changed without a word (docs/decisions/0721-a-body-is-valid-text-of-its-charset.md) —
 * and a body whose objects name a key twice ({@link duplicateJsonKey}), so what the caller meant is
 * never decided by JSON.parse's "last one wins" (`{"decision":"deny","decision":"approve"}` is not
 * an approval). `buf` is the raw (inflated) body, `encoding` its charset (body-parser checked that it exists).
 * @throws Error with `status` 400 and `type` {@link UNDECODABLE_BODY_TYPE} or
 *   {@link DUPLICATE_KEY_TYPE} (both answered 400 `invalid_body`), or `status` 415 and `type`
 *   `charset.unsupported` for a charset the platform's TextDecoder cannot read (utf-32: JSON is
 *   UTF-8, RFC 8259 §8.1; utf-16 is still read).
 */
export function refuseDuplicateJsonKeys(_req: unknown, _res: unknown, buf: Buffer, encoding: string | null): void {
  let decoder: TextDecoder;
  try {
    decoder = new TextDecoder(encoding ?? 'utf-8', { fatal: true });
  } catch {
    throw Object.assign(new Error(`unsupported charset "${String(encoding).toUpperCase()}"`), {
      status: 415,
      type: 'charset.unsupported',
    });
  }
  let text: string;
  try {
    text = decoder.decode(buf);
  } catch {
    throw Object.assign(new Error(`the body is not valid ${decoder.encoding}`), { status: 400, type: UNDECODABLE_BODY_TYPE });
  }
  if (duplicateJsonKey(text) !== null) {
    throw Object.assign(new Error('a JSON object of the body names a key twice'), { status: 400, type: DUPLICATE_KEY_TYPE });
  }
}

/**
 * The content-codings a request body may come in (RFC 9110 §8.4.1), as the public contract lists
 * them: body-parser also inflates `zstd` wherever the platform's zlib has it (Node ≥ 22.15), which
 * would make the accepted set depend on the Node version and answer a bad zstd body with the
 * library's words (docs/decisions/0781-request-bodies-come-in-four-codings.md).
 */
export const REQUEST_BODY_CODINGS: readonly string[] = ['identity', 'gzip', 'deflate', 'br'];

/**
 * Middleware before the body parsers: a request with a body (RFC 9110 §6.4.1: `content-length`
 * or `transfer-encoding` present) whose `content-encoding` is not one of
 * {@link REQUEST_BODY_CODINGS} (case-insensitive, as body-parser compares) is passed on as a
 * body-parser `encoding.unsupported` error — answered 415 `unsupported_encoding` in http-errors.ts —
 * before any byte of it is read or inflated.
 */
export function refuseUnlistedContentEncoding(
  req: { headers: Record<string, string | string[] | undefined> },
  _res: unknown,
  next: (err?: unknown) => void,
): void {
  const coding = req.headers['content-encoding'];
  const hasBody = req.headers['content-length'] !== undefined || req.headers['transfer-encoding'] !== undefined;
  if (typeof coding !== 'string' || !hasBody || REQUEST_BODY_CODINGS.includes(coding.toLowerCase())) return next();
  next(
    Object.assign(new Error(`unsupported content encoding "${coding}"`), {
      status: 415,
      expose: true,
      type: 'encoding.unsupported',
    }),
  );
}
