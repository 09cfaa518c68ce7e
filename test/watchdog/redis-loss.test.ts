import { afterAll, describe, expect, it } from 'vitest';
import { Queue } from 'bullmq';
import { listStuckRuns, runNeeds, STATE_LIVENESS, type Db } from '@gatehouse/ledger';
import { startPrivateRedis, type PrivateRedis } from '@gatehouse/test-harness';
import { sql } from 'kysely';
import {
  approve,
  call,
  cli,
  fc,
  fixtures,
  msg,
  refunds,
  SECRET,
  sleep,
  startHuntStack,
  submit,
  tokenFor,
  waitFor,
  type HuntStack,
} from '../hard-cases/helpers.ts';

// Redis restarted without persistence while tickets are in flight: the ledger, not Redis, decides
// liveness. The executor's watchdog finds runs whose job vanished and re-drives them with the same
// job ids; without it (control removed) those runs wait forever. Each scenario runs its own stack
// on its own redis-server, which the test kills and replaces with an empty one on the same port.

const TERMINAL = ['completed', 'stopped', 'needs_reconciliation'];
/** A run is done for this test when terminal, or in a legitimate wait (paused, a pending approval) with a next step. */
const settledOrWaiting = (v: { state: string; nextStep?: unknown; pendingApprovals: Array<{ status: string }> }): boolean =>
  TERMINAL.includes(v.state) || ((v.state === 'paused' || v.pendingApprovals.some((p) => p.status === 'pending')) && Boolean(v.nextStep));

interface Scenario {
  s: HuntStack;
  redis: PrivateRedis;
  refund: { token: string; workflowId: string };
  reads: Array<{ token: string; workflowId: string }>;
}

const cleanups: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
});

/**
 * Brings a stack on a private redis to the moment of loss: an approved 80.00 refund whose
 * execution the audit gate holds in BullMQ's delayed set (audit service killed), and three read
 * tickets just submitted; then kills redis, starts an empty one on the same port and brings the
 * audit service back.
 */
async function loseRedisMidFlight(tag: string, extra: Record<string, string>): Promise<Scenario> {
  const redis = await startPrivateRedis();
  cleanups.push(() => redis.kill());
  const s = await startHuntStack({
    REDIS_URL: redis.url,
    AUDIT_HEALTH_MAX_HEARTBEAT_AGE_MS: '1500',
    AUDIT_HEALTH_MAX_BACKLOG_AGE_MS: '3000',
    WATCHDOG_INTERVAL_MS: '1000',
    WATCHDOG_GRACE_MS: '2000',
    ...extra,
  });
  cleanups.push(() => s.close());
  await fixtures(s, `${tag}-refund`, [fc(['issue_refund', { orderId: 'O-1007', amount: '80.00', reason: 'broken' }]), msg()]);
  const refund = await submit(s, 'rep-ana', `${tag}-refund`, 'refund 80 on O-1007');
  const pending = await waitFor(s, refund.token, refund.workflowId, (x) => x.pendingApprovals.length === 1);

  await s.stack.kill('audit', 'SIGKILL', { keepDown: true }); // no supervised restart until restart('audit')
  await sleep(2000); // the heartbeat is now older than the gate's 1.5 s
  expect((await approve(s, 'lead-eli', pending.pendingApprovals[0]!.approvalId)).status).toBe(200);
  // The executor took the approved step and held it for audit health: the job now sits in the delayed set.
  await waitFor(s, refund.token, refund.workflowId, (x) => String(x.nextStep ?? '').includes('audit'));
  const executions = new Queue('executions.rel-1', { connection: { url: redis.url }, prefix: s.prefix });
  const until = Date.now() + 30_000;
  while (((await executions.getJobCounts('delayed')).delayed ?? 0) < 1) {
    if (Date.now() > until) throw new Error('the held execution never reached the delayed set');
    await sleep(100);
  }
  await executions.close();

  const reads = [];
  for (const [i, order] of ['O-1001', 'O-1002', 'O-1003'].entries()) {
    reads.push(await submit(s, 'rep-ben', `${tag}-read-${i}`, `What is the status of order ${order}?`, 'investigate'));
  }
  await redis.kill();
  await redis.restartEmpty();
  await s.stack.restart('audit');
  return { s, redis, refund, reads };
}

/** The jobs a live run waits for that Redis does not hold (the ledger's view against the queues). */
async function missingJobs(db: Db, sc: Scenario, workflowId: string): Promise<string[]> {
  const wf = await db
    .selectFrom('workflows')
    .select(['id', 'state', 'round', 'release_id'])
    .where('id', '=', workflowId)
    .executeTakeFirstOrThrow();
  const needs = await runNeeds(db, wf);
  const out: string[] = [];
  for (const j of needs.jobs) {
    const q = new Queue(`${j.queue}.${wf.release_id}`, { connection: { url: sc.redis.url }, prefix: sc.s.prefix });
    if ((await q.getJobState(j.jobId)) === 'unknown') out.push(j.jobId);
    await q.close();
  }
  return out;
}

