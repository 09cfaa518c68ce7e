// Refunds on different orders and tenants never wait on one another (docs/decisions/0191-limit-
// contention-between-competitors.md): refund decisions of eight tenants, started together behind
// a barrier, all hold every limit lock they need (order basis, user day, tenant hour, tenant day)
// at the same moment — a second barrier inside the transaction that only opens when all of them
// hold their locks, with `lock_timeout` 100 ms: a decision that had to wait for another could not
// reach it and fails 55P03. Within a tenant, user X's and user Y's refunds do not share R5's lock.
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_WORLD_PATH, resetTestFaultsForTests } from '@gatehouse/contracts';
import { createDb, type Db } from '@gatehouse/ledger';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { findTool } from '@gatehouse/tools';
import { advisoryLockId, evaluateSupport, loadActiveSupportBundle, loadSupportFacts, refundLimitKeys } from '../src/index.ts';

const TENANTS = 8;
const TRIALS = Number(process.env.REFUND_ISOLATION_TRIALS ?? 30);
const tool = findTool('issue_refund')!;

// A world with eight more tenants, one rep each (the shipped world has two tenants).
const worldDir = mkdtempSync(resolve(tmpdir(), 'gh-world-'));
const world = JSON.parse(readFileSync(DEFAULT_WORLD_PATH, 'utf8')) as {
  tenants: Array<Record<string, unknown>>;
  users: Array<Record<string, unknown>>;
};
for (let i = 0; i < TENANTS; i++) {
  world.tenants.push({ id: `iso-${i}`, name: `Isolated ${i}`, regions: ['US'] });
  world.users.push({ id: `rep-iso-${i}`, tenant: `iso-${i}`, role: 'rep', region: 'US', scopes: ['orders:read', 'refund:create'] });
}
const savedWorld = process.env.GATEHOUSE_WORLD;
process.env.GATEHOUSE_WORLD = resolve(worldDir, 'world.json');
writeFileSync(process.env.GATEHOUSE_WORLD, JSON.stringify(world));

const bundle = loadActiveSupportBundle('support-p2');

let tdb: TestDatabase;
let pool: Db;

/** A promise every caller awaits until `n` have arrived. */
function barrier(n: number): () => Promise<void> {
  let arrived = 0;
  let release!: () => void;
  const all = new Promise<void>((r) => (release = r));
  return () => {
    if (++arrived === n) release();
    return all;
  };
}

interface Refund {
  tenant: string;
  userId: string;
  orderId: string;
}

/**
 * Decides every refund at once, each in its own transaction (no retry) with `lock_timeout`
 * 100 ms, under support-p2's locks (R10 on). Each holds its limit locks until every decision holds
 * them. Returns `<decision>:<rule>` per refund, or `WAITED` for one that had to wait (55P03).
 */
async function holdTogether(refunds: Refund[]): Promise<string[]> {
  const start = barrier(refunds.length);
  const holding = barrier(refunds.length);
  return Promise.all(
    refunds.map((r) =>
      pool
        .transaction()
        .execute(async (trx) => {
          await sql`SET LOCAL lock_timeout = '100ms'`.execute(trx);
          await start();
          const wf = { tenant: r.tenant, user_id: r.userId, mode: 'act' as const, state: 'investigating' };
          const order = { id: r.orderId, tenant: r.tenant, region: 'US', paid: 10_000, status: 'shipped' };
          const parsed = { tool, args: { orderId: r.orderId, amountCents: 1000, reason: 'x' } };
          let facts: Awaited<ReturnType<typeof loadSupportFacts>>;
          try {
            facts = await loadSupportFacts(trx, wf, parsed, order, { tenantCap: true });
          } catch (err) {
            void holding(); // a decision that gave up waiting still lets the others through
            throw err;
          }
          await holding();
          const d = evaluateSupport(facts, bundle);
          return `${d.decision}:${d.ruleId}`;
        })
        .catch((err: unknown) => {
          if ((err as { code?: string }).code === '55P03') return 'WAITED';
          throw err;
        }),
    ),
  );
}

const eightTenants = (trial: number): Refund[] =>
  Array.from({ length: TENANTS }, (_, i) => ({ tenant: `iso-${i}`, userId: `rep-iso-${i}`, orderId: `I-${trial}-${i}` }));

