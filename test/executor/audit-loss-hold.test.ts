import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'kysely';
import { auditLossReadyCheck, evaluateMonitors } from '@gatehouse/audit';
import { acknowledgeAuditLoss, NoAuditLossHeld } from '@gatehouse/operations';
import { appendWitness, auditLossHeld } from '@gatehouse/ledger';
import { createAction } from '@gatehouse/testing';
import type { ExecutionJob } from '@gatehouse/contracts';
import { processExecution } from '@gatehouse/executor';
import { AUDIT_HMAC_KEY, auditEvents, EXECUTIONS_QUEUE, startHarness, type Harness } from './support/harness.ts';

// ADR 0795 (item 3 of ADR 0775): the audit chain shorter than its witness — a witnessed anchor
// beyond the head, the ledger lost audit rows already witnessed outside it (a lossy promote) —
// holds consequential steps until an operator acknowledges the loss. Reads go on; the held run
// pauses with a next step and, once acknowledged, its step is re-enqueued and runs exactly once.

let h: Harness;
let dir: string;
beforeAll(async () => {
  h = await startHarness();
  dir = mkdtempSync(join(tmpdir(), 'gh-audit-loss-'));
});
afterAll(async () => {
  await h?.close();
  rmSync(dir, { recursive: true, force: true });
});

const cfg = (witnessPath: string) => ({ autoApproveLimitCents: 5000, maxFailedUnknownPerHour: 1000, witnessPath });

describe('executor: the audit chain shorter than its witness holds consequential steps (ADR 0795)', () => {
  it('held with zero downstream calls while reads go on; after the acknowledgement the held refund runs exactly once', async () => {
    // The chain's head is below an anchor the witness kept outside Postgres: a lost tail.
    const head = Number((await sql<{ n: string }>`select count(*) as n from audit_log`.execute(h.db)).rows[0]!.n);
    const witness = join(dir, 'anchors.jsonl');
    appendWitness(witness, { seq: head + 3, hash: 'a'.repeat(64), signature: 'c2ln', at: new Date().toISOString() });
    const alerts = await evaluateMonitors(h.db, cfg(witness));
    expect(alerts.find((a) => a.monitor === 'audit_gap')?.examples[0]).toMatch(/truncated/);
    expect(await auditLossHeld(h.db)).toMatch(new RegExp(`seq ${head + 3}`));
    // Visible: the audit service is not ready, for an operator, naming the command.
    const ready = auditLossReadyCheck(h.db);
    await expect(ready()).rejects.toThrow(/gatehouse audit acknowledge-loss/);

    const orderId = await h.newOrder();
    const refund = await createAction(h.db, { orderId, amountCents: 6400 });
    const deps = h.deps();
    expect(await processExecution(refund.job, deps)).toBe('held:audit_loss');
    expect(await h.requests(orderId)).toHaveLength(0);
    const paused = await h.workflow(refund.workflowId);
    expect(paused.state).toBe('paused');
    expect(paused.next_step).toMatch(/gatehouse audit acknowledge-loss/);
    expect((await h.approval(refund.approvalId)).status).toBe('approved');
    expect(await auditEvents(h.db, 'run.paused', refund.workflowId)).toEqual([expect.objectContaining({ outcome: 'audit_loss' })]);
    // A redelivery is held again, still without a call.
    expect(await processExecution(refund.job, deps)).toBe('held:audit_loss');
    expect(await h.requests(orderId)).toHaveLength(0);

    // Reads go on.
    const readOrder = await h.newOrder();
    const read = await createAction(h.db, { tool: 'lookup_order', orderId: readOrder });
    expect(await processExecution(read.job, deps)).toBe('succeeded');
    expect((await h.workflow(read.workflowId)).state).not.toBe('paused');

    // A monitor pass again does not lift it; the operator's acknowledgement does.
    await evaluateMonitors(h.db, cfg(witness));
    expect(await auditLossHeld(h.db)).not.toBeNull();
    const ack = await acknowledgeAuditLoss(h.db, { operator: 'ops-gus', reason: 'promote lost 7 s; reconciled', hmacKey: AUDIT_HMAC_KEY });
    expect(ack.witnessedSeq).toBe(head + 3);
    expect(await auditLossHeld(h.db)).toBeNull();
    await expect(ready()).resolves.toBeUndefined();
    expect(await auditEvents(h.db, 'audit.loss_held', null)).toHaveLength(1);
    expect(await auditEvents(h.db, 'audit.loss_acknowledged', null)).toEqual([
      expect.objectContaining({ outcome: expect.stringMatching(new RegExp(`^witnessed:${head + 3};released:1;reason:promote lost`)) }),
    ]);
    const mine = ack.rows.filter((r) => (r.payload as ExecutionJob).actionId === refund.actionId);
    expect(mine).toHaveLength(1);
    expect((await h.workflow(refund.workflowId)).state).toBe('executing');
    expect(await auditEvents(h.db, 'run.resumed', refund.workflowId)).toEqual([
      expect.objectContaining({ outcome: 'audit_loss_acknowledged' }),
    ]);
    await h.relay.publish(ack.rows);
    const job = await h.queues.get(EXECUTIONS_QUEUE).getJob(mine[0]!.job_id);
    expect(await processExecution(job!.data as ExecutionJob, deps)).toBe('succeeded');
    expect(await processExecution(job!.data as ExecutionJob, deps)).toBe('replay:succeeded');
    expect(await processExecution(refund.job, deps)).toBe('replay:succeeded');
    expect(await h.refunds(orderId)).toHaveLength(1);
    expect((await h.requests(orderId)).filter((r) => r.method === 'POST')).toHaveLength(1);
    expect((await h.approval(refund.approvalId)).status).toBe('used');

    // The same loss, still witnessed, does not hold again; acknowledging with nothing held is refused.
    await evaluateMonitors(h.db, cfg(witness));
    expect(await auditLossHeld(h.db)).toBeNull();
    await expect(acknowledgeAuditLoss(h.db, { operator: 'ops-gus', reason: 'again', hmacKey: AUDIT_HMAC_KEY })).rejects.toThrow(
      NoAuditLossHeld,
    );
  });
});
