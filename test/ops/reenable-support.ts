import { afterAll, beforeAll } from 'vitest';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { advanceReenable } from '@gatehouse/operations';

/** The audit HMAC key of the staged re-enable tests. */
export const HMAC = 'test-audit-hmac-key-0123456789';
/** The tool the staged re-enable tests contain and re-enable. */
export const TOOL = 'issue_refund';

/**
 * A test file's own database (created before its tests, dropped after) and the `reenable advance`
 * of {@link TOOL} by ops-gus with no evidence needed (`maxBound: 1`), naming `cohort` when given.
 */
export function reenableFixture(reason: string) {
  let t: TestDatabase;
  beforeAll(async () => {
    t = await createTestDatabase();
  });
  afterAll(async () => {
    await t?.drop();
  });
  return {
    db: () => t.db,
    advance: (cohort?: { tenants: string[]; users: string[] }) =>
      advanceReenable(t.db, { tool: TOOL, ...(cohort ? { cohort } : {}), maxBound: 1, reason, operator: 'ops-gus', hmacKey: HMAC }),
  };
}
