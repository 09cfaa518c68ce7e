import { gzipSync } from 'node:zlib';
import fc from 'fast-check';
import type { RawRequest } from './client.ts';
import { tokenArb, validToken } from './tokens.ts';

/** Where a route takes its caller's token from. */
export type AuthStyle = 'bearer' | 'cookie:gh_inbox' | 'cookie:gh_ops' | 'bearer-or-cookie:gh_ops';

/** One route of a surface as the fuzzer sees it. */
export interface RouteSpec {
  method: string;
  /** Path template; every `:id` is replaced by a fuzzed segment (`*` by a fuzzed tail of segments). */
  path: string;
  auth: AuthStyle;
  /** Bodies the route accepts (the fuzzer mutates around them); none for a route without a body. */
  body?: fc.Arbitrary<unknown>;
  /** Form bodies (`application/x-www-form-urlencoded`) the route accepts. */
  form?: fc.Arbitrary<Record<string, string>>;
  /** World users who normally call the route: the fuzz of everything but the token signs in as one of them. */
  callers: string[];
  /** Ids that exist (a seeded workflow or approval), so fuzzing also reaches the found-it branch. */
  ids?: () => string[];
  /** Headers the route reads (beside the token), fuzzed into every request (e.g. `Last-Event-ID`). */
  headers?: fc.Arbitrary<Record<string, string>>;
}

/** Characters that percent-decoding, routers and query parsers treat specially (printable ASCII only). */
const SPECIAL = [...`%zZ09aAfF.-_~!$&'()*+,;=:@[]{}|\\^\`"<>`];

/** A path segment: an existing id, a uuid, an encoded string, raw percent garbage, or a long one. */
function segment(ids: () => string[]): fc.Arbitrary<string> {
  const known = ids();
  return fc.oneof(
    ...(known.length ? [fc.constantFrom(...known)] : []),
    fc.uuid(),
    fc.constantFrom('%', '%zz', '%E0%A4%A', '%00', '%2F', '%2e%2e', '..', '.', '%C0%AF', '%FF', '%u0041', '%%', ''),
    fc.string({ unit: 'binary', maxLength: 40 }).map((s) => encodeURIComponent(s.replace(/[\ud800-\udfff]/g, 'x'))),
    fc.string({ unit: fc.constantFrom(...SPECIAL), maxLength: 24 }),
    fc.integer({ min: 1_000, max: 3_000 }).map((n) => 'a'.repeat(n)),
  );
}

/** A query string: none, known keys with odd values, repeated keys (arrays), brackets, garbage. */
const query: fc.Arbitrary<string> = fc.oneof(
  { weight: 3, arbitrary: fc.constant('') },
  {
    weight: 4,
    arbitrary: fc
      .array(
        fc.tuple(
          fc.oneof(
            fc.constantFrom(
              'status',
              'state',
              'limit',
              'done',
              'lastEventId',
              'status[]',
              'limit[0]',
              'a[b][c]',
              '__proto__',
              'constructor[prototype]',
              '',
            ),
            fc.string({ unit: fc.constantFrom(...SPECIAL), maxLength: 8 }),
          ),
          fc.oneof(
            fc.constantFrom('pending', 'approved', 'failed_unknown', '1', '0', '-1', '501', '1e3', 'NaN', '%', '%zz', ''),
            fc.string({ maxLength: 30 }).map((s) => encodeURIComponent(s.replace(/[\ud800-\udfff]/g, 'x'))),
            fc.string({ unit: fc.constantFrom(...SPECIAL), maxLength: 12 }),
          ),
        ),
        { minLength: 1, maxLength: 6 },
      )
      .map((pairs) => `?${pairs.map(([k, v]) => `${k}=${v}`).join('&')}`),
  },
  { weight: 1, arbitrary: fc.integer({ min: 1, max: 3_000 }).map((n) => `?limit=${'9'.repeat(n)}`) },
  {
    weight: 1,
    arbitrary: fc.integer({ min: 1, max: 1_200 }).map((n) => `?${Array.from({ length: n }, (_, i) => `status=${i}`).join('&')}`),
  },
);

