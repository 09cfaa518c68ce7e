// R10, the tenant's daily refund cap, under concurrency on a real Postgres: refunds of one tenant
// on different orders, by different users, decided at once behind a barrier, never add up past
// the cap — the tenant-day lock serializes the read of the tenant's day and the write of the
// decision (docs/decisions/0190-tenant-daily-refund-cap.md). Without the limit locks they do.
import { randomBytes, randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDb, inTransaction, type Db } from '@gatehouse/ledger';
import { createAction } from '@gatehouse/testing';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { findTool } from '@gatehouse/tools';
import { evaluateSupport, loadActiveSupportBundle, loadSupportFacts, refundLimitKeys, type SupportBundle } from '../src/index.ts';
import { resetTestFaultsForTests } from '@gatehouse/contracts';

const p2 = loadActiveSupportBundle('support-p2');
/** A small cap so a handful of refunds reach it: three refunds of 3000 fit in 10000, a fourth does not. */
const CAP = 10_000;
const AMOUNT = 3_000;
const bundle: SupportBundle = { ...p2, limits: { ...p2.limits, tenantRolling24hCents: CAP } };
const tool = findTool('issue_refund')!;
const WORKERS = 8;
const TRIALS = Number(process.env.TENANT_CAP_TRIALS ?? 100);
const USERS = ['rep-ana', 'rep-ben'] as const;

let tdb: TestDatabase;
let pool: Db;
/** One workflow per worker (users alternate), each in quillfeather; each trial adds one action version. */
const lanes: Array<{ workflowId: string; proposalId: string; userId: string }> = [];

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
 * One refund decision as the gateway makes it under support-p2 (R10 on: the tenant-day lock and
 * sum), each worker on its own order so R4/R7 never decide, and an ALLOW recorded as a queued
 * refund (`approved`, created now: inside the tenant's rolling day), which the next decision counts.
 */
async function decide(lane: (typeof lanes)[number], version: number, orderId: string, ready: () => Promise<void>): Promise<string> {
  return inTransaction(pool, async (trx) => {
    await sql`SELECT 1`.execute(trx);
    await ready();
    const wf = { tenant: 'quillfeather', user_id: lane.userId, mode: 'act' as const, state: 'investigating' };
    const args = { orderId, amountCents: AMOUNT, reason: 'damaged item' };
    const order = { id: orderId, tenant: 'quillfeather', region: 'US', paid: 50_000, status: 'shipped' };
    const d = evaluateSupport(await loadSupportFacts(trx, wf, { tool, args }, order, { tenantCap: true }), bundle);
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
          policy_revision: 'support-p2',
          status: 'approved',
          operation_key: `${lane.workflowId}:action:${version}`,
          release_id: 'rel-2',
          facts: JSON.stringify({}),
        })
        .execute();
    }
    return `${d.decision}:${d.ruleId}`;
  });
}

/** Runs one trial: every worker decides at once on its own order; the trial's refunds are then
 * marked denied, so they leave the tenant's day and the next trial starts from zero. */
async function trial(t: number, prefix: string): Promise<string[]> {
  const ready = barrier(WORKERS);
  const outcomes = await Promise.all(lanes.map((lane, i) => decide(lane, t + 2, `${prefix}-${t}-${i}`, ready)));
  await pool.updateTable('actions').set({ status: 'denied' }).where('status', '=', 'approved').execute();
  return outcomes;
}

