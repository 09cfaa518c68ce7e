import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { bumpEpoch, setSwitch } from '@gatehouse/operations';
import { runReconciliation } from '@gatehouse/reconciliation';
import { executionsQueue, jobOptionsFor, type ExecutionJob } from '@gatehouse/contracts';
import { createAction } from '@gatehouse/testing';
import { TEST_REDIS_URL } from '@gatehouse/test-harness';
import { mintDelegatedToken, newDelegationKeyPair } from '../../packages/credentials/src/index.ts';
import { createWorker, PostgresGate } from '../../packages/platform/src/index.ts';
import { processExecution } from '@gatehouse/executor';
import type { SupportBundle } from '../../packages/policy/src/index.ts';
import {
  AUDIT_HMAC_KEY,
  auditEvents,
  EXECUTIONS_QUEUE,
  RELEASE,
  RESULTS_QUEUE,
  startHarness,
  SUPPORT_BUNDLE,
  BUNDLES,
  waitFor,
  type Harness,
} from './support/harness.ts';

// docs/product/invariants.md (authority, exactly-once, containment) and hard-cases.md: ambiguous timeouts end in failed_unknown (never retried,
// reconciled by read-back), the payments ledger bounds a wrong policy by the delegation's
// ceiling, switches hold a step at execution, key reuse with another digest is refused, and an
// epoch bump revokes outstanding delegated tokens.

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(async () => {
  await h?.close();
});

const op = (key: string) => h.db.selectFrom('operations').selectAll().where('key', '=', key).executeTakeFirstOrThrow();
const action = (id: string) => h.db.selectFrom('actions').selectAll().where('id', '=', id).executeTakeFirstOrThrow();

