// Refund limits under concurrency, on a real Postgres: decisions that read and then add to the
// same limit are serialized (a barrier of eight refunds on one order never exceeds the amount paid
// nor dodges the auto limit), and decisions of different tenants never wait on each other.
import { randomBytes, randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDb, inTransaction, type Db } from '@gatehouse/ledger';
import { createAction } from '@gatehouse/testing';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { findTool } from '@gatehouse/tools';
import { evaluateSupport, loadActiveSupportBundle, loadSupportFacts, refundLimitKeys, type SupportFacts } from '../src/index.ts';
import { resetTestFaultsForTests } from '@gatehouse/contracts';

const bundle = loadActiveSupportBundle('support-p1');
const tool = findTool('issue_refund')!;
const WORKERS = 8;
const TRIALS = Number(process.env.REFUND_LIMIT_TRIALS ?? 200);
const PAID = 10_000;
const AMOUNT = 3_000;

let tdb: TestDatabase;
/** A pool with a connection for every worker and the holder (the test database's own has 5). */
let pool: Db;
/** One workflow and proposal per concurrent worker; each trial adds one action version to it. */
const lanes: Array<{ workflowId: string; proposalId: string }> = [];

const order = (id: string, tenant = 'quillfeather'): NonNullable<SupportFacts['order']> => ({
  id,
  tenant,
  region: 'US',
  paid: PAID,
  status: 'shipped',
});

/** A promise every caller awaits until `n` have arrived: the concurrent decisions start together. */
function barrier(n: number): () => Promise<void> {
  let arrived = 0;
  let release!: () => void;
  const all = new Promise<void>((r) => (release = r));
  return () => {
    if (++arrived === n) release();
    return all;
  };
}

/**
 * One refund decision as the gateway makes it: facts (under the limit locks) and rules in one
 * transaction, and an ALLOW recorded as a queued refund (`approved`), which the next decision
 * counts. The action is backdated past the rolling windows so trials do not add up in R5/R6.
 */
async function decide(lane: (typeof lanes)[number], version: number, orderId: string, ready: () => Promise<void>): Promise<string> {
  return inTransaction(pool, async (trx) => {
    await sql`SELECT 1`.execute(trx);
    await ready();
    const wf = { tenant: 'quillfeather', user_id: 'rep-ana', mode: 'act' as const, state: 'investigating' };
    const args = { orderId, amountCents: AMOUNT, reason: 'damaged item' };
    const d = evaluateSupport(await loadSupportFacts(trx, wf, { tool, args }, order(orderId)), bundle);
    if (d.decision === 'ALLOW') {
      await trx
        .insertInto('actions')
        .values({
          id: randomUUID(),
          workflow_id: lane.workflowId,
          proposal_id: lane.proposalId,
          call_id: `call_${randomBytes(6).toString('hex')}`,
          version,
          tool: 'issue_refund',
          target: orderId,
          arguments: JSON.stringify(args),
          digest: randomBytes(32).toString('hex'),
          decision: 'ALLOW',
          rule_id: 'ALL',
          policy_revision: 'support-p1',
          status: 'approved',
          operation_key: `${lane.workflowId}:action:${version}`,
          release_id: 'rel-1',
          facts: JSON.stringify({}),
          created_at: new Date(Date.now() - 25 * 3_600_000),
        })
        .execute();
    }
    return `${d.decision}:${d.ruleId}`;
  });
}

