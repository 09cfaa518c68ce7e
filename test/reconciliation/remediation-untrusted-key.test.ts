import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { processReconcile, type ReconcileDeps } from '@gatehouse/executor';
import { AUDIT_HMAC_KEY, startHarness, type Harness } from '../executor/support/harness.ts';
import { seedStep } from './seed.ts';
import { reconOps } from './recon-ops.ts';

// An executor whose delegation key the systems of record do not list holds its execution jobs
// (ADR 0767); its reconcile passes hold the remediations leads approved too. Executed, each would
// meet 401 before any effect and end refused, and its item would need a new request and approval.
// The pass itself still reads and compares (it needs no delegated token).

let h: Harness;
beforeAll(async () => {
  h = await startHarness({ poolSize: 6 });
});
afterAll(async () => {
  await h?.close();
});

const { pass, liveItem, op, approvedRemediation } = reconOps(() => h);

/** The reconcile job's dependencies over the harness, with `holds` as the executor's delegation trust. */
const deps = (holds: boolean): ReconcileDeps => ({
  db: h.db,
  relay: h.relay,
  log: h.log,
  stagingUrl: h.stagingUrl,
  signingKey: h.delegationKeys.signing,
  auditHmacKey: AUDIT_HMAC_KEY,
  release: 'rel-1',
  supportRevision: 'support-p1',
  changeRevision: 'change-c1',
  auditGate: { maxHeartbeatAgeMs: 3_600_000, maxBacklogAgeMs: 3_600_000 },
  delegationTrust: { holds: async () => holds },
});

describe('a reconcile pass of an executor whose delegation key is untrusted (ADR 0767)', () => {
  it('leaves an approved remediation approved and sends nothing; a trusted pass carries it out once', async () => {
    const orderId = await h.newOrder(5_000_000);
    const step = await seedStep(h.db, { tool: 'issue_refund', orderId, amountCents: 2_500, opStatus: 'succeeded' });
    await pass();
    const item = await liveItem(`op:${step.key}`);
    const t = await approvedRemediation(item.id, 'replay');

    const summary = await processReconcile({ release: 'rel-1', trigger: 'manual' }, deps(true));
    expect(summary).toContain('remediations held (delegation key untrusted)');
    expect(await h.requests(orderId)).toEqual([]);
    // Not claimed: no operation reserved under the remediation's key.
    expect(await h.db.selectFrom('operations').select('key').where('key', '=', t.operationKey).executeTakeFirst()).toBeUndefined();
    expect((await liveItem(item.subject)).approval_id).toBe(t.approvalId);

    // Control: the same pass with a trusted key executes it, once.
    expect(await processReconcile({ release: 'rel-1', trigger: 'manual' }, deps(false))).toContain('1 remediation(s) executed');
    expect((await h.refunds(orderId)).map((r) => [r.idempotencyKey, r.amountCents])).toEqual([[step.key, 2_500]]);
    expect(await op(t.operationKey)).toMatchObject({ status: 'succeeded' });
  });
});
