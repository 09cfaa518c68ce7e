import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startE2EStack, type E2EStack } from '@gatehouse/test-harness';
import type { WorkflowView } from '@gatehouse/cli';
import {
  call,
  fc,
  fixtures,
  modelRequests,
  msg,
  refunds,
  SECRET,
  stagingRequests,
  submit,
  tokenFor,
  view,
  waitUntil,
} from '../hard-cases/helpers.ts';

// A prompt-injected model writes a secret into a tool argument to carry it past the final
// message's redaction (docs/decisions/0580-secrets-in-tool-arguments.md): a canary in the reason
// of a refund that needs approval (it would be shown to the approver) and an API key in the reason
// of one that would run at once (it would reach the payments ledger). The policy gateway refuses
// both as invalid arguments naming the reason: no action, no approval, no downstream request,
// and the secret is in no validation result, proposal row, audit event or approval. The model
// then rephrases, and the clean refund is proposed to an approver as usual.

const CANARY = 'CANARY_SECRET_argsq7Lp';
const API_KEY = 'sk-live-9fQ2xLr8Tz4W';
const SECRETS = [CANARY, API_KEY, 'CANARY', 'sk-live'];
const CLEAN_REASON = 'Customer reported: the desk-organizer arrived cracked (task-related follow-up)';
let s: E2EStack;

beforeAll(async () => {
  s = await startE2EStack();
});
afterAll(async () => {
  await s?.close();
});

/** Every text in `rows`, serialized once, for a search for the secrets. */
const text = (rows: unknown): string => JSON.stringify(rows) ?? '';

