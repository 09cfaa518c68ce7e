import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAction } from '@gatehouse/testing';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { executionAuditFields, type AuditBasis } from '../src/domain/execution-audit.ts';

// The audit basis is read with the action, before the claim. A delivery that reaches the claim
// and finds the operation finished by another worker replays it with that earlier basis, which
// may predate the approval's consumption: its event must still name the approval (ADR 0350).

let tdb: TestDatabase;
beforeAll(async () => {
  tdb = await createTestDatabase();
});
afterAll(async () => {
  await tdb?.drop();
});

const actionRow = (id: string) => tdb.db.selectFrom('actions').selectAll().where('id', '=', id).executeTakeFirstOrThrow();

describe('executionAuditFields with a basis read before the claim', () => {
  it('an approval-requiring action whose basis names no used approval reads it again', async () => {
    const a = await createAction(tdb.db, { orderId: 'O-1001', amountCents: 6400 });
    expect(a.approvalId).not.toBeNull();
    await tdb.db.updateTable('approvals').set({ status: 'used' }).where('id', '=', a.approvalId).execute();
    const action = await actionRow(a.actionId);
    expect(action.decision).toBe('REQUIRE_APPROVAL');
    const before: AuditBasis = { userId: 'rep-ana', catalogDigest: 'c', model: null, promptHash: null, usedApprovalId: null };
    const fields = await executionAuditFields(tdb.db, action, { auditHmacKey: 'k', basis: before });
    expect(fields.approvalId).toBe(a.approvalId);
  });

  it('a basis that names the used approval, or an ALLOW action, is taken as read', async () => {
    const a = await createAction(tdb.db, { orderId: 'O-1002', amountCents: 6400 });
    const action = await actionRow(a.actionId);
    const given: AuditBasis = { userId: 'u', catalogDigest: 'given', model: 'm', promptHash: 'p', usedApprovalId: 'appr-given' };
    const fields = await executionAuditFields(tdb.db, action, { auditHmacKey: 'k', basis: given });
    expect(fields).toMatchObject({ approvalId: 'appr-given', revisions: { toolCatalog: 'given', model: 'm', promptHash: 'p' } });

    const allow = await actionRow((await createAction(tdb.db, { orderId: 'O-1003', amountCents: 1000 })).actionId);
    const none = { ...given, usedApprovalId: null };
    const allowFields = await executionAuditFields(tdb.db, allow, { auditHmacKey: 'k', basis: none });
    expect(allowFields).toMatchObject({ approvalId: null, noApprovalReason: 'policy_allowed', revisions: { toolCatalog: 'given' } });
  });
});
