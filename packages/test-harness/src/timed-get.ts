/** What {@link timedGet} saw: status (0: no answer within the bound), content type, `Retry-After`, body text and time taken, ms. */
export interface TimedAnswer {
  status: number;
  type: string;
  retryAfter: string | null;
  text: string;
  ms: number;
}

/**
 * GETs `url` with `headers`, never following a redirect, and says how long the answer took; a
 * request unanswered within `boundMs` (default 8 s) is status 0 rather than an error, so a test
 * can assert "it did not hang" on the status.
 */
export async function timedGet(url: string, headers: Record<string, string>, boundMs = 8000): Promise<TimedAnswer> {
  const started = Date.now();
  try {
    const r = await fetch(url, { headers, redirect: 'manual', signal: AbortSignal.timeout(boundMs) });
    return {
      status: r.status,
      type: r.headers.get('content-type') ?? '',
      retryAfter: r.headers.get('retry-after'),
      text: await r.text(),
      ms: Date.now() - started,
    };
  } catch {
    return { status: 0, type: '', retryAfter: null, text: '', ms: Date.now() - started };
  }
}