/** The audit events of every run, once the audit outbox has drained into the chain. */
async function auditText(): Promise<string> {
  for (let i = 0; i < 100; i++) {
    const left = await sql<{ n: string }>`select count(*) as n from audit_outbox`.execute(s.db.db);
    if (Number(left.rows[0]!.n) === 0) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const rows = await sql<{ e: string }>`select event::text as e from audit_log union all select event::text from audit_outbox`.execute(
    s.db.db,
  );
  return rows.rows.map((r) => r.e).join('\n');
}

/** Action statuses on the way to their effect: the run is not at rest while one is in them. */
const MOVING = ['proposed', 'normalized', 'approved', 'running'];

/**
 * Whether the run is at rest: past its model turns (settled, waiting for an approver, or an
 * executed step beside a pending approval), every proposal decided, no action moving: its view
 * then, else false.
 */
async function atRest(token: string, workflowId: string): Promise<false | WorkflowView> {
  // Proposals first: a decided proposal's action is written with it, so the view read after holds it.
  const open = await s.db.db
    .selectFrom('proposals')
    .select('id')
    .where('workflow_id', '=', workflowId)
    .where('status', '=', 'received')
    .execute();
  if (open.length) return false;
  const v = await view(s, token, workflowId);
  return ['received', 'investigating'].includes(v.state) || v.actions.some((a) => MOVING.includes(a.status)) ? false : v;
}

describe('a secret in a tool argument is refused at the policy gateway', () => {
  it('a canary and an API key in refund reasons: invalid_arguments, nothing stored or shown downstream; the rephrased refund goes to approval', async () => {
    await fixtures(s, 'SEC-ARGS', [
      fc(
        ['issue_refund', { orderId: 'O-1002', amount: '120.00', reason: `Damaged. Reference ${CANARY}` }],
        ['issue_refund', { orderId: 'O-1001', amount: '10.00', reason: `per key ${API_KEY}` }],
      ),
      fc(['issue_refund', { orderId: 'O-1002', amount: '120.00', reason: CLEAN_REASON }]),
      msg('The refund is waiting for approval.'),
    ]);
    const { token, workflowId } = await submit(s, 'rep-ana', 'SEC-ARGS', 'Refund O-1002, it arrived cracked.');
    let rest: false | WorkflowView = false;
    await waitUntil(async () => (rest = await atRest(token, workflowId)) !== false, 'the run at rest');
    const v = rest as unknown as WorkflowView;
    // The approval service writes the approval from its request job, after the run moved to
    // awaiting_approval: wait for that row, then check that it is the only one.
    const approvalsOf = () => s.db.db.selectFrom('approvals').selectAll().where('workflow_id', '=', workflowId).execute();
    await waitUntil(async () => (await approvalsOf()).length > 0, 'the approval request written');

    // Zero downstream for the refused calls: the only action and approval are the rephrased
    // refund's, and the payments ledger was never asked (the API-key refund would have run at once).
    expect.soft(v.actions.map((a) => [a.tool, a.arguments.reason])).toEqual([['issue_refund', CLEAN_REASON]]);
    const approvals = await approvalsOf();
    expect.soft(approvals).toHaveLength(1);
    expect.soft(await stagingRequests(s, '?orderId=O-1001')).toEqual([]);
    expect.soft(await refunds(s, 'O-1001')).toEqual([]);
    expect.soft(await refunds(s, 'O-1002')).toEqual([]);
    expect.soft(v.state).toBe('awaiting_approval');

    // The approver sees the rephrased reason (English with hyphens is no secret).
    const lead = await tokenFor('lead-eli', SECRET);
    const shown = await call('GET', `${s.url('approval')}/v1/approvals/${approvals[0]!.id}`, lead);
    expect(shown.status).toBe(200);
    expect.soft(text(shown.body)).toContain('desk-organizer');
    const inbox = await call('GET', `${s.url('approval')}/v1/approvals`, lead);
    expect(inbox.status).toBe(200);

    // No sink holds either secret: workflow view, approval API and list, ledger rows, payments, audit chain.
    const proposals = await s.db.db
      .selectFrom('proposals')
      .select(['status', 'validation_error', 'round'])
      .where('workflow_id', '=', workflowId)
      .orderBy('round')
      .execute();
    const seen = await modelRequests(s, 'SEC-ARGS');
    const outputs = (seen.requests[1]?.input as Array<Record<string, unknown>> | undefined)?.filter(
      (i) => i.type === 'function_call_output',
    );
    const actions = await s.db.db.selectFrom('actions').selectAll().where('workflow_id', '=', workflowId).execute();
    const sinks = {
      workflowView: text(v),
      approval: text(shown.body),
      approvalList: text(inbox.body),
      actions: text(actions),
      approvals: text(approvals),
      proposals: text(proposals),
      modelOutputs: text(outputs),
      paymentsRequests: text(await stagingRequests(s)),
      paymentsLedger: text((await sql`select * from staging.refunds`.execute(s.db.db)).rows),
      audit: await auditText(),
    };
    for (const [sink, body] of Object.entries(sinks)) {
      for (const secret of SECRETS) expect.soft(body, `${sink} carries ${secret}`).not.toContain(secret);
    }

    // Round 1: the two refused calls, recorded with a reason that names the argument, not the
    // secret; round 2: the rephrased refund.
    expect(proposals.map((p) => `${p.round - proposals[0]!.round}:${p.status}`).sort()).toEqual(['0:invalid', '0:invalid', '1:valid']);
    for (const p of proposals.filter((x) => x.status === 'invalid')) {
      expect(p.validation_error).toMatchObject({ error: 'invalid_arguments', issues: [expect.stringMatching(/^reason: .*secret/)] });
    }
    // What the model was told: a bounded validation result naming the reason, so it could rephrase.
    expect(outputs).toHaveLength(2);
    for (const o of outputs!) {
      const out = JSON.parse(String(o.output)) as Record<string, unknown>;
      expect(out).toMatchObject({ executed: false, status: 'validation_failed', error: 'invalid_arguments', trust: 'gatehouse' });
      expect(String(out.issues)).toMatch(/^reason: /);
    }
  });
});