describe('refunds on different orders and tenants never wait on one another', () => {
  beforeAll(async () => {
    tdb = await createTestDatabase();
    pool = createDb(tdb.url, TENANTS + 2);
  });
  afterAll(async () => {
    await pool?.destroy();
    await tdb?.drop();
    if (savedWorld === undefined) delete process.env.GATEHOUSE_WORLD;
    else process.env.GATEHOUSE_WORLD = savedWorld;
  });

  it(`${TENANTS} tenants' refund decisions hold all their limit locks at the same moment (× ${TRIALS})`, async () => {
    for (let trial = 0; trial < TRIALS; trial++) {
      const outcomes = await holdTogether(eightTenants(trial));
      expect(outcomes, `trial ${trial}`).toEqual(Array.from({ length: TENANTS }, () => 'ALLOW:ALL'));
    }
  });

  it('the test sees waiting: two refunds of one tenant (other orders, other users) cannot hold their locks together', async () => {
    const refunds = eightTenants(TRIALS);
    refunds[1] = { tenant: 'quillfeather', userId: 'rep-ana', orderId: 'O-1002' };
    refunds[2] = { tenant: 'quillfeather', userId: 'rep-ben', orderId: 'O-1001' };
    const outcomes = await holdTogether(refunds);
    // They share the tenant's hour (R6) and day (R10): one of the two waits, every other tenant goes on.
    expect(outcomes.filter((o) => o === 'WAITED')).toHaveLength(1);
    expect(outcomes.filter((o, i) => i !== 1 && i !== 2)).toEqual(Array.from({ length: TENANTS - 2 }, () => 'ALLOW:ALL'));
  });

  it('control removed: with one lock shared by every refund decision (the former global lock), other tenants wait', async () => {
    Object.assign(process.env, { GATEHOUSE_ENV: 'test', GATEHOUSE_TEST_SHARED_LIMIT_LOCK: '1' });
    resetTestFaultsForTests();
    try {
      const outcomes = await holdTogether(eightTenants(TRIALS + 1));
      expect(outcomes.filter((o) => o === 'WAITED')).toHaveLength(TENANTS - 1);
    } finally {
      delete process.env.GATEHOUSE_TEST_SHARED_LIMIT_LOCK;
      resetTestFaultsForTests();
    }
  });

  it("user X's and user Y's refunds in one tenant do not share R5's lock (nor an order's): Y decides while X's are held", async () => {
    const [basisX, dayX] = refundLimitKeys('quillfeather', 'rep-ana', 'O-1002');
    let releaseHolder!: () => void;
    const held = new Promise<void>((r) => (releaseHolder = r));
    let locked!: () => void;
    const holding = new Promise<void>((r) => (locked = r));
    // X's order basis and X's rolling day, held as a decision of X holds them.
    const holder = pool.transaction().execute(async (trx) => {
      await sql`SELECT pg_advisory_xact_lock(${advisoryLockId(basisX!)}::bigint), pg_advisory_xact_lock(${advisoryLockId(dayX!)}::bigint)`.execute(
        trx,
      );
      locked();
      await held;
    });
    await holding;
    const tryDecide = (r: Refund) =>
      pool.transaction().execute(async (trx) => {
        await sql`SET LOCAL lock_timeout = '100ms'`.execute(trx);
        const wf = { tenant: r.tenant, user_id: r.userId, mode: 'act' as const, state: 'investigating' };
        const order = { id: r.orderId, tenant: r.tenant, region: 'US', paid: 50_000, status: 'shipped' };
        const f = await loadSupportFacts(trx, wf, { tool, args: { orderId: r.orderId, amountCents: 1000, reason: 'x' } }, order, {
          tenantCap: true,
        });
        return evaluateSupport(f, bundle).decision;
      });
    try {
      await expect(tryDecide({ tenant: 'quillfeather', userId: 'rep-ben', orderId: 'O-1004' })).resolves.toBe('ALLOW');
      // X's own next refund, on another order, waits on X's day (R5): the lock is real.
      await expect(tryDecide({ tenant: 'quillfeather', userId: 'rep-ana', orderId: 'O-1004' })).rejects.toMatchObject({ code: '55P03' });
      // Y's refund on X's order waits on the order's basis (R4, R7).
      await expect(tryDecide({ tenant: 'quillfeather', userId: 'rep-ben', orderId: 'O-1002' })).rejects.toMatchObject({ code: '55P03' });
    } finally {
      releaseHolder();
      await holder;
    }
  });
});
