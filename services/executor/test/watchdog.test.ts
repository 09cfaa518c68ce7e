import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { UnrecoverableError, Worker, type Processor } from 'bullmq';
import { executionsQueue, queueName, resultsQueue, turnsQueue } from '@gatehouse/contracts';
import { enqueueInTransaction, inTransaction, runNeeds, type Db } from '@gatehouse/ledger';
import { createLogger, createRedis, OutboxRelay, QueueRegistry } from '@gatehouse/platform';
// @gatehouse/testing is not a dependency of this service; imported by path (the same module).
import { createAction, writeFunctionCall, type SeededAction } from '@gatehouse/testing';
import { createTestDatabase, dropQueuePrefix, testQueuePrefix, TEST_REDIS_URL, type TestDatabase } from '@gatehouse/test-harness';
import { watchdogLock, watchdogPass, type WatchdogDeps } from '../src/jobs/watchdog.ts';

// The watchdog against a real ledger and real Redis (its own prefix): a job published and then
// lost is re-driven once with the same id and payload, audited; a live job, a person's wait and
// an on-call pause are left alone; one replica re-drives at a time; past its limit a run that
// cannot progress stops explicitly.

let t: TestDatabase;
let db: Db;
let prefix: string;
let queues: QueueRegistry;
let deps: WatchdogDeps;
let orderN = 0;

beforeAll(async () => {
  t = await createTestDatabase();
  db = t.db;
  prefix = testQueuePrefix();
  queues = new QueueRegistry(createRedis(TEST_REDIS_URL), prefix);
  const log = createLogger('test');
  deps = {
    db,
    queues,
    relay: new OutboxRelay(db, queues, log),
    log,
    settings: { release: 'rel-1', graceMs: 1000, maxRedrives: 2, redisTimeoutMs: 2000, batch: 200 },
  };
});
afterAll(async () => {
  await queues?.close();
  await dropQueuePrefix(TEST_REDIS_URL, prefix);
  await t?.drop();
});

/** An approved action whose execution job was published (its outbox row says so) and is gone from Redis. */
async function publishedThenLost(over: { state?: string; agoMs?: number } = {}): Promise<SeededAction> {
  const a = await createAction(db, { orderId: `O-${2000 + orderN++}` });
  await inTransaction(db, async (trx) => {
    await enqueueInTransaction(trx, executionsQueue, a.job);
    await trx.updateTable('outbox').set({ published_at: new Date() }).where('job_id', '=', a.jobId).execute();
    // A function_call the run waits on (the transcript's view of the action's call).
    await writeFunctionCall(trx, a);
  });
  await sql`UPDATE workflows SET state = ${over.state ?? 'executing'}, round = 1, updated_at = now() - make_interval(secs => ${(over.agoMs ?? 10_000) / 1000}) WHERE id = ${a.workflowId}`.execute(
    db,
  );
  return a;
}

const redrivesOf = async (workflowId: string): Promise<string[]> =>
  (await db.selectFrom('audit_outbox').select('event').execute())
    .map((r) => r.event as { type: string; runId: string; outcome: string })
    .filter((e) => e.type === 'run.redriven' && e.runId === workflowId)
    .map((e) => e.outcome);

const ran = async () => {
  const r = await watchdogPass(deps);
  if (r.kind !== 'ran') throw new Error('pass skipped');
  return r;
};

/**
 * Runs a worker of `queue` (a contract queue name of this file's prefix) with `processor` until job
 * `jobId` is `state`, then closes it: a job the consumer finished while the ledger lost its effect.
 * @throws Error when the job is not `state` within 20 s.
 */
async function runUntilState(queue: string, jobId: string, processor: Processor, state: 'completed' | 'failed'): Promise<void> {
  const q = queues.get(queue);
  const connection = createRedis(TEST_REDIS_URL);
  const worker = new Worker(queue, processor, { connection, prefix });
  try {
    const until = Date.now() + 20_000;
    while ((await q.getJobState(jobId)) !== state) {
      if (Date.now() > until) throw new Error(`the job never became ${state}`);
      await new Promise((r) => setTimeout(r, 50));
    }
  } finally {
    await worker.close();
    connection.disconnect();
  }
}