describe('refund limits without a global lock', () => {
  beforeAll(async () => {
    tdb = await createTestDatabase();
    pool = createDb(tdb.url, WORKERS + 2);
    for (let i = 0; i < WORKERS; i++) {
      const seeded = await createAction(tdb.db, { orderId: `SEED-${i}`, amountCents: 1 });
      await tdb.db.updateTable('actions').set({ status: 'denied' }).where('id', '=', seeded.actionId).execute();
      const p = await tdb.db.selectFrom('proposals').select('id').where('workflow_id', '=', seeded.workflowId).executeTakeFirstOrThrow();
      lanes.push({ workflowId: seeded.workflowId, proposalId: p.id });
    }
  });
  afterAll(async () => {
    await pool?.destroy();
    await tdb?.drop();
  });

  it(`${WORKERS} concurrent refunds on one order never exceed the auto limit nor the amount paid (× ${TRIALS})`, async () => {
    for (let trial = 0; trial < TRIALS; trial++) {
      const orderId = `B-${trial}`;
      const ready = barrier(WORKERS);
      const outcomes = await Promise.all(lanes.map((lane) => decide(lane, trial + 2, orderId, ready)));
      // The first refund (3000) is inside the auto limit (5000); a second would make 6000, so every
      // other one needs approval: exactly one ALLOW, whatever the interleaving.
      expect(
        outcomes.filter((o) => o === 'ALLOW:ALL'),
        `trial ${trial}: ${outcomes.join(' ')}`,
      ).toHaveLength(1);
      expect(outcomes.filter((o) => o !== 'ALLOW:ALL').every((o) => o === 'REQUIRE_APPROVAL:R7')).toBe(true);
    }
  });

  it('control removed: without the limit locks concurrent refunds dodge the auto limit', async () => {
    Object.assign(process.env, { GATEHOUSE_ENV: 'test', GATEHOUSE_TEST_DISABLE_LIMIT_LOCKS: '1' });
    resetTestFaultsForTests();
    try {
      let dodged = 0;
      for (let trial = 0; trial < 50 && dodged === 0; trial++) {
        const orderId = `U-${trial}`;
        const ready = barrier(WORKERS);
        const outcomes = await Promise.all(lanes.map((lane) => decide(lane, TRIALS + trial + 2, orderId, ready)));
        if (outcomes.filter((o) => o === 'ALLOW:ALL').length > 1) dodged++;
      }
      expect(dodged).toBeGreaterThan(0);
    } finally {
      delete process.env.GATEHOUSE_TEST_DISABLE_LIMIT_LOCKS;
      resetTestFaultsForTests();
    }
  });

  it('a decision of another tenant does not wait for one holding the limits of this tenant', async () => {
    let releaseHolder!: () => void;
    const held = new Promise<void>((r) => (releaseHolder = r));
    let locked!: () => void;
    const holding = new Promise<void>((r) => (locked = r));
    const holder = inTransaction(pool, async (trx) => {
      const wf = { tenant: 'quillfeather', user_id: 'rep-ana', mode: 'act' as const, state: 'investigating' };
      await loadSupportFacts(trx, wf, { tool, args: { orderId: 'O-1002', amountCents: 100, reason: 'x' } }, order('O-1002'));
      locked();
      await held;
    });
    await holding;
    /** A decision that gives up at once (55P03) if it would wait on a lock. */
    const tryDecide = (tenant: string, userId: string, orderId: string) =>
      inTransaction(pool, async (trx) => {
        await sql`SET LOCAL lock_timeout = '200ms'`.execute(trx);
        const wf = { tenant, user_id: userId, mode: 'act' as const, state: 'investigating' };
        return evaluateSupport(
          await loadSupportFacts(trx, wf, { tool, args: { orderId, amountCents: 100, reason: 'x' } }, order(orderId, tenant)),
          bundle,
        );
      });
    try {
      await expect(tryDecide('northwind', 'rep-ivy', 'N-2001')).resolves.toMatchObject({ decision: 'ALLOW' });
      // The same order does wait: the locks are real.
      await expect(tryDecide('quillfeather', 'rep-ben', 'O-1002')).rejects.toMatchObject({ code: '55P03' });
    } finally {
      releaseHolder();
      await holder;
    }
  });

  it('names one lock per competing limit, each scoped to the tenant', () => {
    expect(refundLimitKeys('quillfeather', 'rep-ana', 'O-1002')).toEqual([
      'refund-basis:quillfeather:O-1002',
      'refund-user-24h:quillfeather:rep-ana',
      'refund-agent-1h:quillfeather',
    ]);
  });
});
