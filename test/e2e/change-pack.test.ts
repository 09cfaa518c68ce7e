import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import {
  startHuntStack,
  fixtures,
  fc,
  msg,
  submit,
  waitFor,
  settled,
  summary,
  getApproval,
  decide,
  refunds,
  modelRequests,
  stagingRequests,
  call,
  type HuntStack,
} from '../hard-cases/helpers.ts';

/**
 * The change pack end to end (docs/product/users-and-tools.md#change-pack): state-gated tools, a local draft plan, and a schedule
 * that only a change owner's exact, single-use approval (≤ 600 s) lets reach the change service.
 */
let s: HuntStack;
beforeAll(async () => {
  s = await startHuntStack();
});
afterAll(async () => {
  await s?.close();
});

/** Operations the staging change service holds for `workflowId`: under the operation keys of its actions. */
async function changeOperations(workflowId: string): Promise<Array<Record<string, unknown>>> {
  const r = await sql<
    Record<string, unknown>
  >`select * from staging.change_operations where operation_key in (select operation_key from actions where workflow_id = ${workflowId})`.execute(
    s.db.db,
  );
  return r.rows;
}

describe('change pack', () => {
  it('C-1: lookup → prepare → schedule awaits a change owner; only own-kim may approve; one operation at the change service', async () => {
    const { token, workflowId } = await submit(
      s,
      'eng-lou',
      'C-1',
      'Please schedule change CHG-101 in the next maintenance window.',
      'act',
      'change',
    );
    const v = await waitFor(s, token, workflowId, (x) => x.pendingApprovals.length === 1 || settled(x));
    console.log('C-1 pending', JSON.stringify(summary(v)));
    expect(v.state).toBe('awaiting_approval');
    const tools = v.actions.map((a) => `${a.tool}:${a.decision}:${a.ruleId}:${a.status}`);
    expect(tools).toEqual([
      'lookup_change:ALLOW:ALL:succeeded',
      'prepare_change:ALLOW:ALL:succeeded',
      'schedule_change:REQUIRE_APPROVAL:C5:pending_approval',
    ]);
    expect(v.actions.every((a) => a.policyRevision === 'change-c1')).toBe(true);

    // The model was offered tools by state: lookup on receipt, lookup+prepare while
    // investigating, only schedule once a plan awaits approval — never a support tool.
    const seen = await modelRequests(s, 'C-1');
    expect(seen.requests.slice(0, 3).map((r) => [...r.tools].sort().join(','))).toEqual([
      'lookup_change',
      'lookup_change,prepare_change',
      'schedule_change',
    ]);

    // The plan is a local draft; nothing reached the change service yet.
    const plan = await s.db.db.selectFrom('change_plans').selectAll().where('workflow_id', '=', workflowId).executeTakeFirstOrThrow();
    expect(plan).toMatchObject({ change_id: 'CHG-101', window: 'next-maintenance-window', note: null, tenant: 'quillfeather' });
    expect(plan.id).toMatch(/^plan_[a-z0-9]{16}$/);
    expect(v.actions[2]!.arguments).toEqual({ planId: plan.id, window: 'next-maintenance-window', note: null });
    expect(await changeOperations(workflowId)).toEqual([]);

    const p = v.pendingApprovals[0]!;
    const shown = await getApproval(s, 'own-kim', p.approvalId);
    expect(shown.status).toBe(200);
    expect(shown.body).toMatchObject({
      tool: 'schedule_change',
      target: plan.id,
      arguments: { planId: plan.id, window: 'next-maintenance-window', note: null },
      orderFacts: { changeId: 'CHG-101', environment: 'staging', effect: 'remote-write', rollback: 'cancel-before-start', singleUse: true },
      requester: 'eng-lou',
      tenant: 'quillfeather',
      approverRole: 'change_owner',
      singleUse: true,
      policyRevision: 'change-c1',
      canDecide: true,
    });
    const ttl = (Date.parse(String(shown.body.expiresAt)) - Date.now()) / 1000;
    expect(ttl).toBeGreaterThan(500);
    expect(ttl).toBeLessThanOrEqual(600);

    const body = { decision: 'approve', actionVersion: p.actionVersion, actionDigest: p.actionDigest };
    const refusals: Record<string, string> = {};
    for (const who of ['eng-lou', 'eng-max', 'lead-eli', 'rep-ana']) {
      const r = await decide(s, who, p.approvalId, body);
      refusals[who] = `${r.status} ${String((r.body.error as { reason?: string } | undefined)?.reason)}`;
    }
    expect(refusals).toEqual({
      'eng-lou': '403 requester_cannot_approve',
      'eng-max': '403 not_a_change_owner',
      'lead-eli': '403 not_a_change_owner',
      'rep-ana': '403 not_a_change_owner',
    });
    expect(await changeOperations(workflowId)).toEqual([]);

    const ok = await decide(s, 'own-kim', p.approvalId, body);
    expect(ok.status).toBe(200);
    const done = await waitFor(s, token, workflowId, settled);
    console.log('C-1 done', JSON.stringify(summary(done)));
    expect(done.state).toBe('completed');
    const ops = await changeOperations(workflowId);
    expect(ops).toHaveLength(1);
    expect(ops[0]).toMatchObject({ plan_id: plan.id, change_id: 'CHG-101', window: 'next-maintenance-window', requester: 'eng-lou' });
    // Read-back by operation key (docs/product/public-contract.md#staging-read-back) and the approval consumed once.
    const readBack = await call('GET', `${s.url('staging')}/changes/operations/${encodeURIComponent(String(ops[0]!.operation_key))}`, null);
    expect(readBack.status).toBe(200);
    const approval = await s.db.db
      .selectFrom('approvals')
      .select(['status', 'approver'])
      .where('id', '=', p.approvalId)
      .executeTakeFirstOrThrow();
    expect(approval).toEqual({ status: 'used', approver: 'own-kim' });
    // Sent again by its approver (a lost answer): replayed, nothing recorded (ADR 0726); the other decision is refused.
    const again = await decide(s, 'own-kim', p.approvalId, body);
    expect(again).toMatchObject({ status: 200, body: { status: 'approved', replayed: true } });
    expect((await decide(s, 'own-kim', p.approvalId, { ...body, decision: 'deny' })).status).toBe(410);
    expect(await changeOperations(workflowId)).toHaveLength(1);
  });

  it('denies before any downstream call: schedule outside awaiting_approval, a support tool, another tenant, a missing scope', async () => {
    // Scripted model: schedule on receipt (wrong state, unknown plan) and a refund (other pack).
    await fixtures(s, 'C-gate', [
      fc(
        ['schedule_change', { planId: 'plan_0123456789abcdef', window: 'manual-window', note: null }],
        ['issue_refund', { orderId: 'O-1002', amount: '10.00', reason: 'x' }],
      ),
      msg(),
    ]);
    const gate = await submit(s, 'eng-lou', 'C-gate', 'do what you can', 'act', 'change');
    const g = await waitFor(s, gate.token, gate.workflowId, settled);
    console.log('C-gate', JSON.stringify(summary(g)));
    expect(g.actions.map((a) => `${a.tool}:${a.decision}:${a.ruleId}`).sort()).toEqual(['issue_refund:DENY:C1', 'schedule_change:DENY:C1']);
    expect(await changeOperations(gate.workflowId)).toEqual([]);
    expect(await refunds(s, 'O-1002')).toEqual([]);

    // Another tenant's change: denied at lookup (C2), nothing read for the model, nothing scheduled.
    const other = await submit(s, 'eng-lou', 'C-tenant', 'Please schedule change CHG-201 in the manual window.', 'act', 'change');
    const o = await waitFor(s, other.token, other.workflowId, settled);
    expect(o.actions.map((a) => `${a.tool}:${a.decision}:${a.ruleId}`)).toContain('lookup_change:DENY:C2');
    expect(o.actions.every((a) => a.decision === 'DENY')).toBe(true);
    expect(await changeOperations(other.workflowId)).toEqual([]);

    // eng-max may look up and prepare but has not delegated change:schedule (C1).
    const max = await submit(s, 'eng-max', 'C-scope', 'Please schedule change CHG-102 in the manual window.', 'act', 'change');
    const m = await waitFor(s, max.token, max.workflowId, settled);
    console.log('C-scope', JSON.stringify(summary(m)));
    expect(m.actions.map((a) => `${a.tool}:${a.decision}:${a.ruleId}`)).toEqual([
      'lookup_change:ALLOW:ALL',
      'prepare_change:ALLOW:ALL',
      'schedule_change:DENY:C1',
    ]);
    expect(await changeOperations(max.workflowId)).toEqual([]);
    expect((await stagingRequests(s, '?target=changes')).filter((r) => r.method === 'POST')).toHaveLength(1); // C-1's only
  });

  it('investigate mode offers only lookup_change; an approval past its 600 s age is refused and the run stops', async () => {
    const inv = await submit(s, 'eng-lou', 'C-inv', 'Please schedule change CHG-102 in the manual window.', 'investigate', 'change');
    const i = await waitFor(s, inv.token, inv.workflowId, settled);
    expect(i.state).toBe('completed');
    expect(i.actions.map((a) => a.tool)).toEqual(['lookup_change']);
    const offered = (await modelRequests(s, 'C-inv')).requests.flatMap((r) => r.tools);
    expect(new Set(offered)).toEqual(new Set(['lookup_change']));

    const { token, workflowId } = await submit(
      s,
      'eng-lou',
      'C-expire',
      'Please schedule change CHG-102 in the manual window.',
      'act',
      'change',
    );
    const v = await waitFor(s, token, workflowId, (x) => x.pendingApprovals.length === 1 || settled(x));
    const p = v.pendingApprovals[0]!;
    // Age the approval past its lifetime (the clock of a 600 s wait, without waiting).
    await s.db.db
      .updateTable('approvals')
      .set({ expires_at: new Date(Date.now() - 1000) })
      .where('id', '=', p.approvalId)
      .execute();
    const late = await decide(s, 'own-kim', p.approvalId, {
      decision: 'approve',
      actionVersion: p.actionVersion,
      actionDigest: p.actionDigest,
    });
    expect(late.status).toBe(410);
    const stopped = await waitFor(s, token, workflowId, settled);
    expect(stopped.state).toBe('stopped');
    expect(stopped.stopReason).toBe('approval_expired');
    expect(await changeOperations(workflowId)).toEqual([]);
  });
});
