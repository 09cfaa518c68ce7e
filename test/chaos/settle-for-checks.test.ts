import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inTransaction, transitionAction, transitionWorkflow } from '@gatehouse/ledger';
import { createAction, type SeededAction } from '@gatehouse/testing';
import { claim, dispatchEffect, loadExecutionContext, readClaimInputs, recordResult } from '@gatehouse/executor';
import { startHarness, type Harness } from '../executor/support/harness.ts';
import type { ChaosStack } from './support/chaos-stack.ts';
import { checkEffects, settleForChecks, type LoadActor } from './support/invariants.ts';
import type { Run } from './support/load.ts';

// The chaos run once reported "issue_refund: 1 effects for 0 action(s)" for a run that ended
// `completed` with its refund action still `running`. Nothing in the product moved it there: the
// checks read a run the load's lead was still approving. A run waiting on its pending approval
// counts as settled; the lead, still running, approved it a moment later and the executor's
// claim and refund landed while the checks read it (action `running`, one refund under its key);
// the record and the run's completion came after. ADR 0672: the lead stops before the checks.

let h: Harness;
beforeAll(async () => {
  h = await startHarness({ poolSize: 6 });
});
afterAll(async () => {
  await h?.close();
});

/** The lead's approval as the approval service writes it: the approval approved, its action approved. */
async function approve(a: SeededAction): Promise<void> {
  await inTransaction(h.db, async (trx) => {
    await trx
      .updateTable('approvals')
      .set({ status: 'approved', approver: 'lead-eli', decided_at: new Date() })
      .where('id', '=', a.approvalId!)
      .execute();
    await transitionAction(trx, a.actionId, { to: 'approved' });
  });
}

/**
 * The executor's steps for `a` (context, reads, fenced claim, effect), then — once `finish` is
 * released — the fenced record and the run's completion (the agent loop answering the call and
 * the model's final message). Returns the rest of the execution (`rest`).
 */
async function execute(a: SeededAction, finish: Promise<void>): Promise<{ rest: Promise<void> }> {
  const deps = h.deps();
  const ctx = await loadExecutionContext(h.db, a.job);
  const inputs = await readClaimInputs(deps, ctx);
  if ('kind' in inputs) throw new Error(`held before the claim: ${inputs.kind}`);
  const c = await claim(deps, ctx, inputs);
  if (c.kind !== 'claimed') throw new Error(`not claimed: ${c.kind}`);
  const started = Date.now();
  const result = await dispatchEffect(deps, ctx, c, inputs.epoch, started);
  if ('kind' in result) throw new Error(`not dispatched: ${result.kind}`);
  const rest = (async () => {
    await finish;
    await recordResult(deps, ctx, c, result, started);
    await inTransaction(h.db, (trx) => transitionWorkflow(trx, a.workflowId, { to: 'completed', nextStep: null }));
  })();
  return { rest };
}

/**
 * The load's lead with one round in flight: it read the pending approval of `a` before the runs
 * were judged settled and approves it when the round lands — on its own timer in the chaos run,
 * here at `stop` (which, as the real approver's, returns once its last round is done) or when the
 * test lands it. The execution that approval starts finishes only after `stop`: a procedure that
 * checks before stopping the lead reads it in flight every time.
 */
function leadWithARoundInFlight(a: SeededAction) {
  let stopped!: () => void;
  const stopSignal = new Promise<void>((done) => (stopped = done));
  let round: Promise<{ rest: Promise<void> }> | undefined;
  const land = (): Promise<{ rest: Promise<void> }> =>
    (round ??= (async () => {
      await approve(a);
      return execute(a, stopSignal);
    })());
  const actor: LoadActor = {
    stop: async () => {
      stopped();
      await land();
    },
  };
  return { actor, land };
}

describe('chaos checks: the load is stopped before the runs are read', () => {
  it(
    'a run settled on its pending approval and approved by the lead right after is carried to its end before the effects are compared',
    { timeout: 60_000 },
    async () => {
      const orderId = await h.newOrder();
      const a = await createAction(h.db, { orderId, amountCents: 8000, pendingApproval: {} });
      const run: Run = {
        ticketId: 'CH-settle-0',
        user: 'rep-ana',
        kind: 'refund_approval',
        orderId,
        workflowId: a.workflowId,
        lastError: null,
      };
      const s = { db: h.db, url: () => h.stagingUrl } as unknown as ChaosStack;
      const lead = leadWithARoundInFlight(a);
      try {
        expect(await settleForChecks(s, [run], [lead.actor], Date.now() + 30_000)).toEqual([]);
        // The round in flight when the run was judged settled lands now at the latest.
        await lead.land();
        const effects = await checkEffects(s, [run]);
        expect(effects).toEqual({ duplicates: [], mismatches: [] });
        const action = await h.db.selectFrom('actions').select('status').where('id', '=', a.actionId).executeTakeFirstOrThrow();
        const wf = await h.db.selectFrom('workflows').select('state').where('id', '=', a.workflowId).executeTakeFirstOrThrow();
        expect({ action: action.status, run: wf.state, refunds: (await h.refunds(orderId)).length }).toEqual({
          action: 'succeeded',
          run: 'completed',
          refunds: 1,
        });
      } finally {
        await lead.actor.stop();
        await (
          await lead.land()
        ).rest;
      }
    },
  );
});
