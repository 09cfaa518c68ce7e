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
  shipments,
  fault,
  sleep,
  call,
  waitUntil,
  refunds,
  view,
  type Entry,
  type HuntStack,
} from './helpers.ts';
import { freePort } from '@gatehouse/test-harness';
import { TcpCut } from '@gatehouse/test-harness';

// Outage time is not the run's working time (docs/decisions/0110-outage-time.md): a step waiting
// on an unavailable dependency is held, and the wait is credited to the run's deadline like a
// person's wait — up to a ceiling, past which the run stops `dependency_unavailable`. The budget
// here is 4 s of working time and the ceiling 12 s; each outage below outlasts the budget. The
// services reach Postgres through a proxy the ledger-outage tests cut.

const BUDGET = { WALL_TIME_SECONDS: '4', DEPENDENCY_WAIT_CEILING_MS: '12000', AUDIT_HEALTH_MAX_HEARTBEAT_AGE_MS: '3000' };
const OUTAGE_MS = 7_000; // longer than the 4 s budget, shorter than the 12 s ceiling

const modelDown: Entry = { type: 'error', status: 503 };

/** Every request the model-stub answered for `ticketId`, with the status it returned. */
async function modelStatuses(s: HuntStack, ticketId: string): Promise<number[]> {
  const r = await call('GET', `${s.url('model-stub')}/requests?ticketId=${ticketId}`, null);
  return ((r.body.requests ?? []) as Array<{ status: number }>).map((x) => x.status);
}

/** The model answers 503 to every request of `ticketId` until {@link modelRecovers}. */
async function modelFailsFor(s: HuntStack, ticketId: string): Promise<void> {
  await fixtures(s, ticketId, [modelDown], true);
}

/** Queued entries are served before the repeated 503: the model answers again. */
async function modelRecovers(s: HuntStack, ticketId: string, entries: Entry[]): Promise<void> {
  await fixtures(s, ticketId, entries);
}

/** Staging's order system answers 503 to every shipment request until the faults are cleared. */
async function orderSystemDown(s: HuntStack): Promise<void> {
  await fault(s, { target: 'orders', mode: 'server_error', times: 10_000, status: 503 });
}
async function orderSystemUp(s: HuntStack): Promise<void> {
  await call('DELETE', `${s.url('staging')}/faults`, null);
}

/** Submits a ticket whose model is down, waits until the model has refused it, then lets `ms` pass. */
async function modelOutage(s: HuntStack, ticketId: string, ms: number): Promise<{ token: string; workflowId: string }> {
  await modelFailsFor(s, ticketId);
  const run = await submit(s, 'rep-ana', ticketId, 'What is the status of order O-1001?', 'investigate');
  await waitUntil(async () => (await modelStatuses(s, ticketId)).includes(503), 'the model to refuse the first round');
  await sleep(ms);
  return run;
}

/** A reship whose order system is down: waits for a refused dispatch, then lets `ms` pass. */
async function orderOutage(s: HuntStack, ticketId: string, orderId: string, ms: number): Promise<{ token: string; workflowId: string }> {
  await orderSystemDown(s);
  await fixtures(s, ticketId, [fc(['reship_order', { orderId }]), msg()]);
  const run = await submit(s, 'rep-ana', ticketId, `reship ${orderId}`);
  await waitUntil(async () => {
    const r = await call('GET', `${s.url('staging')}/requests?orderId=${orderId}&target=orders`, null);
    return ((r.body.requests ?? []) as Array<{ method: string }>).some((x) => x.method === 'POST');
  }, 'a refused shipment request');
  await sleep(ms);
  return run;
}

/**
 * The ledger goes away while a round is at the model: the model answers 503 with a 3 s
 * Retry-After, the ledger is cut as soon as that 503 is logged, so the answer that follows
 * cannot be recorded; `ms` later the ledger is back.
 */
async function ledgerOutage(s: HuntStack, pg: TcpCut, ticketId: string, ms: number): Promise<{ token: string; workflowId: string }> {
  await fixtures(s, ticketId, [
    { type: 'error', status: 503, headers: { 'retry-after-ms': '3000' } },
    msg('An answer the ledger never recorded.'),
    msg('Order O-1001 is on its way.'),
  ]);
  const run = await submit(s, 'rep-ana', ticketId, 'What is the status of order O-1001?', 'investigate');
  await waitUntil(async () => (await modelStatuses(s, ticketId)).includes(503), 'the model to ask for a retry');
  await pg.cut();
  try {
    await sleep(ms);
  } finally {
    await pg.open();
  }
  return run;
}

