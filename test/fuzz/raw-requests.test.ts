import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startFuzzApps, type FuzzApps, type Surface } from './support/apps.ts';
import { send, sendRaw, sendRawAll } from './support/client.ts';
import { unhandledLines } from './support/fuzz.ts';
import { validToken } from './support/tokens.ts';

// Requests node's own client refuses to write (header injection, bare CR, NUL, smuggling framing,
// malformed request lines) are written byte for byte: each is refused with a 4xx by the HTTP
// parser or the app, and the app keeps answering afterwards.

let f: FuzzApps;
beforeAll(async () => {
  f = await startFuzzApps();
});
afterAll(async () => {
  await f?.close();
});

const token = () => validToken('lead-eli');
const RAW: Array<[string, () => string]> = [
  [
    'a bare CR inside a header value',
    () => `GET /v1/approvals HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token()}\rX-Injected: 1\r\n\r\n`,
  ],
  ['a NUL inside a header value', () => `GET /v1/approvals HTTP/1.1\r\nHost: x\r\nX-A: a\u0000b\r\n\r\n`],
  [
    'a bare LF line ending injecting a header',
    () => `GET /v1/approvals HTTP/1.1\nHost: x\nAuthorization: Bearer ${token()}\nSet-Cookie: a=b\n\n`,
  ],
  ['a header name with a space', () => `GET /v1/approvals HTTP/1.1\r\nHost: x\r\nBad Name: v\r\n\r\n`],
  ['an obsolete folded header', () => `GET /v1/approvals HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer\r\n ${token()}\r\n\r\n`],
  [
    'both Content-Length and Transfer-Encoding',
    () => `POST /v1/approvals/x/decision HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`,
  ],
  ['two different Content-Lengths', () => `POST /v1/tickets HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}`],
  [
    'a malformed chunk size',
    () =>
      `POST /v1/tickets HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\nzz\r\n{}\r\n0\r\n\r\n`,
  ],
  ['a request line with a raw space in the path', () => `GET /v1/approvals/a b HTTP/1.1\r\nHost: x\r\n\r\n`],
  ['a request line with raw UTF-8 in the path', () => `GET /v1/approvals/é HTTP/1.1\r\nHost: x\r\n\r\n`],
  ['an unknown HTTP version', () => `GET /v1/approvals HTTP/9.9\r\nHost: x\r\n\r\n`],
  ['a TLS ClientHello on the plain port', () => '\u0016\u0003\u0001\u0002\u0000\u0001\u0000\u0001\u00fc\u0003\u0003\r\n\r\n'],
  ['a request line of garbage', () => `}{%%% ][ HTTP/1.1\r\nHost: x\r\n\r\n`],
  ['an HTTP/1.1 request without Host', () => `GET /v1/approvals HTTP/1.1\r\nAuthorization: Bearer ${token()}\r\n\r\n`],
  [
    'an Expect other than 100-continue',
    () => `POST /v1/tickets HTTP/1.1\r\nHost: x\r\nExpect: bogus\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}`,
  ],
  ['a header block over 16 KiB', () => `GET /v1/approvals HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`],
  [
    'a percent-encoded NUL and slash in a param',
    () => `GET /v1/approvals/%00%2F..%2F HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token()}\r\n\r\n`,
  ],
];

describe.each<Surface>(['agent-loop', 'approval', 'ops'])('%s refuses a malformed request with a 4xx', (surface) => {
  it.each(RAW)('%s', async (_name, bytes) => {
    const status = await sendRaw(f.apps[surface].url, bytes());
    // 0: the parser closed the connection after its 400/431 without the answer reaching us first.
    if (status !== 0) expect(status).toBeGreaterThanOrEqual(400);
    expect(status).toBeLessThan(500);
  });

  it.each(RAW)('%s: the refusal carries a reason', async (_name, bytes) => {
    for (const r of await sendRawAll(f.apps[surface].url, bytes())) {
      expect(r.status).toBeGreaterThanOrEqual(400);
      // A head section too large too (431 headers_too_large, docs/decisions/0690): only a HEAD's answer has no body.
      expect(typeof JSON.parse(r.body).error.reason, r.body).toBe('string');
    }
  });

  it('bytes past a short Content-Length: the body is refused, then the leftover, each with a reason, and the connection closes', async () => {
    const body = '{"ticketId":"T-cl","text":"y"}';
    const answers = await sendRawAll(
      f.apps[surface].url,
      `POST /v1/tickets HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\n${body}`,
    );
    // The first five bytes are the body express parses (a truncated JSON document); the rest is
    // read as a second request, which the HTTP parser refuses.
    expect(answers.map((a) => a.status)).toEqual([400, 400]);
    expect(answers.map((a) => JSON.parse(a.body).error.reason)).toEqual(['invalid_body', 'malformed_request']);
  });

  it('still answers /healthz and logged no unhandled error', async () => {
    expect((await send(f.apps[surface].url, { method: 'GET', path: '/healthz' })).status).toBe(200);
    expect(unhandledLines(f.apps[surface])).toEqual([]);
  });
});
