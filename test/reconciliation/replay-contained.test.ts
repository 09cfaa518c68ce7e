import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { executeRemediation } from '@gatehouse/reconciliation';
import { advanceReenable, setSwitch, writeSwitch } from '@gatehouse/operations';
import { sql } from 'kysely';
import { AUDIT_HMAC_KEY, startHarness, type Harness } from '../executor/support/harness.ts';
import { seedRefund, seedStep } from './seed.ts';
import { reconOps } from './recon-ops.ts';

// Containment holds a refund wherever it would be paid (docs/decisions/0692): a lead-approved
// `replay` of a refund the payments ledger lacks is a refund like the agent's own, so while
// `issue_refund` is switched off it is held — nothing claimed, nothing sent, its approval left
// unused — and it runs once when the tool is switched on. A reversal (an undo) is not held.
// Real remediations over a real ledger and the staging payments ledger.

let h: Harness;
beforeAll(async () => {
  h = await startHarness({ poolSize: 6 });
});
afterAll(async () => {
  await h?.close();
});

const { pass, remediation, liveItem, approvedRemediation: approve } = reconOps(() => h);
const TRIALS = 5;

/** Requests `kind` on the live item of `subject` and lets lead-eli approve it (what the approval API writes); returns its approval. */
async function approvedRemediation(subject: string, kind: 'replay' | 'reverse'): Promise<{ itemId: string; approvalId: string }> {
  const item = await liveItem(subject);
  const t = await approve(item.id, kind);
  return { itemId: item.id, approvalId: t.approvalId };
}

const approvalStatus = async (id: string) =>
  (await h.db.selectFrom('approvals').select('status').where('id', '=', id).executeTakeFirstOrThrow()).status;

