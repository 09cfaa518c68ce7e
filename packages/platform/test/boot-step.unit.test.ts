import { describe, expect, it } from 'vitest';
import { DependencyUnavailable } from '@gatehouse/ledger';
import { bootStep } from '../src/boot-step.ts';
import { createLogger } from '../src/logger.ts';

const log = createLogger('boot-step-test');

describe('bootStep', () => {
  it('tries again while the dependency is down, pausing 0.5 s doubling to 5 s, and returns the result', async () => {
    const refused = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' });
    const failures: unknown[] = [refused, refused, new DependencyUnavailable('redis', 'down'), refused, refused, refused];
    const pauses: number[] = [];
    const result = await bootStep(
      log,
      'register the release',
      async () => {
        const next = failures.shift();
        if (next) throw next;
        return 'active';
      },
      async (ms) => void pauses.push(ms),
    );
    expect(result).toBe('active');
    expect(pauses).toEqual([500, 1000, 2000, 4000, 5000, 5000]);
  });

  it('throws any other error at once: a refused boot is not an outage', async () => {
    const pauses: number[] = [];
    await expect(
      bootStep(
        log,
        'register the release',
        async () => {
          throw new Error('relation "releases" does not exist');
        },
        async (ms) => void pauses.push(ms),
      ),
    ).rejects.toThrow('relation "releases" does not exist');
    expect(pauses).toEqual([]);
  });
});
