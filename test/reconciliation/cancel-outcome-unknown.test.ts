import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seedScheduleStep } from './seed.ts';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { RemediationRefused, requestChangeCancel } from '@gatehouse/reconciliation';

// A change cancel of a schedule_change step whose outcome is unknown (`failed_unknown`: the call
// may have reached the change service; `running`: a claim is sending it) was refused as
// `not_scheduled` — "…is failed_unknown, not scheduled" — with no next step, while the change may
// well be scheduled and run at its window. It is refused `outcome_unknown`, naming
// `gatehouse reconcile` and the command to run again; nothing is requested either way
// (docs/decisions/0759-a-cancel-of-a-schedule-of-unknown-outcome-says-so.md).

let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(async () => {
  await t?.drop();
});

const deps = () => ({ db: t.db, stagingUrl: 'http://127.0.0.1:9', hmacKey: 'local-audit-hmac-key-change-me', release: 'rel-1' });

describe('a cancel of a schedule whose outcome is unknown', () => {
  for (const status of ['failed_unknown', 'running'] as const) {
    it(`${status}: refused outcome_unknown naming gatehouse reconcile, not "not scheduled"; nothing requested`, async () => {
      const key = await seedScheduleStep(t.db, status, 'needs_reconciliation');
      const refused = await requestChangeCancel(deps(), { ref: key, reason: 'postpone', operator: 'ops-gus' }).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(RemediationRefused);
      const r = refused as RemediationRefused;
      expect(r.reason).toBe('outcome_unknown');
      expect(r.message).not.toMatch(/not scheduled/);
      expect(r.message).toContain('may be scheduled and run at its window');
      expect(r.message).toContain('gatehouse reconcile');
      expect(r.message).toContain(`gatehouse change cancel ${key} --reason <why>`);
      const requests = await t.db
        .selectFrom('actions')
        .select('id')
        .where('tool', '=', 'cancel_change')
        .where('target', '=', key)
        .execute();
      expect(requests).toEqual([]);
    });
  }
});
