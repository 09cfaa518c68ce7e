import { describe, expect, it } from 'vitest';
import { DEFAULT_AUDIT_GATE } from '@gatehouse/ledger';
import { auditGateEnv, auditGateFromEnv, parseEnv } from '../src/index.ts';

// One schema for the audit-health gate's settings: the executor (at boot) and the operator CLI
// (its remediations and change cancels) read them alike, and refuse the same bad value.
describe('the audit-health gate settings (docs/product/invariants.md#evidence)', () => {
  it('default to DEFAULT_AUDIT_GATE and take positive integers in ms', () => {
    expect(auditGateFromEnv({})).toEqual(DEFAULT_AUDIT_GATE);
    expect(auditGateFromEnv({ AUDIT_HEALTH_MAX_HEARTBEAT_AGE_MS: '2500', AUDIT_HEALTH_MAX_BACKLOG_AGE_MS: '60000' })).toEqual({
      maxHeartbeatAgeMs: 2500,
      maxBacklogAgeMs: 60_000,
    });
  });

  it('refuse a value that is not a positive integer, as the executor refuses it at boot, instead of falling back', () => {
    for (const bad of ['0', '-5', '1.5', 'ten', '1e3x']) {
      expect(() => auditGateFromEnv({ AUDIT_HEALTH_MAX_BACKLOG_AGE_MS: bad }), bad).toThrow(/AUDIT_HEALTH_MAX_BACKLOG_AGE_MS/);
      expect(() => parseEnv(auditGateEnv, { GATEHOUSE_ENV: 'test', AUDIT_HEALTH_MAX_BACKLOG_AGE_MS: bad }), bad).toThrow(
        /AUDIT_HEALTH_MAX_BACKLOG_AGE_MS/,
      );
    }
  });
});
