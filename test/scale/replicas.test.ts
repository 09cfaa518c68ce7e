import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, runDemo, tokenFor } from '@gatehouse/cli';
import { isTerminal, listStuckRuns, verifyAuditChain } from '@gatehouse/ledger';
import { auditPublicKey } from '@gatehouse/cli';
import { demoTarget, startE2EStack, type E2EStack } from '@gatehouse/test-harness';
import {
  AUTH_SECRET,
  REPLICATED,
  executionsQueueOf,
  startApprover,
  startSecondReplicas,
  storm,
  submitBatch,
  workDone,
  type ExecutionTarget,
  type SecondReplicas,
} from './support/replicas.ts';

// Every Gatehouse service runs as two processes over one database and one BullMQ prefix
// (docs/decisions/0195-services-as-replicas.md): the demo ticket, a batch of tickets and a
// duplicate-delivery storm spread over both executor replicas must leave exactly one effect per
// idempotency key, an intact audit chain and no run stuck — and both replicas of each service
// must have done work, or the test would prove nothing about replicas.

const BATCH = 16; // four of each kind: 4 auto refunds, 4 refunds and 4 reships needing a lead, 4 emails
const COPIES = 10; // deliveries of each execution job in a storm

let s: E2EStack;
let r2: SecondReplicas;
beforeAll(async () => {
  // debug: each queue job processed and each audit batch chained is a log line of its process.
  s = await startE2EStack({ LOG_LEVEL: 'debug' });
  r2 = await startSecondReplicas(s);
}, 420_000);
afterAll(async () => {
  await r2?.stack.stop();
  await s?.close();
});

/** Staging read-back of one tool's effects on one order. */
const EFFECT_READS: Record<string, (orderId: string) => string> = {
  issue_refund: (o) => `/ledger/refunds?orderId=${o}`,
  reship_order: (o) => `/orders/${o}/shipments`,
  notify_customer: (o) => `/mail/messages?orderId=${o}`,
};

/**
 * Staging's read-back of one tool's effects on one order: the idempotency key of each refund;
 * shipments and emails carry none (the order system and mail have no idempotency key,
 * docs/product/users-and-tools.md#support-pack), so each reads as `effect`.
 */
async function effectKeys(tool: string, orderId: string): Promise<string[]> {
  const r = await call('GET', `${s.url('staging')}${EFFECT_READS[tool]!(orderId)}`, null);
  expect(r.status).toBe(200);
  const body = r.body as Record<string, Array<{ idempotencyKey?: string }> | undefined>;
  return (body.refunds ?? body.shipments ?? body.messages ?? []).map((e) =>
    tool === 'issue_refund' ? String(e.idempotencyKey) : 'effect',
  );
}

/** Waits (deadline) until every storm job has finished; returns each job's state and return value. */
async function stormOutcomes(jobIds: readonly string[], deadlineMs: number): Promise<Map<string, string>> {
  const q = executionsQueueOf(s);
  const out = new Map<string, string>();
  try {
    while (out.size < jobIds.length && Date.now() < deadlineMs) {
      for (const id of jobIds.filter((j) => !out.has(j))) {
        const state = await q.getJobState(id);
        if (state !== 'completed' && state !== 'failed') continue;
        // Read after the state: a job fetched before it finished carries no return value yet.
        const job = await q.getJob(id);
        out.set(id, state === 'completed' ? String(job?.returnvalue) : `failed: ${job?.failedReason}`);
      }
      await new Promise((done) => setTimeout(done, 500));
    }
  } finally {
    await q.close();
  }
  return out;
}

