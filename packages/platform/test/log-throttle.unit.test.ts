import { describe, expect, it } from 'vitest';
import { logThrottle } from '../src/log-throttle.ts';

// A line that repeats during an outage is written once per interval, with the count left out.
describe('logThrottle', () => {
  it('writes the first line at once, then one per interval carrying how many were left out', () => {
    let t = 0;
    const throttle = logThrottle(1000, () => t);
    const written: Array<[string, number]> = [];
    const emit = (key: string) => throttle(key, (repeated) => written.push([key, repeated]));
    emit('redis down');
    for (t = 100; t < 1000; t += 100) emit('redis down'); // 9 within the interval
    expect(written).toEqual([['redis down', 0]]);
    t = 1000;
    emit('redis down');
    expect(written).toEqual([
      ['redis down', 0],
      ['redis down', 9],
    ]);
  });

  it('keys are throttled apart: another error is written at once', () => {
    let t = 0;
    const throttle = logThrottle(1000, () => t);
    const written: string[] = [];
    throttle('a', () => written.push('a'));
    t = 10;
    throttle('b', () => written.push('b'));
    throttle('a', () => written.push('a'));
    expect(written).toEqual(['a', 'b']);
  });

  it('remembers a bounded number of keys: the oldest is forgotten and written again', () => {
    const throttle = logThrottle(60_000, () => 0);
    const written: string[] = [];
    for (let i = 0; i <= 256; i++) throttle(`k${i}`, () => written.push(`k${i}`));
    throttle('k0', () => written.push('k0 again'));
    throttle('k256', () => written.push('k256 again'));
    expect(written.at(-1)).toBe('k0 again');
    expect(written).toHaveLength(258);
  });
});
