import { describe, expect, it } from 'vitest';
import { readTestHooks } from '../src/domain/test-hooks.ts';

describe('executor test hooks', () => {
  const all = {
    GATEHOUSE_TEST_CRASH_AT: 'after_dispatch',
    GATEHOUSE_TEST_BLOCK_BEFORE_DISPATCH_MS: '10',
    GATEHOUSE_TEST_DISABLE_WRITE_AHEAD: '1',
    GATEHOUSE_TEST_DISABLE_REEVALUATION: '1',
    GATEHOUSE_TEST_DISABLE_DIGEST_BINDING: '1',
    GATEHOUSE_TEST_DISABLE_OUTPUT_BOUNDARY: '1',
    GATEHOUSE_TEST_DISABLE_WATCHDOG: '1',
    GATEHOUSE_TEST_DISABLE_IDEMPOTENCY_KEY: '1',
    GATEHOUSE_TEST_SWITCH_AT_ADMISSION_ONLY: '1',
    GATEHOUSE_TEST_DISABLE_LEASE: '1',
    GATEHOUSE_TEST_DISABLE_RECORD_RETRY: '1',
    GATEHOUSE_TEST_DISABLE_REENABLE_COHORT: '1',
    GATEHOUSE_TEST_DISABLE_SWITCH: '1',
    GATEHOUSE_TEST_SWITCH_NOT_RECHECKED_BEFORE_RETRY: '1',
    GATEHOUSE_TEST_AUDIT_NOT_RECHECKED_BEFORE_RETRY: '1',
  };

  it('each hook is read on its own', () => {
    for (const [k, v] of Object.entries(all)) {
      const hooks = readTestHooks({ GATEHOUSE_ENV: 'test', [k]: v });
      expect(
        Object.values(hooks).some((x) => x !== null && x !== false && x !== 0),
        k,
      ).toBe(true);
    }
  });

  it('every hook is refused outside GATEHOUSE_ENV=test (never in production)', () => {
    for (const [k, v] of Object.entries(all)) {
      expect(() => readTestHooks({ GATEHOUSE_ENV: 'production', [k]: v }), k).toThrow(/GATEHOUSE_ENV=test/);
    }
  });
});