/** A stack whose services reach Postgres through a proxy the test can cut. */
async function stackBehindCut(extra: Record<string, string>): Promise<{ s: HuntStack; pg: TcpCut }> {
  const pg = new TcpCut(await freePort(), { host: '127.0.0.1', port: 5432 });
  await pg.open();
  return { s: await startHuntStack(extra, { pgServer: `postgres://postgres@127.0.0.1:${pg.port}` }), pg };
}

describe('outage time is not working time', () => {
  let s: HuntStack;
  let pg: TcpCut;
  beforeAll(async () => {
    ({ s, pg } = await stackBehindCut(BUDGET));
  });
  afterAll(async () => {
    await s?.close();
    await pg?.cut();
  });

  it('the model is unavailable longer than the budget, then answers: the run completes', async () => {
    const { token, workflowId } = await modelOutage(s, 'O-model', OUTAGE_MS);
    const waiting = await waitFor(s, token, workflowId, (v) => /^Waiting: the model is unavailable/.test(v.nextStep ?? ''));
    expect(waiting.state, 'still waiting, not stopped').not.toBe('stopped');
    expect(waiting.nextStep).toMatch(/the run resumes when it answers, or stops at /);
    await modelRecovers(s, 'O-model', [msg('Order O-1001 is on its way.')]);
    const end = await waitFor(s, token, workflowId, settled);
    expect(end.stopReason ?? null).toBeNull();
    expect(end.state).toBe('completed');
    // The outage was credited: the deadline moved past intake + 4 s.
    const r = await sql<{ credited: boolean }>`
      select b.deadline_at > w.created_at + interval '6 seconds' as credited
      from budgets b join workflows w on w.id = b.workflow_id where b.workflow_id = ${workflowId}`.execute(s.db.db);
    expect(r.rows[0]!.credited).toBe(true);
  });

  it('the order system is unavailable longer than the budget, then recovers: the held reship runs and the run completes', async () => {
    try {
      const { token, workflowId } = await orderOutage(s, 'O-orders', 'O-1001', OUTAGE_MS);
      expect(await shipments(s, 'O-1001')).toHaveLength(0);
      await orderSystemUp(s);
      const end = await waitFor(s, token, workflowId, settled);
      expect(end.stopReason ?? null).toBeNull();
      expect(end.state).toBe('completed');
      expect(await shipments(s, 'O-1001')).toHaveLength(1);
    } finally {
      await orderSystemUp(s);
    }
  });

  it("the order system does not answer the gateway's read for a decision: the proposal is held past its backoff and the budget, then decided, and the refund runs once", async () => {
    await s.stack.kill('staging', 'SIGKILL', { keepDown: true });
    let run: { token: string; workflowId: string };
    try {
      await fixtures(s, 'O-read', [fc(['issue_refund', { orderId: 'O-1006', amount: '10.00', reason: 'damaged' }]), msg()]);
      run = await submit(s, 'rep-ana', 'O-read', 'refund $10 on O-1006');
      // Longer than the proposals job's retries (5 attempts, about 3 s) and the 4 s budget.
      await sleep(OUTAGE_MS);
      const held = await view(s, run.token, run.workflowId);
      expect(held.state, `held, not stopped (${held.stopReason ?? ''})`).toBe('investigating');
    } finally {
      await s.stack.restart('staging');
    }
    const end = await waitFor(s, run.token, run.workflowId, settled);
    expect(end.stopReason ?? null).toBeNull();
    expect(end.state).toBe('completed');
    expect(await refunds(s, 'O-1006')).toHaveLength(1);
  });

  it('the model stays unavailable past the ceiling: stopped(dependency_unavailable) with a next step, never budget_exhausted', async () => {
    await modelFailsFor(s, 'O-model-gone');
    const { token, workflowId } = await submit(s, 'rep-ana', 'O-model-gone', 'What is the status of order O-1003?', 'investigate');
    const end = await waitFor(s, token, workflowId, settled, 60_000);
    expect(end.state).toBe('stopped');
    expect(end.stopReason).toBe('dependency_unavailable');
    expect(end.nextStep).toMatch(/^The model was unavailable for more than 12 s/);
    expect(end.nextStep).toMatch(/resubmit/);
  });

  it('the order system stays unavailable past the ceiling: the reship never runs, stopped(dependency_unavailable)', async () => {
    try {
      await orderSystemDown(s);
      await fixtures(s, 'O-orders-gone', [fc(['reship_order', { orderId: 'O-1007' }]), msg()]);
      const { token, workflowId } = await submit(s, 'rep-ana', 'O-orders-gone', 'reship O-1007');
      const end = await waitFor(s, token, workflowId, settled, 60_000);
      expect(end.state).toBe('stopped');
      expect(end.stopReason).toBe('dependency_unavailable');
      expect(end.nextStep).toMatch(/restore it/);
      expect(await shipments(s, 'O-1007')).toHaveLength(0);
      // It waited on the order system (its requests were refused), not on anything else.
      const r = await call('GET', `${s.url('staging')}/requests?orderId=O-1007&target=orders`, null);
      expect(((r.body.requests ?? []) as Array<{ method: string }>).filter((x) => x.method === 'POST').length).toBeGreaterThan(1);
    } finally {
      await orderSystemUp(s);
    }
  });

  it('audit storage stays unavailable past the ceiling: the reship is never claimed, stopped(dependency_unavailable)', async () => {
    await s.stack.kill('audit', 'SIGKILL', { keepDown: true });
    // The gate trips once the last heartbeat is older than its 3 s.
    await waitUntil(async () => {
      const r = await sql<{
        old: boolean;
      }>`select now() - beat_at > interval '3.5 seconds' as old from audit_heartbeat where id = 1`.execute(s.db.db);
      return r.rows[0]?.old === true;
    }, 'the audit heartbeat to go stale');
    await fixtures(s, 'O-audit-gone', [fc(['reship_order', { orderId: 'O-1007' }]), msg()]);
    const { token, workflowId } = await submit(s, 'rep-ana', 'O-audit-gone', 'reship O-1007');
    await waitFor(s, token, workflowId, (v) => /^Waiting: audit storage is unavailable/.test(v.nextStep ?? ''), 60_000);
    const end = await waitFor(s, token, workflowId, settled, 60_000);
    expect(end.state).toBe('stopped');
    expect(end.stopReason).toBe('dependency_unavailable');
    expect(await shipments(s, 'O-1007')).toHaveLength(0);
  });

  // Last: a ledger cut disturbs every service (audit heartbeats lapse, workers pause); the tests above need them steady.
  it('Postgres is unreachable longer than the budget while a round is at the model: once it is back the run completes', async () => {
    const { token, workflowId } = await ledgerOutage(s, pg, 'O-ledger', OUTAGE_MS);
    const end = await waitFor(s, token, workflowId, settled);
    expect(end.stopReason ?? null).toBeNull();
    expect(end.state).toBe('completed');
    expect(end.finalMessage).toBe('Order O-1001 is on its way.');
    // The round was held while the ledger was down and asked the model again once it was back.
    expect(await modelStatuses(s, 'O-ledger')).toEqual([503, 200, 200]);
  });
});

