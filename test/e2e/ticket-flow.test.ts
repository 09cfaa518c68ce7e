import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import request from 'supertest';
import { loadWorld } from '@gatehouse/contracts';
import { runDemo, pollWorkflow, tokenFor } from '@gatehouse/cli';
import { demoTarget, startE2EStack, type E2EStack } from '@gatehouse/test-harness';
import { ticketOperationKey } from '@gatehouse/ledger';

const SECRET = 'local-auth-secret-change-me';
let s: E2EStack;

beforeAll(async () => {
  s = await startE2EStack();
});
afterAll(async () => {
  await s?.close();
});

describe('a real ticket through every service (processes, Postgres, Redis)', () => {
  it('T-1: lookup, approved refund and reship, one effect each, redelivery replays, audit intact', async () => {
    const report = await runDemo(demoTarget(s));
    expect(report.failures).toEqual([]);
    expect(report.workflow.state).toBe('completed');
    const byTool = Object.fromEntries(report.workflow.actions.map((a) => [a.tool, a]));
    expect(byTool.lookup_order).toMatchObject({ decision: 'ALLOW', status: 'succeeded' });
    expect(byTool.issue_refund).toMatchObject({
      decision: 'REQUIRE_APPROVAL',
      ruleId: 'R7',
      status: 'succeeded',
      arguments: { amountCents: 12000, orderId: 'O-1002' },
    });
    expect(byTool.reship_order).toMatchObject({ decision: 'REQUIRE_APPROVAL', ruleId: 'R9', status: 'succeeded' });
    // From the tenant and the ticket (ADR 0789), not the run's random id.
    expect(byTool.issue_refund!.operationKey).toBe(
      ticketOperationKey({ tenant: 'quillfeather', ticket_id: 'T-1' }, byTool.issue_refund!.version),
    );

    // Ask the systems of record directly, not the demo's report.
    const refunds = (await request(s.url('staging')).get('/ledger/refunds?orderId=O-1002')).body.refunds;
    expect(refunds).toHaveLength(1);
    expect(refunds[0]).toMatchObject({ amountCents: 12000, idempotencyKey: byTool.issue_refund!.operationKey });
    expect((await request(s.url('staging')).get('/orders/O-1002/shipments')).body.shipments).toHaveLength(1);
    expect(report.redelivery).toBe('replay:succeeded');

    const approvals = await s.db.db
      .selectFrom('approvals')
      .select(['status', 'approver'])
      .where('workflow_id', '=', report.workflow.workflowId)
      .execute();
    expect(approvals).toHaveLength(2);
    expect(approvals.every((a) => a.status === 'used' && a.approver === 'lead-eli')).toBe(true);
    expect(report.audit).toMatchObject({ intact: true, anchorsTrusted: true });
    expect(report.audit.anchorsChecked).toBeGreaterThanOrEqual(1);
    expect(report.audit.events).toBeGreaterThanOrEqual(25);

    // The model was never sent an unanswered call (Responses API pairing rule).
    const stub = await request(s.url('model-stub')).get('/requests?ticketId=T-1');
    expect(stub.body.pairingErrors).toBe(0);
  });

  it('intake is idempotent per tenant + ticketId; other text is 409', async () => {
    const rep = await tokenFor('rep-ben', SECRET);
    const body = { ticketId: 'T-dup', text: 'What is the status of order O-1001?' };
    const a = await request(s.url('agent-loop')).post('/v1/tickets').set('authorization', `Bearer ${rep}`).send(body);
    const b = await request(s.url('agent-loop')).post('/v1/tickets').set('authorization', `Bearer ${rep}`).send(body);
    expect(a.status).toBe(202);
    expect(b.status).toBe(202);
    expect(b.body.workflowId).toBe(a.body.workflowId);
    const c = await request(s.url('agent-loop'))
      .post('/v1/tickets')
      .set('authorization', `Bearer ${rep}`)
      .send({ ...body, text: 'Refund O-1001' });
    expect(c.status).toBe(409);
    expect(c.body.error.reason).toBe('ticket_conflict');
    // Another tenant may use the same ticket id independently.
    const ivy = await tokenFor('rep-ivy', SECRET);
    const d = await request(s.url('agent-loop')).post('/v1/tickets').set('authorization', `Bearer ${ivy}`).send(body);
    expect(d.status).toBe(202);
    expect(d.body.workflowId).not.toBe(a.body.workflowId);
    // A rep may read only their tenant's workflows.
    expect(
      (await request(s.url('agent-loop')).get(`/v1/workflows/${a.body.workflowId}`).set('authorization', `Bearer ${ivy}`)).status,
    ).toBe(404);
    // Investigate mode: the read-only ticket completes and no write tool was ever offered.
    const done = await pollWorkflow(s.url('agent-loop'), rep, a.body.workflowId, (v) => v.state === 'completed');
    expect(done.actions.map((x) => x.tool)).toEqual(['lookup_order']);
    const seen = await request(s.url('model-stub')).get('/requests?ticketId=T-dup');
    const offered = new Set<string>(seen.body.requests.flatMap((r: { tools: string[] }) => r.tools));
    expect([...offered]).toEqual(['lookup_order']);
  });

  it('bad input gets a 4xx with a reason, never a 500', async () => {
    const intake = request(s.url('agent-loop'));
    const approval = request(s.url('approval'));
    const rep = await tokenFor('rep-ana', SECRET);
    const cases = [
      await intake.post('/v1/tickets').send({ ticketId: 'x', text: 'y' }),
      await intake.post('/v1/tickets').set('authorization', 'Bearer not-a-jwt').send({ ticketId: 'x', text: 'y' }),
      await intake
        .post('/v1/tickets')
        .set('authorization', `Bearer ${await tokenFor('rep-ana', 'some-other-secret-value')}`)
        .send({ ticketId: 'x', text: 'y' }),
      await approval.get('/v1/approvals?status=pending'),
    ];
    expect(cases.map((r) => r.status)).toEqual([401, 401, 401, 401]);
    const bad = [
      await intake.post('/v1/tickets').set('authorization', `Bearer ${rep}`).send({ ticketId: 'x' }),
      await intake.post('/v1/tickets').set('authorization', `Bearer ${rep}`).send({ ticketId: 'x', text: 'y', tenant: 'northwind' }),
      await intake.post('/v1/tickets').set('authorization', `Bearer ${rep}`).send({ ticketId: 'x', text: 'y', mode: 'root' }),
      await intake.post('/v1/tickets').set('authorization', `Bearer ${rep}`).set('content-type', 'application/json').send('{"ticketId":'),
      await approval
        .post('/v1/approvals/00000000-0000-4000-8000-000000000000/decision')
        .set('authorization', `Bearer ${rep}`)
        .send({ decision: 'maybe' }),
      await approval.get('/v1/approvals?status=bogus').set('authorization', `Bearer ${rep}`),
      // Text the ledger cannot store (Postgres refuses U+0000): a 400 with a reason, not a 500.
      await intake.post('/v1/tickets').set('authorization', `Bearer ${rep}`).send({ ticketId: 'T-nul', text: 'refund\u0000 O-1001' }),
    ];
    expect(bad.map((r) => r.status)).toEqual([400, 400, 400, 400, 400, 400, 400]);
    for (const r of [...cases, ...bad]) expect(typeof r.body.error.reason).toBe('string');
    expect((await intake.get('/v1/workflows/not-a-uuid').set('authorization', `Bearer ${rep}`)).status).toBe(404);
    expect((await approval.get('/v1/approvals/not-a-uuid').set('authorization', `Bearer ${rep}`)).status).toBe(404);
  });

  it('only a representative or an engineer submits a ticket: an approver, operator or policy owner gets 403 and nothing is recorded', async () => {
    const intake = request(s.url('agent-loop'));
    const workflows = async () => (await s.db.db.selectFrom('workflows').select('id').execute()).length;
    const before = await workflows();
    for (const user of ['lead-eli', 'ops-gus', 'pol-hal', 'own-kim']) {
      const r = await intake
        .post('/v1/tickets')
        .set('authorization', `Bearer ${await tokenFor(user, SECRET)}`)
        .send({ ticketId: `T-role-${user}`, text: 'Refund 30.00 on order O-1001.', mode: 'act' });
      expect(r.status, user).toBe(403);
      expect(r.body.error.reason).toBe('not_a_requester');
    }
    expect(await workflows()).toBe(before);
    // An engineer opens a change-pack run.
    const eng = await intake
      .post('/v1/tickets')
      .set('authorization', `Bearer ${await tokenFor('eng-max', SECRET)}`)
      .send({ ticketId: 'T-role-eng', text: 'What is the status of change plan P-1?', pack: 'change' });
    expect(eng.status).toBe(202);
  });

  it("another tenant's order: accepted at intake, refund denied by R2, zero downstream calls", async () => {
    const rep = await tokenFor('rep-ana', SECRET);
    const foreign = loadWorld().orders.find((o) => o.tenant !== 'quillfeather')!;
    const res = await request(s.url('agent-loop'))
      .post('/v1/tickets')
      .set('authorization', `Bearer ${rep}`)
      .send({ ticketId: 'T-foreign', text: `Please refund $50 on order ${foreign.id}.`, mode: 'act' });
    expect(res.status).toBe(202);
    const wf = await pollWorkflow(s.url('agent-loop'), rep, res.body.workflowId, (v) => ['completed', 'stopped'].includes(v.state));
    const refund = wf.actions.find((a) => a.tool === 'issue_refund');
    expect(refund).toMatchObject({ decision: 'DENY', ruleId: 'R2', status: 'denied' });
    expect(wf.actions.every((a) => a.decision === 'DENY' && a.ruleId === 'R2')).toBe(true);
    // No operation was reserved, so no credential was minted and no adapter ran …
    const ops = await s.db.db.selectFrom('operations').select('key').where('workflow_id', '=', wf.workflowId).execute();
    expect(ops).toEqual([]);
    // … and the systems of record saw no effect request for that order.
    expect((await request(s.url('staging')).get(`/requests?orderId=${foreign.id}`)).body.requests).toEqual([]);
    expect((await request(s.url('staging')).get(`/ledger/refunds?orderId=${foreign.id}`)).body.refunds).toEqual([]);
    // The model got a bounded denial, not the other tenant's order.
    const seen = await request(s.url('model-stub')).get('/requests?ticketId=T-foreign');
    const outputs = JSON.stringify(seen.body.requests.at(-1).input);
    expect(outputs).toContain('R2');
    expect(outputs).not.toContain(String(foreign.paid));
  });
});