/** How the body goes on the wire; materialized by {@link bodyBytes} (a 1 MiB body is not kept in the shrink tree). */
type BodySpec =
  | { kind: 'none' }
  | { kind: 'json'; value: unknown }
  | { kind: 'text'; text: string }
  | { kind: 'nested'; depth: number; open: '[' | '{"a":' }
  | { kind: 'huge'; bytes: number }
  | { kind: 'bytes'; bytes: Uint8Array }
  | { kind: 'form'; fields: Record<string, string> }
  | { kind: 'formText'; text: string };

/** The bytes of a body spec. */
function bodyBytes(b: BodySpec): Buffer | undefined {
  switch (b.kind) {
    case 'none':
      return undefined;
    case 'json':
      return Buffer.from(JSON.stringify(b.value) ?? 'null');
    case 'text':
    case 'formText':
      return Buffer.from(b.text);
    case 'nested':
      return Buffer.from(`${b.open.repeat(b.depth)}1${(b.open === '[' ? ']' : '}').repeat(b.depth)}`);
    case 'huge':
      return Buffer.from(JSON.stringify({ text: 'x'.repeat(b.bytes) }));
    case 'bytes':
      return Buffer.from(b.bytes);
    case 'form':
      return Buffer.from(new URLSearchParams(b.fields).toString());
  }
}

/** Text with the characters storage and parsers trip over: NUL, lone surrogates, RTL marks, emoji. */
const hostileText = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 60 }),
  fc.constantFrom(
    '\u0000',
    'a\u0000b',
    '\ud800',
    'x\udfffy',
    '\u202e\u200b',
    '🙂'.repeat(50),
    '<script>alert(1)</script>',
    "'; drop table workflows; --",
  ),
);

/** A JSON value mutated from a valid body: a field replaced, removed, added or retyped. */
function mutated(valid: fc.Arbitrary<unknown>): fc.Arbitrary<unknown> {
  return fc
    .tuple(valid, fc.nat(5), fc.oneof(hostileText, fc.jsonValue({ maxDepth: 2 })), fc.string({ maxLength: 10 }))
    .map(([v, how, odd, key]) => {
      if (!v || typeof v !== 'object' || Array.isArray(v)) return v;
      const o: Record<string, unknown> = { ...(v as Record<string, unknown>) };
      const keys = Object.keys(o);
      const k = keys.length ? keys[how % keys.length]! : key;
      if (how === 0) delete o[k];
      else if (how === 1) o[key] = odd;
      else if (how === 5) return JSON.parse(`{"__proto__":{"polluted":1}${keys.length ? ',' : ''}${JSON.stringify(o).slice(1)}`) as unknown;
      else o[k] = odd;
      return o;
    });
}

/** A body for a route: its valid shape, a mutation of it, any JSON, not JSON, very deep, too large, a form. */
function bodySpec(route: RouteSpec): fc.Arbitrary<BodySpec> {
  const valid = route.body ?? fc.constant({});
  return fc.oneof(
    { weight: 2, arbitrary: fc.constant<BodySpec>({ kind: 'none' }) },
    { weight: 3, arbitrary: valid.map((value): BodySpec => ({ kind: 'json', value })) },
    { weight: 4, arbitrary: mutated(valid).map((value): BodySpec => ({ kind: 'json', value })) },
    { weight: 2, arbitrary: fc.jsonValue({ maxDepth: 4 }).map((value): BodySpec => ({ kind: 'json', value })) },
    { weight: 2, arbitrary: fc.string({ maxLength: 80 }).map((text): BodySpec => ({ kind: 'text', text })) },
    {
      weight: 1,
      arbitrary: fc
        .tuple(fc.integer({ min: 100, max: 200_000 }), fc.constantFrom<'[' | '{"a":'>('[', '{"a":'))
        .map(([depth, open]): BodySpec => ({ kind: 'nested', depth, open })),
    },
    { weight: 1, arbitrary: fc.integer({ min: 1_100_000, max: 1_300_000 }).map((bytes): BodySpec => ({ kind: 'huge', bytes })) },
    { weight: 1, arbitrary: fc.uint8Array({ maxLength: 64 }).map((bytes): BodySpec => ({ kind: 'bytes', bytes })) },
    {
      weight: route.form ? 4 : 1,
      arbitrary: (route.form ?? fc.dictionary(fc.string({ maxLength: 8 }), fc.string({ maxLength: 20 }), { maxKeys: 4 })).map(
        (fields): BodySpec => ({ kind: 'form', fields }),
      ),
    },
    {
      weight: 1,
      arbitrary: fc.string({ unit: fc.constantFrom(...SPECIAL), maxLength: 40 }).map((text): BodySpec => ({ kind: 'formText', text })),
    },
  );
}