describe('two processes of every service over one database and one queue prefix', () => {
  it('demo, batch and duplicate-delivery storm: one effect per key, intact chain, no run stuck, both replicas worked', async () => {
    const replicaUrl = [(svc: string) => s.url(svc), (svc: string) => r2.url(svc)];

    // 1. The demo ticket T-1 through the second replicas' intake and approval APIs.
    const demo = await runDemo({ ...demoTarget(s), intakeUrl: r2.url('agent-loop'), approvalUrl: r2.url('approval') });
    expect(demo.failures).toEqual([]);
    expect(demo.workflow.state).toBe('completed');

    // 2. A batch through both intake replicas, approved through both approval replicas; every
    //    approval sets off a storm of its execution job while the original is in flight.
    const q = executionsQueueOf(s);
    const inFlightStorm: string[] = [];
    const batchIds = new Set<string>();
    const approver = startApprover(
      s,
      [s.url('approval'), r2.url('approval')],
      () => batchIds,
      async (t) => {
        inFlightStorm.push(...(await storm(q, [t], COPIES, 'a')));
      },
    );
    const runs = await submitBatch(
      s,
      replicaUrl.map((u) => u('agent-loop')),
      BATCH,
    );
    for (const r of runs) batchIds.add(r.workflowId);
    const ids = [demo.workflow.workflowId, ...batchIds];
    const deadline = Date.now() + 150_000;
    let live: Array<{ id: string; state: string }> = [];
    for (;;) {
      const rows = await s.db.db.selectFrom('workflows').select(['id', 'state']).where('id', 'in', ids).execute();
      live = rows.filter((w) => !isTerminal(w.state));
      if (!live.length || Date.now() > deadline) break;
      await new Promise((done) => setTimeout(done, 1000));
    }
    await approver.stop();
    expect(live, 'runs not terminal').toEqual([]);
    expect(
      approver.approvedVia.every((n) => n > 0),
      `approvals per replica ${approver.approvedVia}`,
    ).toBe(true);

    // 3. A storm after the fact: every executed action's job delivered again, over both executors.
    const executed = await s.db.db
      .selectFrom('actions')
      .leftJoin('approvals', 'approvals.action_id', 'actions.id')
      .select(['actions.workflow_id', 'actions.id', 'actions.version', 'approvals.id as approval_id'])
      .where('actions.workflow_id', 'in', ids)
      .where('actions.tool', 'in', Object.keys(EFFECT_READS))
      .where('actions.status', '=', 'succeeded')
      .execute();
    const targets: ExecutionTarget[] = executed.map((a) => ({
      workflowId: a.workflow_id,
      actionId: a.id,
      actionVersion: a.version,
      approvalId: a.approval_id,
    }));
    const afterStorm = await storm(q, targets, COPIES, 'b');
    await q.close();
    const outcomes = await stormOutcomes([...inFlightStorm, ...afterStorm], Date.now() + 120_000);
    const results = [...outcomes.values()];
    console.log('storm outcomes', JSON.stringify(Object.fromEntries(count(results))));
    expect(outcomes.size, 'storm jobs finished').toBe(inFlightStorm.length + afterStorm.length);

    // Exactly one effect per idempotency key (refunds), and one per succeeded action (every tool), at the systems of record.
    const orderOf = new Map([[demo.workflow.workflowId, 'O-1002'], ...runs.map((r) => [r.workflowId, r.orderId] as const)]);
    const actions = await s.db.db
      .selectFrom('actions')
      .select(['workflow_id', 'tool', 'status', 'operation_key'])
      .where('workflow_id', 'in', ids)
      .where('tool', 'in', Object.keys(EFFECT_READS))
      .execute();
    expect(actions.filter((a) => a.status !== 'succeeded' && a.status !== 'denied')).toEqual([]);
    let effects = 0;
    for (const [workflowId, orderId] of orderOf) {
      for (const tool of Object.keys(EFFECT_READS)) {
        const keys = await effectKeys(tool, orderId);
        const expected = actions.filter((a) => a.workflow_id === workflowId && a.tool === tool && a.status === 'succeeded');
        const want = expected.map((a) => (tool === 'issue_refund' ? a.operation_key : 'effect'));
        expect(keys.sort(), `${tool} on ${orderId}`).toEqual(want.sort());
        effects += keys.length;
      }
    }
    expect(effects).toBe(2 + BATCH); // T-1's refund and reship; one effect per batch ticket
    // Every duplicate either ran the effect first (the original then replayed) or replayed it.
    expect(results.filter((x) => !/^(succeeded|replay:succeeded)$/.test(x))).toEqual([]);

    // No run stuck (the ledger's liveness query, and the ops API of both replicas), the chain intact.
    expect(await listStuckRuns(s.db.db)).toEqual([]);
    const operator = await tokenFor('ops-gus', AUTH_SECRET);
    for (const url of replicaUrl.map((u) => u('ops'))) {
      const stuck = await call('GET', `${url}/api/workflows/stuck`, operator);
      expect(stuck.status).toBe(200);
      expect(stuck.body.runs).toEqual([]);
    }
    const chainDeadline = Date.now() + 60_000;
    while (Date.now() < chainDeadline) {
      const left = await s.db.db
        .selectFrom('audit_outbox')
        .select((eb) => eb.fn.countAll<string>().as('n'))
        .executeTakeFirstOrThrow();
      if (Number(left.n) === 0) break;
      await new Promise((done) => setTimeout(done, 250));
    }
    const chain = await verifyAuditChain(s.db.db, { trustedPublicKey: auditPublicKey(s.env.AUDIT_SIGNING_KEY_PATH) });
    expect(chain).toMatchObject({ intact: true, anchorsTrusted: true, reason: null });
    expect(chain.anchorsChecked).toBeGreaterThan(0);

    // Both replicas of every worker service did work (their own log lines), so the above held with two.
    const work = Object.fromEntries(REPLICATED.map((svc) => [svc, [workDone(s.dir, svc), workDone(r2.dir, svc)]] as const));
    console.log('work per replica', JSON.stringify(work));
    const jobsOf = (svc: string, queue: string): number[] => work[svc]!.map((w) => w.jobs[queue] ?? 0);
    for (const [svc, queue] of [
      ['agent-loop', 'turns.rel-1'],
      ['agent-loop', 'results.rel-1'],
      ['policy-gateway', 'proposals.rel-1'],
      ['approval', 'approval-requests.rel-1'],
      ['executor', 'executions.rel-1'],
    ] as const) {
      expect(
        jobsOf(svc, queue).every((n) => n > 0),
        `${svc} ${queue} per replica: ${jobsOf(svc, queue)}`,
      ).toBe(true);
    }
    const chained = work.audit!.map((w) => w.chained);
    expect(
      chained.every((n) => n > 0),
      `audit events chained per replica: ${chained}`,
    ).toBe(true);
    expect(chained[0]! + chained[1]!).toBeGreaterThanOrEqual(chain.events);
  }, 420_000);
});

function count(values: readonly string[]): Map<string, number> {
  const m = new Map<string, number>();
  for (const v of values) m.set(v, (m.get(v) ?? 0) + 1);
  return m;
}