describe('executor: ambiguous outcomes and authority', () => {
  it('a hung order system: failed_unknown, parked for reconciliation, alert, no further POST; the reconciliation pass finds the order system lacks it and hands it to on-call', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { tool: 'reship_order', orderId });
    await h.arm({ target: 'orders', mode: 'hang', times: 1 });
    const deps = h.deps({ deadlineMs: 1500 });
    const alert = vi.spyOn(deps.log, 'error');

    const started = Date.now();
    expect(await processExecution(a.job, deps)).toBe('failed_unknown');
    expect(Date.now() - started).toBeLessThan(4000);
    expect(alert).toHaveBeenCalledWith(
      expect.objectContaining({ alert: 'failed_unknown', tool: 'reship_order', workflowId: a.workflowId }),
      expect.any(String),
    );
    alert.mockRestore();
    expect(await op(a.operationKey)).toMatchObject({ status: 'failed_unknown', error: 'timeout_outcome_unknown' });
    expect((await action(a.actionId)).status).toBe('failed_unknown');
    expect(await auditEvents(h.db, 'operation.unknown', a.workflowId)).toHaveLength(1);
    const result = await h.queues.get(RESULTS_QUEUE).getJob(`result_${a.workflowId}_${a.callId}`);
    expect(result?.data).toMatchObject({ workflowId: a.workflowId, callId: a.callId, park: 'needs_reconciliation' });

    // redeliveries are never retried automatically: they replay the unknown
    expect(await processExecution(a.job, deps)).toBe('replay:failed_unknown');
    expect(await processExecution(a.job, deps)).toBe('replay:failed_unknown');
    const posts = (await h.requests(orderId)).filter((r) => r.method === 'POST');
    expect(posts).toHaveLength(1);
    expect(posts[0]).toMatchObject({ status: null, reason: 'fault:hang' });
    expect(await h.shipments(orderId)).toHaveLength(0);

    // the results consumer parks the workflow; the reconciliation pass compares it with the order
    // system's read-back (docs/product/reconciliation.md): no shipment beyond the committed baseline, so the order system
    // lacks it — on-call's item to decide, never retried or closed automatically
    await h.db.updateTable('workflows').set({ state: 'needs_reconciliation' }).where('id', '=', a.workflowId).execute();
    const report = await runReconciliation({ db: h.db, stagingUrl: h.stagingUrl, hmacKey: AUDIT_HMAC_KEY, actor: 'ops-gus' });
    expect(report.findings.find((d) => d.finding.operationKey === a.operationKey)?.finding).toMatchObject({
      class: 'in_flight_ledger_lacks_it',
      tool: 'reship_order',
    });
    expect(report.worklist.find((i) => i.operation_key === a.operationKey)).toMatchObject({ owner: 'on-call', status: 'open' });
    expect((await op(a.operationKey)).status).toBe('failed_unknown');
    expect((await h.workflow(a.workflowId)).state).toBe('needs_reconciliation');
    expect((await h.requests(orderId)).filter((r) => r.method === 'POST')).toHaveLength(1);
  });

  it('a refund of 70000 allowed by a wrong policy is refused by the payments ledger (403 ceiling_exceeded): denied, not retried', async () => {
    // the wrong policy is active at execution too (its re-evaluation agrees): only the
    // delegation's ceiling, enforced by the payments ledger itself, stands in the way
    const wrong: SupportBundle = {
      ...SUPPORT_BUNDLE,
      revision: 'support-wrong',
      limits: { ...SUPPORT_BUNDLE.limits, maxRefundCents: 100_000, autoApproveLimitCents: 100_000 },
    };
    const orderId = await h.newOrder(90_000);
    const a = await createAction(h.db, { orderId, amountCents: 70_000, decision: 'ALLOW', ruleId: 'ALL', policyRevision: wrong.revision });
    expect(a.approvalId).toBeNull();

    expect(await processExecution(a.job, h.deps({ bundles: { ...BUNDLES, support: wrong } }))).toBe('failed');

    const requests = await h.requests(orderId);
    expect(requests).toHaveLength(1);
    expect(requests[0]).toMatchObject({ method: 'POST', status: 403, reason: 'ceiling_exceeded' });
    expect(await h.refunds(orderId)).toHaveLength(0);
    expect((await action(a.actionId)).status).toBe('denied');
    expect(await op(a.operationKey)).toMatchObject({ status: 'failed', error: '403:ceiling_exceeded' });
    // a redelivery never retries the refused write
    expect(['replay:failed', 'skip:action_denied']).toContain(
      await processExecution(a.job, h.deps({ bundles: { ...BUNDLES, support: wrong } })),
    );
    expect(await h.requests(orderId)).toHaveLength(1);
  });

  it('the same 70000 refund under the active policy is stopped by the re-evaluation at execution: zero downstream calls', async () => {
    const orderId = await h.newOrder(90_000);
    const a = await createAction(h.db, { orderId, amountCents: 70_000, decision: 'ALLOW', ruleId: 'ALL' });
    expect(await processExecution(a.job, h.deps())).toMatch(/^reevaluated:/);
    expect(await h.requests(orderId)).toHaveLength(0);
    expect(await h.refunds(orderId)).toHaveLength(0);
    expect((await action(a.actionId)).status).not.toBe('succeeded');
  });

  it('an operation key already reserved with another digest: idempotency_conflict, refused and audited, zero downstream calls', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { orderId, amountCents: 6000 });
    await h.db
      .insertInto('operations')
      .values({
        key: a.operationKey,
        workflow_id: a.workflowId,
        action_id: a.actionId,
        action_digest: 'e'.repeat(64),
        tool: 'issue_refund',
        status: 'pending',
        release_id: RELEASE,
      })
      .execute();
    const deps = h.deps();
    const alert = vi.spyOn(deps.log, 'error');

    expect(await processExecution(a.job, deps)).toBe('conflict');

    expect(alert).toHaveBeenCalledWith(expect.objectContaining({ actionId: a.actionId }), expect.stringContaining('idempotency_conflict'));
    alert.mockRestore();
    expect(await h.requests(orderId)).toHaveLength(0);
    expect(await h.refunds(orderId)).toHaveLength(0);
    expect((await action(a.actionId)).status).toBe('failed');
    expect((await h.approval(a.approvalId)).status).toBe('approved'); // never consumed
    expect(await op(a.operationKey)).toMatchObject({ status: 'pending', fencing_token: '0' });
    expect(await auditEvents(h.db, 'operation.failed', a.workflowId)).toEqual([
      expect.objectContaining({ outcome: 'idempotency_conflict' }),
    ]);
  });

  it('after an epoch bump a token minted with the old epoch is refused by the payments ledger (403 revoked_epoch); the executor mints with the new one', async () => {
    const orderId = await h.newOrder();
    const key = `wf-revoked-${orderId}:action:1`;
    const epoch = await bumpEpoch(h.db, 'ops-gus', AUDIT_HMAC_KEY);
    expect(epoch).toBeGreaterThanOrEqual(2);
    const stale = await mintDelegatedToken(
      {
        sub: 'rep-ana',
        act: { sub: 'support-agent' },
        aud: 'payments',
        scope: 'refund:create',
        tenant: 'quillfeather',
        ceiling: 50_000,
        epoch: epoch - 1,
        op: key,
        fence: 1,
        target: { orderId, amountCents: 1000 },
      },
      h.delegationKeys.signing,
    );
    const res = await fetch(`${h.stagingUrl}/ledger/refunds`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${stale}`, 'idempotency-key': key, 'x-fencing-token': '1' },
      body: JSON.stringify({ orderId, amountCents: 1000, reason: 'damaged' }),
    });
    expect(res.status).toBe(403);
    expect(((await res.json()) as { error: { reason: string } }).error.reason).toBe('revoked_epoch');
    expect(await h.refunds(orderId)).toHaveLength(0);
    expect(await h.requests(orderId)).toEqual([expect.objectContaining({ status: 403, reason: 'revoked_epoch', idempotencyKey: key })]);

    const a = await createAction(h.db, { orderId, amountCents: 1000 });
    expect(await processExecution(a.job, h.deps())).toBe('succeeded');
    expect(await h.refunds(orderId)).toEqual([expect.objectContaining({ idempotencyKey: a.operationKey })]);
  });
  it('an epoch bump while an execution waits to retry (429, Retry-After 1 s): the retry carries the epoch of its claim and is refused (403 revoked_epoch); the action is denied on the payments ledger authority, nothing refunded, no further attempt', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { orderId, amountCents: 1100 });
    await h.arm({ target: 'payments', mode: 'rate_limit', retryAfterMs: 1000, times: 1 });
    const outcome = processExecution(a.job, h.deps());
    await waitFor('the first attempt, answered 429', async () => (await h.requests(orderId)).length === 1, 20_000, 20);
    await bumpEpoch(h.db, 'ops-gus', AUDIT_HMAC_KEY); // on-call revokes while the retry waits
    expect(await outcome).toMatch(/^failed/);

    expect((await h.requests(orderId)).map((r) => [r.status, r.reason])).toEqual([
      [429, 'fault:rate_limit'],
      [403, 'revoked_epoch'],
    ]);
    expect(await h.refunds(orderId)).toEqual([]);
    expect(await op(a.operationKey)).toMatchObject({ status: 'failed', error: '403:revoked_epoch' });
    expect((await action(a.actionId)).status).toBe('denied'); // the ledger's authority refusal, not our credential's fault
    // Delivered again, the failed operation is not attempted again under any epoch.
    await processExecution(a.job, h.deps());
    expect(await h.requests(orderId)).toHaveLength(2);
    expect(await h.refunds(orderId)).toEqual([]);
  });
});

describe('executor: a system of record refusing our own credential', () => {
  it('a key the payments ledger does not trust (401 invalid_token): the action is failed, not denied; the refusal is not a business denial', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { orderId, amountCents: 1000 });
    const stranger = await newDelegationKeyPair(); // an executor replica with a key of its own
    expect(await processExecution(a.job, h.deps({ signingKey: stranger.signing }))).toBe('failed');
    expect(await h.refunds(orderId)).toEqual([]);
    expect(await h.requests(orderId)).toEqual([expect.objectContaining({ status: 401 })]);
    expect((await action(a.actionId)).status).toBe('failed');
    const op = await h.db.selectFrom('operations').select(['status', 'error']).where('key', '=', a.operationKey).executeTakeFirstOrThrow();
    expect(op).toEqual({ status: 'failed', error: expect.stringMatching(/^401:invalid_token/) });
  });
});

describe('executor: tool switched off at the moment of execution (containment)', () => {
  it('held at execution with zero downstream calls; switching on re-enqueues and the refund runs once', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { orderId, amountCents: 6200 });
    await setSwitch(h.db, 'issue_refund', false, 'ops-gus', AUDIT_HMAC_KEY);
    const deps = h.deps();

    expect(await processExecution(a.job, deps)).toBe('held:tool_disabled');
    expect(await h.requests(orderId)).toHaveLength(0);
    expect((await h.workflow(a.workflowId)).state).toBe('paused');
    expect((await action(a.actionId)).status).toBe('approved');
    expect((await h.approval(a.approvalId)).status).toBe('approved');

    const rows = await setSwitch(h.db, 'issue_refund', true, 'ops-gus', AUDIT_HMAC_KEY);
    const mine = rows.filter((r) => (r.payload as ExecutionJob).actionId === a.actionId);
    expect(mine).toHaveLength(1);
    await h.relay.publish(rows);
    const job = await h.queues.get(EXECUTIONS_QUEUE).getJob(mine[0]!.job_id);
    expect(job?.data).toMatchObject({ actionId: a.actionId, approvalId: a.approvalId });

    expect(await processExecution(job!.data as ExecutionJob, deps)).toBe('succeeded');
    expect(await h.refunds(orderId)).toHaveLength(1);
    expect(await h.requests(orderId)).toHaveLength(1);
    expect((await h.approval(a.approvalId)).status).toBe('used');
  });

  // Regression (fixed in b416513): the held delivery completed and BullMQ keeps its job id, so the
  // resume must be enqueued under a new id (`resumeSeq`) or the re-add would be dropped silently.
  it('through the queue: a held delivery, then switch on → the executor runs the refund once', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { orderId, amountCents: 6300 });
    const deps = h.deps();
    const worker = createWorker(executionsQueue, (p) => processExecution(p, deps), {
      release: RELEASE,
      prefix: h.prefix,
      redisUrl: TEST_REDIS_URL,
      log: h.log,
      gate: new PostgresGate(h.db, h.log),
      concurrency: 2,
    });
    try {
      await setSwitch(h.db, 'issue_refund', false, 'ops-gus', AUDIT_HMAC_KEY);
      const queue = h.queues.get(EXECUTIONS_QUEUE);
      await queue.add(executionsQueue.jobName, a.job, { ...jobOptionsFor(EXECUTIONS_QUEUE), jobId: a.jobId });
      await waitFor('held delivery', async () => (await queue.getJob(a.jobId))?.returnvalue === 'held:tool_disabled', 60_000);
      expect((await h.workflow(a.workflowId)).state).toBe('paused');

      await h.relay.publish(await setSwitch(h.db, 'issue_refund', true, 'ops-gus', AUDIT_HMAC_KEY));
      const refunds = await waitFor(
        'refund after switch-on',
        async () => {
          const r = await h.refunds(orderId);
          return r.length ? r : null;
        },
        60_000,
      ).catch(() => []);
      expect(refunds).toHaveLength(1);
      expect((await h.workflow(a.workflowId)).state).not.toBe('paused');
    } finally {
      await setSwitch(h.db, 'issue_refund', true, 'ops-gus', AUDIT_HMAC_KEY);
      await worker.close();
    }
  });
});
