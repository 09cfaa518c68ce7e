import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { executionsQueue, jobOptionsFor } from '@gatehouse/contracts';
import { createAction } from '@gatehouse/testing';
import { auditEvents, EXECUTIONS_QUEUE, RESULTS_QUEUE, startHarness, waitFor, type Harness } from './support/harness.ts';
import { executorEnv, startExecutor, type ExecutorProcess } from './support/processes.ts';

// Lost lock (docs/product/design.md#leases-with-fencing): two executors with a 1000 ms queue lock; the one holding the job blocks its
// event loop for 3 s before calling the adapter, so the queue hands the job to the other worker,
// which reclaims the expired lease (fencing token 2). One effect; the stale worker's write is
// refused by its fencing token (in the ledger, or by the payments ledger with 409).

let h: Harness;
const running: ExecutorProcess[] = [];
beforeAll(async () => {
  h = await startHarness({ poolSize: 4 });
});
afterAll(async () => {
  for (const p of running) p.child.kill('SIGCONT');
  await Promise.all(running.map((p) => p.stop(2000)));
  await h?.close();
});

describe('executor: lost queue lock (real processes)', () => {
  it(
    'the stalled job moves to a second executor: one refund, the stale holder fenced out, succeeded with fencing token ≥ 2',
    { timeout: 90_000 },
    async () => {
      const orderId = await h.newOrder();
      const a = await createAction(h.db, { orderId, amountCents: 6600 });
      const env = executorEnv(
        { databaseUrl: h.tdb.url, prefix: h.prefix, stagingUrl: h.stagingUrl, signingKeyPath: h.delegationKeyPath },
        {
          EXECUTOR_LOCK_MS: '1000',
          LEASE_MS: '1500',
          // BullMQ needs two stalled checks (and the check key lives one interval): 250 ms makes the
          // hand-over happen well inside the 3 s block.
          EXECUTOR_STALLED_INTERVAL_MS: '250',
          // long enough that the stale holder, once awake, would really send its write
          EXECUTION_DEADLINE_MS: '10000',
        },
      );

      // The second executor boots first (its start-up takes longer than the 3 s block) and is
      // frozen with SIGSTOP, so the blocked executor is the one that takes the job.
      const second = startExecutor(env);
      running.push(second);
      await second.ready;
      second.child.kill('SIGSTOP');
      await h.queues.get(EXECUTIONS_QUEUE).add(executionsQueue.jobName, a.job, { ...jobOptionsFor(EXECUTIONS_QUEUE), jobId: a.jobId });
      // Concurrency 1: a blocked worker with free slots keeps a pending BZPOPMIN that would take the
      // stalled job's wake-up marker, and the hand-over would wait for the block to end.
      const first = startExecutor({ ...env, EXECUTOR_CONCURRENCY: '1', GATEHOUSE_TEST_BLOCK_BEFORE_DISPATCH_MS: '3000' });
      running.push(first);
      const claimedAt = await waitFor(
        'the blocking executor to claim',
        async () => {
          const op = await h.db
            .selectFrom('operations')
            .select(['status', 'fencing_token', 'updated_at'])
            .where('key', '=', a.operationKey)
            .executeTakeFirst();
          return op?.status === 'running' && op.fencing_token === '1' ? Date.now() : null;
        },
        30_000,
        20,
      );
      second.child.kill('SIGCONT');

      const op = await waitFor(
        'the operation to succeed',
        async () => {
          const o = await h.db.selectFrom('operations').selectAll().where('key', '=', a.operationKey).executeTakeFirst();
          return o?.status === 'succeeded' ? o : null;
        },
        30_000,
      ).catch(async (e: unknown) => {
        const row = await h.db.selectFrom('operations').selectAll().where('key', '=', a.operationKey).executeTakeFirst();
        throw new Error(
          `${(e as Error).message}\noperation: ${JSON.stringify(row)}\nfirst: ${first.output().slice(-1500)}\nsecond: ${second.output().slice(-1500)}`,
        );
      });
      // let the blocked executor wake up and try its stale write
      await new Promise((r) => setTimeout(r, Math.max(0, claimedAt + 3800 - Date.now())));
      await waitFor(
        'the results job',
        async () => (await h.queues.get(RESULTS_QUEUE).getJob(`result_${a.workflowId}_${a.callId}`)) ?? null,
        10_000,
      );

      expect(Number(op.fencing_token)).toBeGreaterThanOrEqual(2);
      expect(await h.refunds(orderId)).toEqual([expect.objectContaining({ idempotencyKey: a.operationKey, amountCents: 6600 })]);
      const posts = (await h.requests(orderId)).filter((r) => r.method === 'POST');
      expect(posts.length).toBeGreaterThanOrEqual(1);
      expect(posts.every((p) => p.idempotencyKey === a.operationKey)).toBe(true);
      expect(posts.filter((p) => p.status === 201)).toHaveLength(1);
      // The stale holder's write is refused: by the payments ledger (409 stale_fencing_token), or by
      // the ledger's fencing — at its write-ahead mark (it then sends nothing) or at its record.
      const stale = posts.filter((p) => (p.fencingToken ?? 0) < Number(op.fencing_token));
      const recordRefused = first.output().includes('result refused: stale fencing token');
      if (process.env.TEST_LOG_LEVEL) console.info({ posts, recordRefused, fence: op.fencing_token });
      for (const p of stale)
        expect(p.status === 409 ? p.reason : recordRefused ? 'record fenced out' : `accepted ${p.status}`).toMatch(
          /stale_fencing_token|record fenced out/,
        );
      if (!stale.length) expect(await h.refundFence(a.operationKey)).toBe(Number(op.fencing_token));
      // the ledger kept exactly one outcome, written by the holder of the newest token
      expect(await auditEvents(h.db, 'operation.claimed', a.workflowId)).toHaveLength(Number(op.fencing_token));
      expect(await auditEvents(h.db, 'operation.succeeded', a.workflowId)).toHaveLength(1);
      expect(
        await h.db.selectFrom('operations').select(['status', 'fencing_token']).where('key', '=', a.operationKey).executeTakeFirstOrThrow(),
      ).toEqual({ status: 'succeeded', fencing_token: op.fencing_token });
      expect(
        (
          await h.db
            .selectFrom('approvals')
            .select('status')
            .where('id', '=', a.approvalId ?? '')
            .executeTakeFirstOrThrow()
        ).status,
      ).toBe('used');
      expect(first.child.exitCode).toBeNull(); // the stale worker was alive throughout: a lost lock, not a crash
    },
  );
});