/** The content-type a body is sent with: usually the one that fits, sometimes a wrong or odd one. */
const CONTENT_TYPES = [
  'application/json',
  'application/json; charset=utf-8',
  'application/json; charset=utf-16',
  'application/json; charset=latin1',
  'application/json; charset=bogus',
  'application/x-www-form-urlencoded',
  'application/x-www-form-urlencoded; charset=utf-32',
  'application/vnd.api+json',
  'multipart/form-data; boundary=xyz',
  'text/plain',
  'text/html',
  '*/*',
  'application',
  ';;;',
  'application/json; charset="',
];

/** Content-encodings, including ones body-parser does not know and gzip that is not gzip. */
const ENCODINGS = ['gzip', 'deflate', 'br', 'identity', 'bogus', 'gzip, gzip', 'GZIP'];

/** Printable header names a client may send, minus the framing ones node sets itself. */
const headerName = fc
  .stringMatching(/^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,20}$/)
  .filter((n) => !/^(content-length|transfer-encoding|expect|connection|host|upgrade|te|trailer|keep-alive)$/i.test(n));
/** Header values node's client will put on the wire (latin-1, no CR/LF). */
const headerValue = fc.string({ unit: fc.integer({ min: 0x20, max: 0x7e }).map((c) => String.fromCharCode(c)), maxLength: 60 });

/** The Authorization header or cookie carrying a token of `tokens` (possibly forged), or nothing. */
function authHeaders(auth: AuthStyle, tokens: fc.Arbitrary<string> = tokenArb): fc.Arbitrary<Record<string, string>> {
  const bearer = fc.oneof(
    { weight: 6, arbitrary: tokens.map((t) => `Bearer ${t}`) },
    { weight: 1, arbitrary: tokens.map((t) => `bearer   ${t}`) },
    { weight: 1, arbitrary: tokens.map((t) => `Bearer ${t} ${t}`) },
    { weight: 1, arbitrary: fc.constantFrom('Bearer', 'Bearer ', 'Basic dXNlcjpwYXNz', 'Token abc', '') },
    { weight: 1, arbitrary: tokens },
  );
  const cookie = (name: string) =>
    fc.oneof(
      { weight: 4, arbitrary: tokens.map((t) => `${name}=${t}`) },
      { weight: 1, arbitrary: tokens.map((t) => `${name}=${encodeURIComponent(t)}; other=%; ${name}=%zz`) },
      { weight: 1, arbitrary: headerValue },
      { weight: 1, arbitrary: fc.constantFrom(`${name}=`, `${name}=%`, `${name}="unterminated`, `=;=;;`, `${name}=%E0%A4%A`) },
    );
  const none = fc.constant<Record<string, string>>({});
  if (auth === 'bearer')
    return fc.oneof({ weight: 1, arbitrary: none }, { weight: 9, arbitrary: bearer.map((a) => ({ authorization: a })) });
  const name = auth.split(':')[1]!;
  const byCookie = cookie(name).map((c) => ({ cookie: c }));
  if (auth.startsWith('cookie:')) return fc.oneof({ weight: 1, arbitrary: none }, { weight: 9, arbitrary: byCookie });
  return fc.oneof(
    none,
    bearer.map((a) => ({ authorization: a })),
    byCookie,
  );
}