describe('containment holds a remediation that pays a refund', () => {
  it('a replay approved while issue_refund is switched off is held with zero refunds, then runs once on switch on', async () => {
    const orderId = await h.newOrder(45_000);
    const step = await seedStep(h.db, { tool: 'issue_refund', orderId, amountCents: 3_000, opStatus: 'succeeded' });
    await pass();
    expect((await liveItem(`op:${step.key}`)).class).toBe('agent_done_ledger_missing');

    await setSwitch(h.db, 'issue_refund', false, 'ops-gus', AUDIT_HMAC_KEY);
    try {
      const { itemId, approvalId } = await approvedRemediation(`op:${step.key}`, 'replay');
      // Twice: the repeatable job tries it at every pass while the tool stays off.
      for (let i = 0; i < 2; i++) {
        const held = await executeRemediation(remediation(), itemId);
        // The tool as a typed field (what the CLI prints), the reason string as the audit and API carry it.
        expect(held).toMatchObject({
          state: 'retry',
          itemId,
          reason: 'tool_disabled:issue_refund',
          waitingFor: { on: 'containment', tool: 'issue_refund' },
        });
      }
      expect(await h.refunds(orderId)).toEqual([]);
      expect(await approvalStatus(approvalId)).toBe('approved');
      expect((await liveItem(`op:${step.key}`)).approval_id).toBe(approvalId);

      await setSwitch(h.db, 'issue_refund', true, 'ops-gus', AUDIT_HMAC_KEY);
      expect((await executeRemediation(remediation(), itemId)).state).toBe('resolved');
      const paid = await h.refunds(orderId);
      expect(paid.map((r) => [r.idempotencyKey, r.amountCents])).toEqual([[step.key, 3_000]]);
      expect(await approvalStatus(approvalId)).toBe('used');
    } finally {
      await setSwitch(h.db, 'issue_refund', true, 'ops-gus', AUDIT_HMAC_KEY);
    }
  });

  it(`a switch-off under way when the replay is claimed: the claim waits for it and holds the replay, zero refunds (×${TRIALS})`, async () => {
    for (let i = 0; i < TRIALS; i++) await switchOffUnderWay();
  });

  /** One trial: a switch-off holding the containment lock, uncommitted, while the replay is executed. */
  async function switchOffUnderWay(): Promise<void> {
    const orderId = await h.newOrder(45_000);
    const step = await seedStep(h.db, { tool: 'issue_refund', orderId, amountCents: 3_000, opStatus: 'succeeded' });
    await pass();
    const { itemId, approvalId } = await approvedRemediation(`op:${step.key}`, 'replay');

    // Barrier: the switch-off holds the tool's containment lock, its write not yet committed,
    // until the claim is seen waiting for that lock (or has finished without waiting).
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let locked!: () => void;
    const lockTaken = new Promise<void>((r) => (locked = r));
    const switchOff = h.db.transaction().execute(async (trx) => {
      await writeSwitch(trx, 'issue_refund', false, 'ops-gus', AUDIT_HMAC_KEY);
      locked();
      await gate;
    });
    try {
      await lockTaken;
      let settled = false;
      const run = executeRemediation(remediation(), itemId).finally(() => (settled = true));
      const until = Date.now() + 15_000;
      while (!settled && Date.now() < until) {
        const waiting = await sql<{ n: string }>`select count(*) as n from pg_locks
          where locktype = 'advisory' and not granted and database = (select oid from pg_database where datname = current_database())`.execute(
          h.db,
        );
        if (Number(waiting.rows[0]!.n) > 0) break;
        await new Promise((r) => setTimeout(r, 20));
      }
      release();
      await switchOff;
      expect(await run).toMatchObject({ state: 'retry', reason: 'tool_disabled:issue_refund' });
      expect(await h.refunds(orderId)).toEqual([]);
      expect(await approvalStatus(approvalId)).toBe('approved');
    } finally {
      release();
      await switchOff.catch(() => undefined);
      await setSwitch(h.db, 'issue_refund', true, 'ops-gus', AUDIT_HMAC_KEY);
    }
  }

  it("a staged re-enable holds the replay at read_only and runs it once the cohort admits the step's tenant", async () => {
    const orderId = await h.newOrder(45_000);
    const step = await seedStep(h.db, { tool: 'issue_refund', orderId, amountCents: 3_000, opStatus: 'succeeded' });
    await pass();
    await setSwitch(h.db, 'issue_refund', false, 'ops-gus', AUDIT_HMAC_KEY);
    const advance = (cohort?: { tenants: string[]; users: string[] }) =>
      advanceReenable(h.db, {
        tool: 'issue_refund',
        maxBound: 1,
        reason: 'incident contained',
        operator: 'ops-gus',
        hmacKey: AUDIT_HMAC_KEY,
        ...(cohort ? { cohort } : {}),
      });
    try {
      expect((await advance()).stage).toBe('read_only');
      const { itemId } = await approvedRemediation(`op:${step.key}`, 'replay');
      expect(await executeRemediation(remediation(), itemId)).toMatchObject({ state: 'retry', reason: 'tool_disabled:issue_refund' });
      expect(await h.refunds(orderId)).toEqual([]);

      expect((await advance({ tenants: ['quillfeather'], users: [] })).stage).toBe('cohort');
      expect((await executeRemediation(remediation(), itemId)).state).toBe('resolved');
      expect((await h.refunds(orderId)).map((r) => r.amountCents)).toEqual([3_000]);
    } finally {
      await setSwitch(h.db, 'issue_refund', false, 'ops-gus', AUDIT_HMAC_KEY); // ends the open stage
      await setSwitch(h.db, 'issue_refund', true, 'ops-gus', AUDIT_HMAC_KEY);
    }
  });

  it('a reversal is an undo: it runs while issue_refund is switched off', async () => {
    const orderId = await h.newOrder(45_000);
    const refundId = await seedRefund(h.db, { key: `stray-${orderId}`, orderId, amountCents: 2_500 });
    await pass();
    expect((await liveItem(`refund:${refundId}`)).class).toBe('ledger_entry_without_step');

    await setSwitch(h.db, 'issue_refund', false, 'ops-gus', AUDIT_HMAC_KEY);
    try {
      const { itemId } = await approvedRemediation(`refund:${refundId}`, 'reverse');
      expect((await executeRemediation(remediation(), itemId)).state).toBe('resolved');
    } finally {
      await setSwitch(h.db, 'issue_refund', true, 'ops-gus', AUDIT_HMAC_KEY);
    }
  });
});
