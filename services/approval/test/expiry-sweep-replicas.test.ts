import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { createLogger, createRedis, OutboxRelay, QueueRegistry } from '@gatehouse/platform';
import type { Db } from '@gatehouse/ledger';
import { sweepExpiredApprovals } from '../src/jobs/expiry.sweep.ts';
// @gatehouse/testing is not linked into this service's node_modules; imported by path.
import { createAction } from '@gatehouse/testing';
import { createTestDatabase, dropQueuePrefix, testQueuePrefix, TEST_REDIS_URL, type TestDatabase } from '@gatehouse/test-harness';

// Two approval replicas run the expiry sweep on their own timers (docs/decisions/0195-services-as-replicas.md):
// sweeping at the same moment, each expired approval must be expired, audited and answered once.

const APPROVALS = 8;
const ROUNDS = 5;
let t: TestDatabase;
let db: Db;
let prefix: string;
let redis: ReturnType<typeof createRedis>;
let relay: OutboxRelay;

beforeAll(async () => {
  t = await createTestDatabase();
  db = t.db;
  prefix = testQueuePrefix();
  redis = createRedis(TEST_REDIS_URL);
  relay = new OutboxRelay(db, new QueueRegistry(redis, prefix), createLogger('approval-test'));
});
afterAll(async () => {
  redis?.disconnect();
  await dropQueuePrefix(TEST_REDIS_URL, prefix);
  await t?.drop();
});

/** `n` runs waiting on a refund approval that expired a minute ago. */
async function expiredApprovals(n: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < n; i++) {
    const a = await createAction(db, { orderId: `O-${4000 + i}`, amountCents: 8000, pendingApproval: { expiresInMs: -60_000 } });
    ids.push(a.approvalId!);
  }
  return ids;
}

/** Per approval: its `approval.decided` expired events and the `results` outbox rows of its run. */
async function evidence(ids: string[]): Promise<Array<{ audited: number; answered: number }>> {
  return Promise.all(
    ids.map(async (id) => {
      const audited = await sql<{ n: string }>`select count(*) as n from audit_outbox
        where event->>'type' = 'approval.decided' and event->>'approvalId' = ${id} and event->>'outcome' = 'expired'`.execute(db);
      const answered = await sql<{
        n: string;
      }>`select count(*) as n from outbox o join approvals a on o.payload->>'workflowId' = a.workflow_id::text
        where a.id = ${id} and o.queue like 'results.%'`.execute(db);
      return { audited: Number(audited.rows[0]!.n), answered: Number(answered.rows[0]!.n) };
    }),
  );
}

/** Rounds of two sweeps started together over fresh expired approvals; per round, the evidence per approval and what each sweep reported. */
async function race(onlyPending?: boolean): Promise<Array<{ swept: number[]; per: Array<{ audited: number; answered: number }> }>> {
  const out = [];
  for (let r = 0; r < ROUNDS; r++) {
    const ids = await expiredApprovals(APPROVALS);
    const swept = await Promise.all([sweepExpiredApprovals({ db, relay, onlyPending }), sweepExpiredApprovals({ db, relay, onlyPending })]);
    out.push({ swept, per: await evidence(ids) });
  }
  return out;
}

describe('approval expiry sweep run by two replicas at once', () => {
  it('each expired approval is expired, audited and answered exactly once', async () => {
    for (const round of await race()) {
      expect(round.swept[0]! + round.swept[1]!).toBe(APPROVALS);
      expect(round.per).toEqual(Array.from({ length: APPROVALS }, () => ({ audited: 1, answered: 1 })));
    }
    const states = await db.selectFrom('approvals').select('status').distinct().execute();
    expect(states.map((s) => s.status)).toEqual(['expired']);
  }, 120_000);

  it("control removed (no `status = 'pending'` condition): a concurrent sweep expires and audits them again", async () => {
    const rounds = await race(false);
    expect(rounds.some((r) => r.per.some((p) => p.audited > 1))).toBe(true);
  }, 120_000);
});
