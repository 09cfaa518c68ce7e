import { SystemError } from './errors.ts';
import { testFaults } from './test-faults.ts';

/** Default cap of a downstream response body: 1 MiB (`DOWNSTREAM_BODY_LIMIT_BYTES` overrides). */
export const DEFAULT_BODY_LIMIT_BYTES = 1024 * 1024;

/** Statuses whose response may not carry a body (Fetch standard). */
const NULL_BODY_STATUSES = new Set([101, 204, 205, 304]);

/** A downstream answered with a body larger than the cap; reading stopped there (SystemError, `downstream_body_too_large`). */
export class BodyTooLarge extends SystemError {
  readonly limitBytes: number;
  constructor(limitBytes: number) {
    super('downstream_body_too_large', `downstream response body exceeds ${limitBytes} bytes`);
    this.limitBytes = limitBytes;
  }
}

/**
 * The cap in force: `DOWNSTREAM_BODY_LIMIT_BYTES` (validated at boot by the base env schema),
 * else {@link DEFAULT_BODY_LIMIT_BYTES}; Infinity under the test-only switch
 * `GATEHOUSE_TEST_DISABLE_BODY_CAP=1` (control-removed test).
 * @throws Error when the switch is set outside `GATEHOUSE_ENV=test`.
 */
export function downstreamBodyLimit(env: Record<string, string | undefined> = process.env): number {
  if (testFaults(env).disableBodyCap) return Infinity;
  const n = Number(env.DOWNSTREAM_BODY_LIMIT_BYTES);
  return Number.isInteger(n) && n > 0 ? n : DEFAULT_BODY_LIMIT_BYTES;
}

/**
 * The same response with its body capped at `limitBytes`: a declared `content-length` above the
 * cap fails at once, and a streamed body fails as soon as it passes the cap, so reading
 * (`text()`, `json()`) rejects with {@link BodyTooLarge} instead of growing memory
 * (docs/decisions/0181-abuse-limits.md).
 * @throws BodyTooLarge when the declared length is over the cap (the body is cancelled).
 */
export async function capBody(res: Response, limitBytes = downstreamBodyLimit()): Promise<Response> {
  if (!res.body || limitBytes === Infinity || NULL_BODY_STATUSES.has(res.status)) return res;
  const declared = Number(res.headers.get('content-length'));
  if (Number.isFinite(declared) && declared > limitBytes) {
    await res.body.cancel().catch(() => {});
    throw new BodyTooLarge(limitBytes);
  }
  let seen = 0;
  const counter = new TransformStream<Uint8Array, Uint8Array>({
    transform(chunk, controller) {
      seen += chunk.byteLength;
      if (seen > limitBytes) controller.error(new BodyTooLarge(limitBytes));
      else controller.enqueue(chunk);
    },
  });
  return new Response(res.body.pipeThrough(counter), { status: res.status, statusText: res.statusText, headers: res.headers });
}

/**
 * `fetch` whose response body is capped ({@link capBody}); reading a body past the cap rejects
 * with {@link BodyTooLarge}. Same arguments and errors as `fetch`, plus that one.
 */
export async function fetchCapped(
  input: string | URL | Request,
  init?: RequestInit,
  limitBytes = downstreamBodyLimit(),
): Promise<Response> {
  return capBody(await fetch(input, init), limitBytes);
}