describe('control removed: outages counted as working time', () => {
  let s: HuntStack;
  let pg: TcpCut;
  beforeAll(async () => {
    ({ s, pg } = await stackBehindCut({ ...BUDGET, GATEHOUSE_TEST_DISABLE_OUTAGE_CREDIT: '1' }));
  });
  afterAll(async () => {
    await s?.close();
    await pg?.cut();
  });

  it('without the outage credit, the same model outage ends stopped(budget_exhausted)', async () => {
    const { token, workflowId } = await modelOutage(s, 'O-model-nc', OUTAGE_MS);
    await modelRecovers(s, 'O-model-nc', [msg('Order O-1001 is on its way.')]);
    const end = await waitFor(s, token, workflowId, settled);
    expect(end.state).toBe('stopped');
    expect(end.stopReason).toBe('budget_exhausted');
  });

  it('without the outage credit, the same order-system outage ends stopped(budget_exhausted) with no shipment', async () => {
    try {
      const { token, workflowId } = await orderOutage(s, 'O-orders-nc', 'O-1001', OUTAGE_MS);
      await orderSystemUp(s);
      const end = await waitFor(s, token, workflowId, settled);
      expect(end.state).toBe('stopped');
      expect(end.stopReason).toBe('budget_exhausted');
      expect(await shipments(s, 'O-1001')).toHaveLength(0);
    } finally {
      await orderSystemUp(s);
    }
  });

  // Last, as above.
  it('without the outage credit, the same ledger outage ends stopped(budget_exhausted)', async () => {
    const { token, workflowId } = await ledgerOutage(s, pg, 'O-ledger-nc', OUTAGE_MS);
    const end = await waitFor(s, token, workflowId, settled);
    expect(end.state).toBe('stopped');
    expect(end.stopReason).toBe('budget_exhausted');
  });
});