describe('R10 tenant daily cap under concurrency', () => {
  beforeAll(async () => {
    tdb = await createTestDatabase();
    pool = createDb(tdb.url, WORKERS + 2);
    for (let i = 0; i < WORKERS; i++) {
      const userId = USERS[i % USERS.length]!;
      const seeded = await createAction(tdb.db, { orderId: `SEED-${i}`, amountCents: 1, userId });
      await tdb.db.updateTable('actions').set({ status: 'denied' }).where('id', '=', seeded.actionId).execute();
      const p = await tdb.db.selectFrom('proposals').select('id').where('workflow_id', '=', seeded.workflowId).executeTakeFirstOrThrow();
      lanes.push({ workflowId: seeded.workflowId, proposalId: p.id, userId });
    }
  });
  afterAll(async () => {
    await pool?.destroy();
    await tdb?.drop();
  });

  it(`${WORKERS} concurrent refunds of one tenant (other orders, two users) never exceed its daily cap (× ${TRIALS})`, async () => {
    for (let t = 0; t < TRIALS; t++) {
      const outcomes = await trial(t, 'C');
      // 3 × 3000 = 9000 ≤ 10000; a fourth would make 12000: exactly three ALLOW, whatever the interleaving.
      const allowed = outcomes.filter((o) => o === 'ALLOW:ALL');
      expect(allowed, `trial ${t}: ${outcomes.join(' ')}`).toHaveLength(Math.floor(CAP / AMOUNT));
      expect(allowed.length * AMOUNT).toBeLessThanOrEqual(CAP);
      expect(outcomes.filter((o) => o !== 'ALLOW:ALL').every((o) => o === 'DENY:R10')).toBe(true);
    }
  });

  it('control removed: without the limit locks concurrent refunds of one tenant exceed its daily cap', async () => {
    Object.assign(process.env, { GATEHOUSE_ENV: 'test', GATEHOUSE_TEST_DISABLE_LIMIT_LOCKS: '1' });
    resetTestFaultsForTests();
    try {
      let exceeded = 0;
      for (let t = 0; t < 50 && exceeded === 0; t++) {
        const outcomes = await trial(TRIALS + t, 'U');
        if (outcomes.filter((o) => o === 'ALLOW:ALL').length * AMOUNT > CAP) exceeded++;
      }
      expect(exceeded).toBeGreaterThan(0);
    } finally {
      delete process.env.GATEHOUSE_TEST_DISABLE_LIMIT_LOCKS;
      resetTestFaultsForTests();
    }
  });

  it("another tenant's refund is decided from its own day, without waiting, while this tenant's day is full and locked", async () => {
    // Fill quillfeather's day to the cap (recorded, inside the window), then hold its locks.
    for (let i = 0; i < 3; i++) await decide(lanes[i]!, 10_000 + i, `F-${i}`, () => Promise.resolve());
    let releaseHolder!: () => void;
    const held = new Promise<void>((r) => (releaseHolder = r));
    let locked!: () => void;
    const holding = new Promise<void>((r) => (locked = r));
    const holder = inTransaction(pool, async (trx) => {
      const wf = { tenant: 'quillfeather', user_id: 'rep-ana', mode: 'act' as const, state: 'investigating' };
      const order = { id: 'F-9', tenant: 'quillfeather', region: 'US', paid: 50_000, status: 'shipped' };
      const f = await loadSupportFacts(trx, wf, { tool, args: { orderId: 'F-9', amountCents: AMOUNT, reason: 'x' } }, order, {
        tenantCap: true,
      });
      expect(evaluateSupport(f, bundle)).toMatchObject({ decision: 'DENY', ruleId: 'R10' });
      locked();
      await held;
    });
    await holding;
    const tryDecide = (tenant: string, userId: string, orderId: string) =>
      inTransaction(pool, async (trx) => {
        await sql`SET LOCAL lock_timeout = '200ms'`.execute(trx);
        const wf = { tenant, user_id: userId, mode: 'act' as const, state: 'investigating' };
        const order = { id: orderId, tenant, region: 'US', paid: 10_000, status: 'shipped' };
        const f = await loadSupportFacts(trx, wf, { tool, args: { orderId, amountCents: AMOUNT, reason: 'x' } }, order, {
          tenantCap: true,
        });
        return { decision: evaluateSupport(f, bundle), tenantDay: f.tenantRefunds24hCents };
      });
    try {
      await expect(tryDecide('northwind', 'rep-ivy', 'N-2001')).resolves.toMatchObject({ decision: { decision: 'ALLOW' }, tenantDay: 0 });
      // Another user and order of the full tenant do wait — on the tenant's day (and hour).
      await expect(tryDecide('quillfeather', 'rep-ben', 'G-1')).rejects.toMatchObject({ code: '55P03' });
    } finally {
      releaseHolder();
      await holder;
      await pool.updateTable('actions').set({ status: 'denied' }).where('status', '=', 'approved').execute();
    }
  });

  it('names the tenant-day lock only when the bundle runs R10', () => {
    expect(refundLimitKeys('quillfeather', 'rep-ana', 'O-1002', { tenantDay: true })).toContain('refund-tenant-24h:quillfeather');
    expect(refundLimitKeys('quillfeather', 'rep-ana', 'O-1002')).not.toContain('refund-tenant-24h:quillfeather');
  });
});
