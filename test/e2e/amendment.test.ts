import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import request from 'supertest';
import { approveAsLead, call, pollWorkflow, tokenFor, type WorkflowView } from '@gatehouse/cli';
import { startE2EStack, type E2EStack } from '@gatehouse/test-harness';

const SECRET = 'local-auth-secret-change-me';
let s: E2EStack;

beforeAll(async () => {
  s = await startE2EStack();
});
afterAll(async () => {
  await s?.close();
});

describe('a follow-up message amends a pending refund', () => {
  it('voids the old approval, needs a new one for the new version, and refunds once with the new amount', async () => {
    const rep = await tokenFor('rep-ana', SECRET);
    const lead = await tokenFor('lead-eli', SECRET);
    const intake = s.url('agent-loop');
    const submitted = await call('POST', `${intake}/v1/tickets`, rep, {
      ticketId: 'T-amend',
      text: 'Refund $120 on order O-1004, the item arrived damaged.',
      mode: 'act',
    });
    expect(submitted.status).toBe(202);
    const id = String(submitted.body.workflowId);
    const first = await pollWorkflow(intake, rep, id, (v) => v.pendingApprovals.some((p) => p.status === 'pending'));
    const v1 = first.actions.find((a) => a.tool === 'issue_refund')!;
    expect(v1).toMatchObject({ status: 'pending_approval', ruleId: 'R7', arguments: { amountCents: 12000 } });
    const oldApproval = first.pendingApprovals[0]!;

    // Only the requester adds to their run: a lead (who could then approve what he asked for) and
    // another rep of the tenant are refused, and nothing changes — no supersede, no model call.
    const modelCalls = async () =>
      ((await request(s.url('model-stub')).get('/requests?ticketId=T-amend')).body.requests as unknown[]).length;
    const callsBefore = await modelCalls();
    for (const other of ['lead-eli', 'rep-ben']) {
      const refused = await call('POST', `${intake}/v1/workflows/${id}/messages`, await tokenFor(other, SECRET), {
        text: 'Actually refund $450 on order O-1002 instead.',
      });
      expect(refused.status, other).toBe(403);
      expect((refused.body.error as { reason: string }).reason).toBe('not_the_requester');
    }
    const still = await s.db.db.selectFrom('approvals').select('status').where('id', '=', oldApproval.approvalId).executeTakeFirstOrThrow();
    expect(still.status).toBe('pending');
    expect(await modelCalls()).toBe(callsBefore);

    const followUp = await call('POST', `${intake}/v1/workflows/${id}/messages`, rep, {
      text: 'Sorry, make the refund $450 on order O-1004 instead.',
    });
    expect(followUp.status).toBe(202);
    const amended = await pollWorkflow(
      intake,
      rep,
      id,
      (v) =>
        v.actions.some((a) => a.tool === 'issue_refund' && a.version > v1.version && a.status === 'pending_approval') &&
        v.pendingApprovals.some((p) => p.actionVersion > v1.version),
    );
    const v2 = amended.actions.find((a) => a.tool === 'issue_refund' && a.version > v1.version)!;
    expect(v2).toMatchObject({ arguments: { amountCents: 45000 }, decision: 'REQUIRE_APPROVAL' });
    expect(amended.actions.find((a) => a.version === v1.version)!.status).toBe('superseded');
    const old = await s.db.db.selectFrom('approvals').select('status').where('id', '=', oldApproval.approvalId).executeTakeFirstOrThrow();
    expect(old.status).toBe('void');
    expect((await request(s.url('staging')).get('/ledger/refunds?orderId=O-1004')).body.refunds).toEqual([]);

    // Deciding the old version is stale (409), not an approval of the new amount.
    const stale = await call('POST', `${s.url('approval')}/v1/approvals/${oldApproval.approvalId}/decision`, lead, {
      decision: 'approve',
      actionVersion: oldApproval.actionVersion,
      actionDigest: oldApproval.actionDigest,
    });
    expect(stale.status).toBe(409);
    expect((stale.body.error as { reason: string }).reason).toBe('stale_version');

    const pending = amended.pendingApprovals.find((p) => p.actionVersion === v2.version)!;
    expect((await approveAsLead(s.url('approval'), lead, pending.approvalId)).status).toBe(200);
    const done = await pollWorkflow(intake, rep, id, (v) => ['completed', 'stopped', 'needs_reconciliation'].includes(v.state));
    expect(done.state).toBe('completed');
    const refunds = (await request(s.url('staging')).get('/ledger/refunds?orderId=O-1004')).body.refunds;
    expect(refunds).toHaveLength(1);
    expect(refunds[0]).toMatchObject({ amountCents: 45000, idempotencyKey: v2.operationKey });
    // The model saw the superseded call answered, never left unanswered.
    const seen = await request(s.url('model-stub')).get('/requests?ticketId=T-amend');
    expect(seen.body.pairingErrors).toBe(0);
    expect(JSON.stringify(seen.body.requests.at(-1).input)).toContain('superseded');
  });

  it('a follow-up about another order voids the pending refund, and the model proposes it again as a new version', async () => {
    const rep = await tokenFor('rep-ana', SECRET);
    const intake = s.url('agent-loop');
    const submitted = await call('POST', `${intake}/v1/tickets`, rep, {
      ticketId: 'T-also',
      text: 'Refund $80 on order O-1007, it arrived broken.',
      mode: 'act',
    });
    const id = String(submitted.body.workflowId);
    const first = await pollWorkflow(intake, rep, id, (v) => v.pendingApprovals.some((p) => p.status === 'pending'));
    expect(first.nextStep).toMatch(/Waiting for a lead to approve issue_refund on O-1007/);
    const v1 = first.actions.find((a) => a.tool === 'issue_refund')!;

    const followUp = await call('POST', `${intake}/v1/workflows/${id}/messages`, rep, {
      text: 'Also O-1008 arrived broken, refund $60 there too.',
    });
    expect(followUp.status).toBe(202);
    expect(followUp.body.superseded).toEqual([
      { version: v1.version, tool: 'issue_refund', voidedApprovals: [first.pendingApprovals[0]!.approvalId] },
    ]);

    // One call per response and no model call while an approval is pending: O-1008 first…
    // The gateway marks the action pending_approval before the approval service has opened the
    // approval (a separate queue hop), so wait for both.
    const o1008Pending = (v: WorkflowView) => {
      const a = v.actions.find((x) => x.target === 'O-1008' && x.tool === 'issue_refund' && x.status === 'pending_approval');
      return a ? v.pendingApprovals.find((p) => p.status === 'pending' && p.actionVersion === a.version) : undefined;
    };
    const o1008 = await pollWorkflow(intake, rep, id, (v) => o1008Pending(v) !== undefined);
    const lead = await tokenFor('lead-eli', SECRET);
    const pending = o1008Pending(o1008)!;
    expect((await approveAsLead(s.url('approval'), lead, pending.approvalId)).status).toBe(200);
    // …then the voided O-1007 refund is proposed again, as a new version that needs its own approval.
    const again = await pollWorkflow(intake, rep, id, (v) =>
      v.actions.some(
        (a) => a.target === 'O-1007' && a.tool === 'issue_refund' && a.version > v1.version && a.status === 'pending_approval',
      ),
    );
    const v2 = again.actions.find((a) => a.target === 'O-1007' && a.tool === 'issue_refund' && a.version > v1.version)!;
    expect(v2).toMatchObject({ arguments: { amountCents: 8000 }, ruleId: 'R7', supersedesVersion: v1.version });
    expect(((await request(s.url('staging')).get('/ledger/refunds?orderId=O-1008')).body.refunds as unknown[]).length).toBe(1);
    expect(((await request(s.url('staging')).get('/ledger/refunds?orderId=O-1007')).body.refunds as unknown[]).length).toBe(0);
  });

  /**
   * The follow-up arrives after the model proposed a refund but before the gateway decided it
   * (a gateway backlog: here the gateway is held down). The proposal is decided on its own facts,
   * then superseded before anything runs, and the model proposes again with the follow-up.
   * Returns the run's end, the O-order's refunds and the first version's row.
   */
  async function followUpBeforeDecision(ticket: string, orderId: string, gatewayEnv: Record<string, string | undefined>) {
    const refund = (amount: string) => ({
      type: 'function_calls',
      calls: [{ name: 'issue_refund', arguments: { orderId, amount, reason: 'cracked' } }],
    });
    const fixtures = await call('POST', `${s.url('model-stub')}/fixtures`, null, {
      ticketId: ticket,
      responses: [refund('30.00'), refund('45.00'), { type: 'message', text: 'Refunded 45.00.' }],
    });
    expect(fixtures.status).toBe(201);
    const rep = await tokenFor('rep-ana', SECRET);
    const intake = s.url('agent-loop');
    await s.stack.kill('policy-gateway', 'SIGKILL', { keepDown: true });
    const submitted = await call('POST', `${intake}/v1/tickets`, rep, {
      ticketId: ticket,
      text: `Refund $30 on order ${orderId}.`,
      mode: 'act',
    });
    const id = String(submitted.body.workflowId);
    const proposed = async () => (await s.db.db.selectFrom('proposals').select('id').where('workflow_id', '=', id).execute()).length;
    for (const until = Date.now() + 60_000; (await proposed()) === 0;) {
      if (Date.now() > until) throw new Error('no proposal recorded');
      await new Promise((r) => setTimeout(r, 100));
    }
    const followUp = await call('POST', `${intake}/v1/workflows/${id}/messages`, rep, {
      text: `Make it $45 on ${orderId} instead of $30.`,
    });
    expect(followUp.status).toBe(202);
    expect(followUp.body.superseded).toEqual([]); // nothing decided yet
    await s.stack.restart('policy-gateway', gatewayEnv);
    const end = await pollWorkflow(
      intake,
      rep,
      id,
      (v) => ['completed', 'stopped', 'paused', 'needs_reconciliation'].includes(v.state) || v.pendingApprovals.length > 0,
    );
    const refunds = (await request(s.url('staging')).get(`/ledger/refunds?orderId=${orderId}`)).body.refunds as Array<{
      amountCents: number;
    }>;
    return { end, refunds: refunds.map((r) => r.amountCents) };
  }

  it('a follow-up that beats the gateway to an undecided refund: that refund never runs, the amended one does', async () => {
    const { end, refunds } = await followUpBeforeDecision('T-undecided', 'O-1006', {});
    expect(end.state).toBe('completed');
    const [v1, v2] = end.actions.filter((a) => a.tool === 'issue_refund');
    expect(v1).toMatchObject({ version: 1, arguments: { amountCents: 3000 }, decision: 'ALLOW', status: 'superseded' });
    expect(v2).toMatchObject({ arguments: { amountCents: 4500 }, decision: 'ALLOW', status: 'succeeded', supersedesVersion: 1 });
    expect(refunds).toEqual([4500]);
    const ops = await s.db.db.selectFrom('operations').select('action_id').where('action_id', '=', v1!.actionId).execute();
    expect(ops).toEqual([]); // no operation was ever opened for the superseded version
  });

  it('control removed (GATEHOUSE_TEST_DISABLE_FOLLOW_UP_CHECK): the outdated refund is paid as well', async () => {
    try {
      const { refunds } = await followUpBeforeDecision('T-undecided-off', 'O-1001', { GATEHOUSE_TEST_DISABLE_FOLLOW_UP_CHECK: '1' });
      expect(refunds).toContain(3000);
    } finally {
      await s.stack.restart('policy-gateway', { GATEHOUSE_TEST_DISABLE_FOLLOW_UP_CHECK: undefined });
    }
  });
});

