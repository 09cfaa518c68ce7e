import { describe, expect, it } from 'vitest';
import { freePort, testPortRange } from '@gatehouse/test-harness';

// Two vitest workers start stacks side by side; a port one of them checked free stays unbound
// until its service starts, so the other must never pick it. Each worker draws from its own slice.

describe('test service ports', () => {
  it('each vitest worker draws from a slice of its own, below the ephemeral range', () => {
    const slices = [1, 2, 3, 4, 5, 6, 7, 8].map((id) => testPortRange(String(id)));
    for (const [i, a] of slices.entries()) {
      expect(a.min).toBeGreaterThanOrEqual(15_000);
      expect(a.max).toBeLessThanOrEqual(32_768);
      expect(a.max - a.min).toBeGreaterThan(2000);
      for (const b of slices.slice(i + 1)) expect(a.max <= b.min || b.max <= a.min).toBe(true);
    }
    expect(testPortRange('')).toEqual({ min: 15_000, max: 32_000 });
  });

  it('this worker knows its pool id, and freePort stays in its slice', async () => {
    // Without VITEST_POOL_ID the slices would silently not apply.
    expect(Number(process.env.VITEST_POOL_ID)).toBeGreaterThanOrEqual(1);
    const { min, max } = testPortRange();
    for (let i = 0; i < 20; i++) {
      const port = await freePort();
      expect(port).toBeGreaterThanOrEqual(min);
      expect(port).toBeLessThan(max);
    }
  });
});
