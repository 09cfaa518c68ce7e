import { beforeAll, describe, expect, it } from 'vitest';
import { AS_A_NEW_TICKET } from '@gatehouse/contracts';
import { loadActiveBundles } from '@gatehouse/policy';
import { drainRelease, quarantineRelease, resumeRelease } from '@gatehouse/operations';
import { routeRelease } from '@gatehouse/ledger';
import { processApprovalRequest } from '@gatehouse/approval';
import { approvalApi } from '../support/approval-api.ts';
import { useReleaseSuite } from '../support/release-suite.ts';
import { candidateRefund as candidateRefundOf, openWritableCanary } from '../support/writable-canary.ts';

// docs/decisions/0711-a-quarantine-stops-every-live-run.md: `queues quarantine --release C` sets
// C's queued jobs aside and stops C's runs. It chose the runs by what Redis had queued at that
// moment, so a run of C with no job queued — one waiting on a lead's approval, or one whose job a
// Redis restarted empty had lost — stayed live on C: the command said it was done (exit 0), and a
// lead's later approval still queued the refund's execution on C, where it waits for ever or runs
// as soon as C's queues are resumed. The ledger, not Redis, says which runs are C's.

const HMAC = 'test-audit-hmac-key-0123456789';
const op = { operator: 'ops-gus', hmacKey: HMAC };
const t = useReleaseSuite();

beforeAll(() => openWritableCanary(t, op));

const candidateRefund = (cents: number) => candidateRefundOf(t.db, cents);

/** The run's state and stop reason. */
async function run(workflowId: string) {
  return t.db.selectFrom('workflows').select(['state', 'stop_reason']).where('id', '=', workflowId).executeTakeFirstOrThrow();
}

describe('queues quarantine stops every live run of the release, not only the runs with a job queued', () => {
  it('a run waiting on a lead and a run whose job Redis lost end stopped(quarantined); the lead can no longer grant the refund', async () => {
    const bundles = loadActiveBundles({ support: 'support-p2', change: 'change-c1' });
    const waiting = await candidateRefund(12000);
    expect(await processApprovalRequest(waiting.job, { db: t.db, bundles })).toBe('opened');
    const approval = await t.db.selectFrom('approvals').select('id').where('action_id', '=', waiting.actionId).executeTakeFirstOrThrow();
    const lost = await candidateRefund(13000); // its approval request was queued on a Redis that restarted empty

    await drainRelease(t.db, t.queues, 'rel-2', op);
    const report = await quarantineRelease(t.db, t.queues, 'rel-2', op);

    expect(await run(waiting.workflowId)).toEqual({ state: 'stopped', stop_reason: 'quarantined' });
    expect(await run(lost.workflowId)).toEqual({ state: 'stopped', stop_reason: 'quarantined' });
    // The same ticket id gives back this run: the next step says to ask again under a new one (ADR 0782).
    const shown = await t.db.selectFrom('workflows').select('next_step').where('id', '=', waiting.workflowId).executeTakeFirstOrThrow();
    expect(shown.next_step).toContain(AS_A_NEW_TICKET);
    expect(report).toEqual({ jobs: 0, runs: 2 });
    // The lead's decision comes too late: nothing is queued for the quarantined release.
    expect((await approvalApi(t.db).decide('lead-eli', approval.id)).status).not.toBe(200);
    const executions = await t.db.selectFrom('outbox').select('payload').where('queue', 'like', 'executions.%').execute();
    expect(executions.filter((e) => (e.payload as { workflowId?: string }).workflowId === waiting.workflowId)).toEqual([]);
    const audit = await t.db
      .selectFrom('audit_outbox')
      .select((eb) => eb.ref('event', '->>').key('outcome').as('outcome'))
      .where((eb) => eb(eb.ref('event', '->>').key('type'), '=', 'queues.quarantined'))
      .execute();
    expect(audit.map((e) => e.outcome)).toEqual(['jobs:0;workflows:2']);
  }, 120_000);

  it('a drained or quarantined candidate takes no new tickets: its cohort runs on the active release until resume (ADR 0712)', async () => {
    const ana = { id: 'rep-ana', tenant: 'quillfeather' };
    await resumeRelease(t.db, t.queues, 'rel-2', op);
    expect(await routeRelease(t.db, ana, 'none')).toBe('rel-2');
    await drainRelease(t.db, t.queues, 'rel-2', op);
    expect(await routeRelease(t.db, ana, 'none')).toBe('rel-1');
    await quarantineRelease(t.db, t.queues, 'rel-2', op);
    expect(await routeRelease(t.db, ana, 'none')).toBe('rel-1');
    await resumeRelease(t.db, t.queues, 'rel-2', op);
    expect(await routeRelease(t.db, ana, 'none')).toBe('rel-2');
  }, 120_000);
});