describe('Redis lost without persistence, tickets in flight', () => {
  it(
    'the watchdog re-drives every lost job: each run ends or waits legitimately, the approved refund executes once',
    { timeout: 600_000 },
    async () => {
      const sc = await loseRedisMidFlight('RL', {});
      const db = sc.s.db.db;
      // Generous: a job re-driven while audit was still coming back retries with the executor's
      // exponential backoff, which on a loaded machine can reach minutes; the watchdog itself acts within seconds.
      for (const r of [sc.refund, ...sc.reads]) await waitFor(sc.s, r.token, r.workflowId, settledOrWaiting, 360_000);

      const end = await waitFor(sc.s, sc.refund.token, sc.refund.workflowId, (x) => TERMINAL.includes(x.state));
      expect(end.state).toBe('completed');
      const approval = await db
        .selectFrom('approvals')
        .select('status')
        .where('workflow_id', '=', sc.refund.workflowId)
        .executeTakeFirstOrThrow();
      expect(approval.status).toBe('used');
      const action = await db
        .selectFrom('actions')
        .select('status')
        .where('workflow_id', '=', sc.refund.workflowId)
        .executeTakeFirstOrThrow();
      expect(action.status).toBe('succeeded');
      // Exactly one refund per idempotency key at the payments ledger.
      const paid = await refunds(sc.s, 'O-1007');
      expect(paid.map((r) => r.amountCents)).toEqual([8000]);
      expect(new Set(paid.map((r) => r.idempotencyKey)).size).toBe(paid.length);

      // The re-drive is audited (and so counted by gatehouse.watchdog.redrives).
      // One statement, one snapshot: read as two, an event the audit service chains in between is in neither.
      const redriven = (
        await sql<{
          event: { type: string; runId: string; outcome: string };
        }>`select event from audit_log union all select event from audit_outbox`.execute(db)
      ).rows
        .map((r) => r.event)
        .filter((e) => e.type === 'run.redriven' && e.runId === sc.refund.workflowId);
      expect(redriven.map((e) => e.outcome)).toContain('executions:missing');
      // Nothing is left stuck, even judged a whole bound later.
      const later = Date.now() + Math.max(...Object.values(STATE_LIVENESS).map((b) => (Number.isFinite(b.boundMs) ? b.boundMs : 0)));
      const stuck = (await listStuckRuns(db, later)).filter((r) => [sc.refund, ...sc.reads].some((x) => x.workflowId === r.workflowId));
      expect(stuck.filter((r) => r.waitingFor.length > 0)).toEqual([]);
    },
  );

  it(
    'control removed (watchdog off): the same loss leaves the approved refund stuck, its execution gone, listed as stuck',
    { timeout: 600_000 },
    async () => {
      const sc = await loseRedisMidFlight('RLc', { GATEHOUSE_TEST_DISABLE_WATCHDOG: '1' });
      const db = sc.s.db.db;
      // The rest of the system works again: a ticket submitted after the loss completes.
      const probe = await submit(sc.s, 'rep-ben', 'RLc-probe', 'What is the status of order O-1004?', 'investigate');
      expect((await waitFor(sc.s, probe.token, probe.workflowId, (x) => TERMINAL.includes(x.state), 120_000)).state).toBe('completed');
      // Audit is healthy again (the executor would run the step if it had the job): wait for the heartbeat.
      const until = Date.now() + 60_000;
      for (;;) {
        const hb = await db.selectFrom('audit_heartbeat').select('beat_at').executeTakeFirst();
        if (hb && Date.now() - new Date(hb.beat_at).getTime() < 1000) break;
        if (Date.now() > until) throw new Error('audit heartbeat never came back');
        await sleep(200);
      }

      const wf = await db.selectFrom('workflows').select(['state']).where('id', '=', sc.refund.workflowId).executeTakeFirstOrThrow();
      expect(TERMINAL).not.toContain(wf.state);
      const approval = await db
        .selectFrom('approvals')
        .select('status')
        .where('workflow_id', '=', sc.refund.workflowId)
        .executeTakeFirstOrThrow();
      expect(approval.status).toBe('approved'); // approved, never used
      expect(await refunds(sc.s, 'O-1007')).toEqual([]);
      const missing = await missingJobs(db, sc, sc.refund.workflowId);
      expect(missing.some((id) => id.startsWith('exec_'))).toBe(true);
      // Judged past its bound, the run is listed as stuck, waiting for that execution, never re-driven.
      const later = Date.now() + STATE_LIVENESS.executing.boundMs + STATE_LIVENESS.awaiting_approval.boundMs;
      const stuck = (await listStuckRuns(db, later)).find((r) => r.workflowId === sc.refund.workflowId);
      expect(stuck?.waitingFor.some((id) => id.startsWith('exec_'))).toBe(true);
      expect(stuck?.watchdog).toBeNull();

      // On-call sees it: once its bound has passed (time moved on in the ledger), `gatehouse
      // reconcile` and the ops dashboard list it with the execution it waits for.
      await sql`UPDATE workflows SET updated_at = now() - interval '10 minutes' WHERE id = ${sc.refund.workflowId}`.execute(db);
      const printed = await cli(sc.s, ['reconcile']);
      const line = printed.split('\n').find((l) => l.includes(sc.refund.workflowId)) ?? '';
      expect(line).toMatch(/waiting-for=exec_/);
      expect(line).toMatch(/watchdog: not re-driven/);
      const ops = await call('GET', `${sc.s.url('ops')}/api/workflows/stuck`, await tokenFor('ops-gus', SECRET));
      expect(ops.status).toBe(200);
      const listed = (ops.body.runs as Array<{ workflowId: string; waitingFor: string[] }>).find(
        (r) => r.workflowId === sc.refund.workflowId,
      );
      expect(listed?.waitingFor.some((id) => id.startsWith('exec_'))).toBe(true);
    },
  );
});