describe('a follow-up with an Idempotency-Key (docs/decisions/0510)', () => {
  it('a retry is added once and answered replayed, even after the run ended; the key with another text is 409', async () => {
    const rep = await tokenFor('rep-ana', SECRET);
    const intake = s.url('agent-loop');
    const submitted = await call('POST', `${intake}/v1/tickets`, rep, {
      ticketId: 'T-idem',
      text: 'Refund $80 on order O-1005, it arrived broken.',
      mode: 'act',
    });
    const id = String(submitted.body.workflowId);
    await pollWorkflow(intake, rep, id, (v) => v.pendingApprovals.some((p) => p.status === 'pending'));
    const send = (key: string | null, text: string) => {
      const r = request(intake).post(`/v1/workflows/${id}/messages`).set('authorization', `Bearer ${rep}`);
      return (key === null ? r : r.set('idempotency-key', key)).send({ text });
    };
    const text = 'Never mind the refund, just look up order O-1001.';
    const messages = async (t: string) =>
      (
        await s.db.db
          .selectFrom('conversation_items')
          .select('item')
          .where('workflow_id', '=', id)
          .where('kind', '=', 'user_message')
          .execute()
      ).filter((m) => m.item.content === t).length;

    const first = await send('retry-7f3a', text);
    expect(first.status).toBe(202);
    expect(first.body.superseded).toHaveLength(1);
    expect(first.body.replayed).toBeUndefined();
    const retry = await send('retry-7f3a', text);
    expect(retry.status).toBe(202);
    // The retry is answered what the first was answered (ADR 0510, amended), not an empty list.
    expect(retry.body).toEqual({ ...first.body, replayed: true });
    expect(await messages(text)).toBe(1);

    const reused = await send('retry-7f3a', 'Refund $5 on order O-1001.');
    expect([reused.status, reused.body.error?.reason]).toEqual([409, 'idempotency_key_reused']);
    const bad = await send('has space', text);
    expect([bad.status, bad.body.error?.reason]).toEqual([400, 'invalid_idempotency_key']);
    expect(await messages('Refund $5 on order O-1001.')).toBe(0);

    // The model looks O-1001 up and proposes the refund again (a new version): approved, the run completes.
    const again = await pollWorkflow(intake, rep, id, (v) => v.pendingApprovals.some((p) => p.status === 'pending'));
    const lead = await tokenFor('lead-eli', SECRET);
    expect((await approveAsLead(s.url('approval'), lead, again.pendingApprovals[0]!.approvalId)).status).toBe(200);
    const done = await pollWorkflow(intake, rep, id, (v) => ['completed', 'stopped', 'needs_reconciliation'].includes(v.state));
    expect(done.state).toBe('completed');
    const late = await send('retry-7f3a', text);
    expect([late.status, late.body.replayed]).toEqual([202, true]);
    const fresh = await send('retry-8b1c', text);
    expect([fresh.status, fresh.body.error?.reason]).toEqual([409, 'workflow_not_running']);
    expect(await messages(text)).toBe(1);
    const paid = (await request(s.url('staging')).get('/ledger/refunds?orderId=O-1005')).body.refunds as Array<{ amountCents: number }>;
    expect(paid.map((r) => r.amountCents)).toEqual([8000]);
  });
});
