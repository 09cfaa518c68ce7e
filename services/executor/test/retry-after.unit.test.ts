import { describe, expect, it } from 'vitest';
import { retryAfterMs } from '../src/adapters/idempotent-write.ts';

// The wait a 429 or a 503 asks for (RFC 9110 §10.2.3: delay-seconds or an HTTP-date), as the retry policy reads it.

const NOW = Date.parse('2026-12-06T00:00:00Z');
const h = (entries: Record<string, string>) => new Headers(entries);

describe('Retry-After', () => {
  it('retry-after-ms first, then delay-seconds', () => {
    expect(retryAfterMs(h({ 'retry-after-ms': '250', 'retry-after': '9' }), NOW)).toBe(250);
    expect(retryAfterMs(h({ 'retry-after': '3' }), NOW)).toBe(3000);
    expect(retryAfterMs(h({ 'retry-after': ' 0 ' }), NOW)).toBe(0);
  });

  it('an HTTP-date is the time left until it; a date already past is no wait', () => {
    expect(retryAfterMs(h({ 'retry-after': 'Sun, 06 Dec 2026 00:01:00 GMT' }), NOW)).toBe(60_000);
    expect(retryAfterMs(h({ 'retry-after': 'Sat, 05 Dec 2026 23:00:00 GMT' }), NOW)).toBe(0);
  });

  it('a field sent twice (joined with ", "): the longest wait it names', () => {
    const twice = (a: string, b: string) => {
      const headers = new Headers();
      headers.append('retry-after', a);
      headers.append('retry-after', b);
      return headers;
    };
    expect(retryAfterMs(twice('2', '5'), NOW)).toBe(5000);
    expect(retryAfterMs(twice('3', '3'), NOW)).toBe(3000);
    expect(retryAfterMs(twice('Sun, 06 Dec 2026 00:01:00 GMT', 'Sun, 06 Dec 2026 00:00:30 GMT'), NOW)).toBe(60_000);
    expect(retryAfterMs(twice('2', 'soon'), NOW)).toBeUndefined();
  });

  it('absent, empty or unreadable: not given (the policy backs off on its own)', () => {
    expect(retryAfterMs(h({}), NOW)).toBeUndefined();
    expect(retryAfterMs(h({ 'retry-after': '' }), NOW)).toBeUndefined();
    expect(retryAfterMs(h({ 'retry-after': 'soon' }), NOW)).toBeUndefined();
    expect(retryAfterMs(h({ 'retry-after': '-5' }), NOW)).toBeUndefined();
  });
});