describe('watchdog', () => {
  it('re-drives a lost execution with the same job id and payload, audited; a second pass changes nothing', async () => {
    const a = await publishedThenLost();
    const first = await ran();
    expect(first.redriven).toContainEqual({ workflowId: a.workflowId, jobId: a.jobId, reason: 'missing' });
    const job = await queues.get(queueName('executions', 'rel-1')).getJob(a.jobId);
    expect(job?.data).toMatchObject(a.job);
    // The time it was lost is the queue store's outage, credited by the consumer, not working time.
    const published = await db
      .selectFrom('outbox')
      .select('published_at')
      .where('job_id', '=', a.jobId)
      .orderBy('id')
      .limit(1)
      .executeTakeFirstOrThrow();
    expect(job?.data.outage).toEqual({ dependency: 'redis', sinceMs: published.published_at!.getTime() });
    expect(await redrivesOf(a.workflowId)).toEqual(['executions:missing']);

    const second = await ran();
    expect(second.redriven.filter((r) => r.workflowId === a.workflowId)).toEqual([]);
    expect(await redrivesOf(a.workflowId)).toHaveLength(1);
  });

  it('leaves alone a run inside its grace, a paused run and a run whose approval is pending', async () => {
    const fresh = await publishedThenLost({ agoMs: 0 });
    const paused = await publishedThenLost({ state: 'paused' });
    const waiting = await publishedThenLost({ state: 'awaiting_approval' });
    await db.updateTable('actions').set({ status: 'pending_approval' }).where('id', '=', waiting.actionId).execute();
    await db
      .updateTable('approvals')
      .set({ status: 'pending', decided_at: null, approver: null })
      .where('id', '=', waiting.approvalId!)
      .execute();
    const r = await ran();
    const touched = r.redriven.map((x) => x.workflowId);
    expect(touched).not.toContain(fresh.workflowId);
    expect(touched).not.toContain(paused.workflowId);
    expect(touched).not.toContain(waiting.workflowId);
  });

  it('re-drives a lost result from its outbox row (its output lives nowhere else)', async () => {
    const a = await publishedThenLost();
    await db.updateTable('actions').set({ status: 'succeeded' }).where('id', '=', a.actionId).execute();
    const output = { source: 'issue_refund', trust: 'gatehouse', executed: true };
    await inTransaction(db, async (trx) => {
      await enqueueInTransaction(trx, resultsQueue, { release: 'rel-1', workflowId: a.workflowId, callId: a.callId, output });
      await trx
        .updateTable('outbox')
        .set({ published_at: new Date() })
        .where('job_id', '=', `result_${a.workflowId}_${a.callId}`)
        .execute();
    });
    const r = await ran();
    const jobId = `result_${a.workflowId}_${a.callId}`;
    expect(r.redriven).toContainEqual({ workflowId: a.workflowId, jobId, reason: 'missing' });
    expect((await queues.get(queueName('results', 'rel-1')).getJob(jobId))?.data).toMatchObject({ callId: a.callId, output });
  });

  it('a run past its bound that nothing can move (no job, no pending decision) stops as step_failed', async () => {
    const a = await publishedThenLost({ state: 'investigating', agoMs: 10 * 60_000 });
    // Its call has no proposal any more: no pipeline job can answer it.
    await db.deleteFrom('outbox').where('job_id', '=', a.jobId).execute();
    await db.deleteFrom('operations').where('workflow_id', '=', a.workflowId).execute();
    await db.deleteFrom('approvals').where('workflow_id', '=', a.workflowId).execute();
    await db.deleteFrom('actions').where('workflow_id', '=', a.workflowId).execute();
    await db.deleteFrom('proposals').where('workflow_id', '=', a.workflowId).execute();
    expect((await ran()).stopped).toContain(a.workflowId);
    const wf = await db
      .selectFrom('workflows')
      .select(['state', 'stop_reason', 'next_step'])
      .where('id', '=', a.workflowId)
      .executeTakeFirstOrThrow();
    expect(wf).toMatchObject({ state: 'stopped', stop_reason: 'step_failed' });
    expect(wf.next_step).toMatch(/on-call/);
  });

  it('one replica at a time: while another holds the advisory lock a pass skips; another release’s pass does not', async () => {
    const a = await publishedThenLost();
    let release!: () => void;
    const held = new Promise<void>((r) => (release = r));
    let locked!: () => void;
    const isLocked = new Promise<void>((r) => (locked = r));
    const holder = db.transaction().execute(async (trx) => {
      await sql`SELECT pg_advisory_xact_lock(${watchdogLock('rel-1')})`.execute(trx);
      locked();
      await held;
    });
    await isLocked;
    expect(await watchdogPass(deps)).toEqual({ kind: 'skipped' });
    // The candidate's watchdog looks at its own runs only: rel-1's pass holding its lock does not skip it.
    expect(await watchdogPass({ ...deps, settings: { ...deps.settings, release: 'rel-2' } })).toMatchObject({ kind: 'ran' });
    expect(await redrivesOf(a.workflowId)).toEqual([]);
    release();
    await holder;
    expect((await ran()).redriven.map((x) => x.workflowId)).toContain(a.workflowId);
  });

  it('past its re-drive limit a run waiting for a turn stops as step_failed; one waiting for an execution is never stopped', async () => {
    const turnRun = await publishedThenLost({ state: 'investigating' });
    // Its call answered and its action done: the run now waits for its next turn, whose job is lost.
    await db.updateTable('actions').set({ status: 'succeeded' }).where('id', '=', turnRun.actionId).execute();
    await db
      .insertInto('conversation_items')
      .values({ workflow_id: turnRun.workflowId, round: 1, kind: 'function_call_output', call_id: turnRun.callId, item: '{}' })
      .execute();
    await inTransaction(db, async (trx) => {
      await enqueueInTransaction(trx, turnsQueue, { release: 'rel-1', workflowId: turnRun.workflowId, round: 2 });
      await trx.updateTable('outbox').set({ published_at: new Date() }).where('job_id', '=', `turn_${turnRun.workflowId}_r2`).execute();
    });
    const execRun = await publishedThenLost();
    const turnQ = queues.get(queueName('turns', 'rel-1'));
    const execQ = queues.get(queueName('executions', 'rel-1'));
    for (let i = 0; i < deps.settings.maxRedrives; i++) {
      await ran();
      // Lost again (nothing consumes these queues here).
      await (await turnQ.getJob(`turn_${turnRun.workflowId}_r2`))?.remove();
      await (await execQ.getJob(execRun.jobId))?.remove();
    }
    const last = await ran();
    expect(last.stopped).toContain(turnRun.workflowId);
    expect(last.stopped).not.toContain(execRun.workflowId);
    const wf = await db
      .selectFrom('workflows')
      .select(['state', 'stop_reason'])
      .where('id', '=', turnRun.workflowId)
      .executeTakeFirstOrThrow();
    expect(wf).toEqual({ state: 'stopped', stop_reason: 'step_failed' });
    expect((await db.selectFrom('workflows').select('state').where('id', '=', execRun.workflowId).executeTakeFirstOrThrow()).state).toBe(
      'executing',
    );
  });

  it('re-drives a job that finished without its effect (the ledger lost it) with the wait marked as a ledger outage', async () => {
    // An unclean promote: the consumer completed the job, the promoted ledger never saw its effect.
    const a = await publishedThenLost({ agoMs: 3 * 60_000 });
    const q = queues.get(queueName('executions', 'rel-1'));
    await q.add('execution', a.job, { jobId: a.jobId });
    await runUntilState(queueName('executions', 'rel-1'), a.jobId, async () => 'succeeded', 'completed');
    const r = await ran();
    expect(r.redriven).toContainEqual({ workflowId: a.workflowId, jobId: a.jobId, reason: 'stale' });
    const published = await db
      .selectFrom('outbox')
      .select('published_at')
      .where('job_id', '=', a.jobId)
      .orderBy('id')
      .limit(1)
      .executeTakeFirstOrThrow();
    // The wait since it was published is the ledger's loss, not the run's working time: the consumer credits it.
    expect((await q.getJob(a.jobId))?.data.outage).toEqual({ dependency: 'postgres', sinceMs: published.published_at!.getTime() });
  });

  it('an execution that answered its call without finishing the action: the run waits for that result, re-driven when it completed without its effect', async () => {
    // A refusal (the run's deadline, an outage past its ceiling) leaves the action approved and
    // answers the call; a promote that lost commits left a completed job of that result id in Redis.
    const a = await publishedThenLost({ agoMs: 3 * 60_000 });
    const resultId = `result_${a.workflowId}_${a.callId}`;
    const output = { source: 'issue_refund', trust: 'gatehouse', executed: false, reason: 'dependency_unavailable' };
    const payload = { release: 'rel-1', workflowId: a.workflowId, callId: a.callId, output, stop: 'dependency_unavailable' as const };
    await inTransaction(db, async (trx) => {
      await enqueueInTransaction(trx, resultsQueue, payload);
      await trx.updateTable('outbox').set({ published_at: new Date() }).where('job_id', '=', resultId).execute();
    });
    const q = queues.get(queueName('results', 'rel-1'));
    await q.add('result', payload, { jobId: resultId });
    await runUntilState(queueName('results', 'rel-1'), resultId, async () => 'answered', 'completed');
    const wf = { id: a.workflowId, state: 'executing' as const, round: 1, release_id: 'rel-1' };
    expect((await runNeeds(db, wf)).jobs.map((j) => j.jobId)).toEqual([resultId]);
    const r = await ran();
    expect(r.redriven.filter((x) => x.workflowId === a.workflowId)).toEqual([
      { workflowId: a.workflowId, jobId: resultId, reason: 'stale' },
    ]);
    expect(await q.getJobState(resultId)).not.toBe('completed');
    expect((await q.getJob(resultId))?.data).toMatchObject({ callId: a.callId, output, stop: 'dependency_unavailable' });
    // An execution on-call resumed after that result is awaited again.
    await db
      .insertInto('outbox')
      .values({
        queue: 'executions.rel-1',
        job_name: 'execution',
        job_id: `${a.jobId}_resume1`,
        payload: JSON.stringify(a.job),
        release_id: 'rel-1',
      })
      .execute();
    expect((await runNeeds(db, wf)).jobs.map((j) => j.jobId)).toEqual([a.jobId]);
  });

  it('re-drives a dead-lettered job (failed during an outage): removed and re-added under the same id', async () => {
    const a = await publishedThenLost();
    const q = queues.get(queueName('executions', 'rel-1'));
    await q.add('execution', a.job, { jobId: a.jobId, attempts: 1 });
    const failing: Processor = async (job) => {
      if (job.id === a.jobId) throw new UnrecoverableError('dependency unavailable');
    };
    await runUntilState(queueName('executions', 'rel-1'), a.jobId, failing, 'failed');
    const r = await ran();
    expect(r.redriven).toContainEqual({ workflowId: a.workflowId, jobId: a.jobId, reason: 'failed' });
    // Waiting again, with its tenant's fair priority (ADR 0500): the re-drive's outbox row names the tenant.
    expect(await q.getJobState(a.jobId)).toBe('prioritized');
    expect(await redrivesOf(a.workflowId)).toEqual(['executions:failed']);
  });
});