/** A valid token of one of the route's usual callers, where the route reads it (header or cookie). */
function callerAuth(route: RouteSpec): fc.Arbitrary<Record<string, string>> {
  const token = fc.constantFrom(...route.callers).map(validToken);
  const cookie = token.map((t) => ({ cookie: `${route.auth.split(':')[1]}=${t}` }));
  const bearer = token.map((t) => ({ authorization: `Bearer ${t}` }));
  if (route.auth === 'bearer') return bearer;
  return route.auth.startsWith('cookie:') ? cookie : fc.oneof(bearer, cookie);
}

/** A request to `route`: fuzzed method (sometimes), path segments, query, headers, token and body. */
export function requestArb(route: RouteSpec): fc.Arbitrary<RawRequest> {
  const seg = segment(route.ids ?? (() => []));
  return fc
    .record({
      method: fc.oneof(
        { weight: 9, arbitrary: fc.constant(route.method) },
        { weight: 1, arbitrary: fc.constantFrom('GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'HEAD', 'PROPFIND') },
      ),
      segs: fc.array(seg, { minLength: 4, maxLength: 4 }),
      tail: fc.oneof(
        { weight: 6, arbitrary: fc.constant('') },
        { weight: 1, arbitrary: fc.constantFrom('/', '//', '/%', '/..', '/%2e%2e/x', '.json') },
      ),
      query,
      // Mostly a valid caller, so the rest of the request reaches the handler; tokenProbeArb fuzzes tokens.
      auth: fc.oneof({ weight: 3, arbitrary: callerAuth(route) }, { weight: 1, arbitrary: authHeaders(route.auth) }),
      // 1 in 4 bodies get a random content-type, 1 in 10 an encoding.
      contentType: fc.oneof({ weight: 3, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.constantFrom(...CONTENT_TYPES) }),
      encoding: fc.oneof({ weight: 9, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: fc.constantFrom(...ENCODINGS) }),
      gzipIt: fc.boolean(),
      extra: fc.dictionary(headerName, headerValue, { maxKeys: 3 }),
      own: route.headers ?? fc.constant({}),
      body: bodySpec(route),
    })
    .map((r): RawRequest => {
      let i = 0;
      const path = route.path.replace(/:id|\*/g, (m) => (m === '*' ? r.segs.join('/') : r.segs[i++ % r.segs.length]!)) + r.tail + r.query;
      let body = bodyBytes(r.body);
      const fitting = r.body.kind === 'form' || r.body.kind === 'formText' ? 'application/x-www-form-urlencoded' : 'application/json';
      const headers: Record<string, string> = { ...r.extra, ...r.own, ...r.auth };
      if (body !== undefined) headers['content-type'] = r.contentType ?? fitting;
      if (body !== undefined && r.encoding) {
        headers['content-encoding'] = r.encoding;
        if (r.gzipIt && r.encoding.toLowerCase() === 'gzip') body = gzipSync(body);
      }
      return { method: r.method, path, headers, body };
    });
}

/**
 * A well-formed request to `route` (an existing id or a uuid, a body of the route's own shape)
 * whose only fuzzed part is the caller's token: forged, malformed, expired, odd claims.
 */
export function tokenProbeArb(route: RouteSpec): fc.Arbitrary<RawRequest> {
  const known = (route.ids ?? (() => []))();
  const id = known.length ? fc.oneof(fc.constantFrom(...known), fc.uuid()) : fc.uuid();
  const body: fc.Arbitrary<BodySpec> = route.body
    ? route.body.map((value) => ({ kind: 'json', value }))
    : route.form
      ? route.form.map((fields) => ({ kind: 'form', fields }))
      : fc.constant({ kind: 'none' });
  return fc.record({ auth: authHeaders(route.auth), id, body }).map((r): RawRequest => {
    const bytes = bodyBytes(r.body);
    const headers: Record<string, string> = { ...r.auth };
    if (bytes !== undefined) headers['content-type'] = r.body.kind === 'form' ? 'application/x-www-form-urlencoded' : 'application/json';
    return { method: route.method, path: route.path.replace(/:id|\*/g, r.id), headers, body: bytes };
  });
}
