import fc from 'fast-check';
import { expect } from 'vitest';
import type { RunningApp } from './apps.ts';
import { headBytes, MAX_HEAD_BYTES, send, type RawRequest, type RawResponse } from './client.ts';
import { requestArb, tokenProbeArb, type RouteSpec } from './requests.ts';

/** What a response must satisfy whatever the request: an answer below 500, and a reason with any JSON error. */
export function assertClientAnswer(req: RawRequest, res: RawResponse, logs: Array<Record<string, unknown>> = []): void {
  const logged = res.status >= 500 ? ` (logged: ${JSON.stringify(logs.at(-1)).slice(0, 600)})` : '';
  const where = `${req.method} ${req.path.slice(0, 200)}${logged}`;
  expect(res.status, `${where} answered ${res.status}: ${res.text.slice(0, 300)}`).toBeGreaterThanOrEqual(100);
  expect(res.status, `${where} answered ${res.status}: ${res.text.slice(0, 300)}`).toBeLessThan(500);
  const json = String(res.headers['content-type'] ?? '').startsWith('application/json');
  // bull-board's own API (under /queues) answers its errors in its own shape.
  if (res.status >= 400 && json && req.method !== 'HEAD' && !req.path.startsWith('/queues')) {
    const body = JSON.parse(res.text) as { error?: { reason?: unknown; message?: unknown } };
    expect(typeof body.error?.reason, `${where}: ${res.text.slice(0, 300)}`).toBe('string');
    expect(typeof body.error?.message, `${where}: ${res.text.slice(0, 300)}`).toBe('string');
  }
}

/**
 * Sends `req` to `url` and asserts the answer with {@link assertClientAnswer} (`logs`: the app's
 * log lines, quoted when it answers 5xx).
 * @returns the status, or null when node's HTTP parser reset the connection over an oversized head.
 */
export async function sendChecked(url: string, req: RawRequest, logs: Array<Record<string, unknown>> = []): Promise<number | null> {
  let res: RawResponse;
  try {
    res = await send(url, req);
  } catch (err) {
    // Node's HTTP parser answers an oversized head with 431 and destroys the socket at once;
    // the reset can overtake the answer. Any other hang-up is a failure.
    if (headBytes(req) > MAX_HEAD_BYTES && (err as NodeJS.ErrnoException).code === 'ECONNRESET') return null;
    throw err;
  }
  assertClientAnswer(req, res, logs);
  return res.status;
}

/**
 * Sends `runs` fuzzed requests to one route of `app` and asserts each with
 * {@link assertClientAnswer}: a third only fuzz the token ({@link tokenProbeArb}), the rest fuzz
 * everything ({@link requestArb}). A failure reports its seed and path: `FUZZ_SEED=<seed>` replays
 * the run and `FUZZ_SHRINK=1` shrinks the counterexample to a small request.
 * @returns how many requests were sent.
 */
export async function fuzzRoute(app: RunningApp, route: RouteSpec, runs: number): Promise<number> {
  let sent = 0;
  const statuses = new Map<number, number>();
  const seed = process.env.FUZZ_SEED === undefined ? undefined : Number(process.env.FUZZ_SEED);
  // Shrinking replays hundreds of requests (some of a megabyte): only when asked for.
  const endOnFailure = process.env.FUZZ_SHRINK !== '1';
  const check = async (req: RawRequest): Promise<void> => {
    sent++;
    const status = await sendChecked(app.url, req, app.logs);
    if (status !== null) statuses.set(status, (statuses.get(status) ?? 0) + 1);
  };
  const tokenRuns = Math.floor(runs / 3);
  await fc.assert(fc.asyncProperty(tokenProbeArb(route), check), { numRuns: Math.max(1, tokenRuns), seed, endOnFailure });
  await fc.assert(fc.asyncProperty(requestArb(route), check), { numRuns: Math.max(1, runs - tokenRuns), seed, endOnFailure });
  // FUZZ_STATS=1 shows how deep the requests got (a route answering only 401 is not being fuzzed).
  if (process.env.FUZZ_STATS === '1') console.log(route.method, route.path, Object.fromEntries([...statuses].sort((a, b) => a[0] - b[0])));
  return sent;
}

/** Log lines of an app that say an error escaped every handler (pino level ≥ error, or "unhandled"). */
export function unhandledLines(app: RunningApp): Array<Record<string, unknown>> {
  return app.logs.filter((l) => Number(l.level) >= 50 || /unhandled/i.test(String(l.msg)));
}
