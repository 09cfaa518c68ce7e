import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { Queue, QueueEvents } from 'bullmq';
import { startStack, type RunningStack } from '@gatehouse/cli';
import {
  startHuntStack,
  fixtures,
  fc,
  msg,
  submit,
  waitFor,
  settled,
  refunds,
  shipments,
  stagingRequests,
  fault,
  summary,
  approve,
  cli,
  sleep,
  type HuntStack,
} from './helpers.ts';

let s: HuntStack;
const extras: RunningStack[] = [];
beforeAll(async () => {
  s = await startHuntStack({
    LEASE_MS: '6000',
    EXECUTION_DEADLINE_MS: '5000',
    EXECUTOR_LOCK_MS: '4000',
    EXECUTOR_STALLED_INTERVAL_MS: '1000',
  });
});
afterAll(async () => {
  for (const e of extras) await e.stop(3000);
  await s?.close();
});

function queue() {
  const connection = { url: s.env.REDIS_URL! };
  return {
    q: new Queue('executions.rel-1', { connection, prefix: s.prefix }),
    ev: new QueueEvents('executions.rel-1', { connection, prefix: s.prefix }),
  };
}

async function opOf(actionId: string) {
  return s.db.db.selectFrom('operations').selectAll().where('action_id', '=', actionId).executeTakeFirst();
}

describe('hunt: duplicate delivery and crashes', () => {
  it('the same execution job delivered twice at once: one lease, one downstream call, both get the original outcome', async () => {
    await cli(s, ['switch', 'off', 'issue_refund']);
    await fixtures(s, 'H-conc', [fc(['issue_refund', { orderId: 'O-1008', amount: '20.00', reason: 'x' }]), msg()]);
    const { token, workflowId } = await submit(s, 'rep-ana', 'H-conc', 'refund');
    const held = await waitFor(s, token, workflowId, (x) => x.state === 'paused');
    const a = held.actions[0]!;
    await fault(s, { target: 'payments', mode: 'latency', latencyMs: 2000, times: 1 });
    await sql`update tool_switches set enabled = true where tool = 'issue_refund'`.execute(s.db.db);
    const { q, ev } = queue();
    await ev.waitUntilReady();
    const payload = { release: 'rel-1', workflowId, actionId: a.actionId, actionVersion: a.version, approvalId: null };
    const [j1, j2] = await Promise.all([
      q.add('execution', payload, { jobId: 'dupA', attempts: 12, backoff: { type: 'exponential', delay: 500 } }),
      q.add('execution', payload, { jobId: 'dupB', attempts: 12, backoff: { type: 'exponential', delay: 500 } }),
    ]);
    const outcomes = await Promise.all([j1.waitUntilFinished(ev, 60_000), j2.waitUntilFinished(ev, 60_000)]);
    console.log('concurrent outcomes', outcomes);
    await q.close();
    await ev.close();
    const end = await waitFor(s, token, workflowId, settled);
    console.log('conc', JSON.stringify(summary(end)));
    expect(await refunds(s, 'O-1008')).toHaveLength(1);
    expect((await stagingRequests(s, '?orderId=O-1008&target=payments')).filter((r) => r.method === 'POST')).toHaveLength(1);
    expect(outcomes.sort()).toEqual(['replay:succeeded', 'succeeded']);
    expect(end.state).toBe('completed');
  });

  it('executor killed after dispatch, before the record, then restarted: exactly one shipment and one refund', async () => {
    await fault(s, { target: 'orders', mode: 'latency', latencyMs: 3000, times: 1 });
    await fault(s, { target: 'payments', mode: 'latency', latencyMs: 3000, times: 1 });
    await fixtures(s, 'H-crash-ship', [fc(['reship_order', { orderId: 'O-1001' }]), msg()]);
    await fixtures(s, 'H-crash-pay', [fc(['issue_refund', { orderId: 'O-1006', amount: '20.00', reason: 'x' }]), msg()]);
    const ship = await submit(s, 'rep-ana', 'H-crash-ship', 'reship O-1001');
    const pay = await submit(s, 'rep-ben', 'H-crash-pay', 'refund O-1006');
    const vs = await waitFor(s, ship.token, ship.workflowId, (x) => x.actions.length === 1);
    const vp = await waitFor(s, pay.token, pay.workflowId, (x) => x.actions.length === 1);
    for (let i = 0; i < 100; i++) {
      const [o1, o2] = await Promise.all([opOf(vs.actions[0]!.actionId), opOf(vp.actions[0]!.actionId)]);
      if (o1?.status === 'running' && o2?.status === 'running') break;
      await sleep(50);
    }
    await sleep(500);
    // Our own child process; kept down (no supervised restart): a fresh executor takes over below.
    await s.stack.kill('executor', 'SIGKILL', { keepDown: true });
    await sleep(3500); // the downstreams finish their effects after the client left
    console.log('after crash: shipments', (await shipments(s, 'O-1001')).length, 'refunds', (await refunds(s, 'O-1006')).length);
    extras.push(await startStack({ env: s.env, dir: s.dir, only: ['executor'] }));
    const es = await waitFor(s, ship.token, ship.workflowId, settled, 100_000);
    const ep = await waitFor(s, pay.token, pay.workflowId, settled, 100_000);
    console.log('crash ship', JSON.stringify(summary(es)), 'crash pay', JSON.stringify(summary(ep)));
    const posts = (await stagingRequests(s, '?orderId=O-1001&target=orders')).filter((r) => r.method === 'POST');
    console.log('reship POSTs', posts.length);
    expect.soft(await refunds(s, 'O-1006'), 'refunds').toHaveLength(1);
    expect.soft(await shipments(s, 'O-1001'), 'shipments').toHaveLength(1);
  }, 150_000);

  it('an approval granted after a full restart of every service executes exactly once', async () => {
    await fixtures(s, 'H-restart', [fc(['issue_refund', { orderId: 'O-1002', amount: '120.00', reason: 'cracked' }]), msg()]);
    const { token, workflowId } = await submit(s, 'rep-ana', 'H-restart', 'refund 120 O-1002');
    const v = await waitFor(s, token, workflowId, (x) => x.pendingApprovals.length === 1);
    for (const e of extras.splice(0)) await e.stop(5000);
    await s.stack.stop(5000);
    s.stack = await startStack({ env: s.env, dir: s.dir });
    expect((await approve(s, 'lead-eli', v.pendingApprovals[0]!.approvalId)).status).toBe(200);
    const end = await waitFor(s, token, workflowId, settled);
    expect(end.state).toBe('completed');
    expect(await refunds(s, 'O-1002')).toHaveLength(1);
  }, 300_000); // a full stop and start of every service (up to 120 s per service to be ready on a loaded machine)
});
