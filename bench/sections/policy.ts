import { sql } from 'kysely';
import { Bench } from 'tinybench';
import { evaluateSupport, loadActiveSupportBundle, loadSupportFacts, recordedRefundsCents, type SupportFacts } from '@gatehouse/policy';
import { findTool } from '@gatehouse/tools';
import type { BenchSizes } from '../config.ts';
import { round } from '../lib/stats.ts';
import { createBenchDatabase } from '../lib/world.ts';

/** One policy task measured by tinybench: decisions per second and latency per decision (ms). */
export interface PolicyTask {
  name: string;
  /** Refund actions in the seeded ledger. */
  ledgerRefunds: number;
  decisionsPerSec: number;
  p50: number;
  p99: number;
  samples: number;
  /** Decision → count over a sample of the decisions made (they follow from the seeded ledger). */
  decisions: Record<string, number>;
  /** The ledger reads of one decision timed alone (ms): which one dominates. */
  parts?: Record<string, { p50: number; p99: number }>;
}

/** The policy benchmark (docs/decisions/0030-benchmark-method.md): the support bundle against a seeded ledger (target p99 < 2 ms). */
export interface PolicyReport {
  /** Pure rule evaluation (facts in memory). */
  pure: PolicyTask;
  /** One decision incl. its ledger reads: transaction, the limit locks, the three sums, evaluate. */
  withLedger: PolicyTask[];
}

/**
 * Seeds a database of its own with `size` refund actions (statuses mixed as a busy tenant's
 * ledger holds them, spread over 30 days, 3 users, `size / 10` orders) for each size in
 * `policyLedger`, and times decisions of a 10.00 refund on those orders with tinybench:
 * `loadSupportFacts` (its advisory lock and ledger sums, in a transaction) + `evaluateSupport`.
 * The order itself is passed in, as the gateway reads it from the order system beforehand.
 */
export async function runPolicy(sizes: BenchSizes): Promise<PolicyReport> {
  const bundle = loadActiveSupportBundle('support-p1');
  const tool = findTool('issue_refund');
  if (!tool) throw new Error('issue_refund is not in the catalog');
  const order = (id: string): NonNullable<SupportFacts['order']> => ({
    id,
    tenant: 'quillfeather',
    region: 'US',
    paid: 50_000,
    status: 'shipped',
  });
  const wf = { tenant: 'quillfeather', user_id: 'rep-ana', mode: 'act' as const, state: 'investigating' };

  const pureDecisions: Record<string, number> = {};
  const facts: SupportFacts = {
    user: { id: 'rep-ana', tenant: 'quillfeather', region: 'US', scopes: ['orders:read', 'refund:create'] },
    agentGrantedTools: ['lookup_order', 'issue_refund'],
    eligibleTools: ['lookup_order', 'issue_refund'],
    tool: { name: 'issue_refund', scope: 'refund:create' },
    args: { orderId: 'P-0001', amountCents: 1000, reason: 'damaged' },
    order: order('P-0001'),
    priorRefundsOnOrderCents: 2000,
    userRefunds24hCents: 20_000,
    agentRefunds1hCents: 50_000,
    tenantRefunds24hCents: 0,
    tenantRefundCap24hCents: null,
  };
  const pureBench = new Bench({ time: sizes.policyTimeMs });
  pureBench.add('evaluateSupport (pure)', () => {
    const d = evaluateSupport(facts, bundle);
    pureDecisions[d.decision] = (pureDecisions[d.decision] ?? 0) + 1;
  });
  await pureBench.run();
  const pure = summarize(pureBench, 0, pureDecisions);

  const withLedger: PolicyTask[] = [];
  for (const size of sizes.policyLedger) {
    const tdb = await createBenchDatabase('policy_');
    try {
      const orders = Math.max(10, Math.floor(size / 10));
      await seedLedger(tdb.db, size, orders);
      const decisions: Record<string, number> = {};
      let i = 0;
      const b = new Bench({ time: sizes.policyTimeMs });
      b.add(`decision incl. ledger reads (${size} refunds)`, async () => {
        const orderId = `P-${String(i++ % orders).padStart(4, '0')}`;
        const parsed = { tool, args: { orderId, amountCents: 1000, reason: 'damaged item' } };
        const d = await tdb.db
          .transaction()
          .execute(async (trx) => evaluateSupport(await loadSupportFacts(trx, wf, parsed, order(orderId)), bundle));
        if (i <= 2000) decisions[`${d.decision}:${d.ruleId}`] = (decisions[`${d.decision}:${d.ruleId}`] ?? 0) + 1;
      });
      await b.run();
      const task = summarize(b, size, decisions);
      // Each of the decision's three ledger sums alone (what the limit locks are held for).
      const parts = new Bench({ time: sizes.policyTimeMs / 2 });
      let j = 0;
      const orderOf = (): string => `P-${String(j++ % orders).padStart(4, '0')}`;
      parts.add('prior refunds on the order (R4, R7)', async () => {
        await recordedRefundsCents(tdb.db, { tenant: 'quillfeather', orderId: orderOf(), includeQueued: true });
      });
      parts.add("user's refunds over 24 h (R5)", async () => {
        await recordedRefundsCents(tdb.db, { tenant: 'quillfeather', userId: 'rep-ana', sinceMs: 24 * 3_600_000, includeQueued: true });
      });
      parts.add("agent's refunds over 1 h (R6)", async () => {
        await recordedRefundsCents(tdb.db, { tenant: 'quillfeather', sinceMs: 3_600_000, includeQueued: true });
      });
      await parts.run();
      task.parts = Object.fromEntries(
        parts.tasks.map((t) => {
          const r = t.result;
          return [t.name, r.state === 'completed' ? { p50: round(r.latency.p50), p99: round(r.latency.p99) } : { p50: NaN, p99: NaN }];
        }),
      );
      withLedger.push(task);
    } finally {
      await tdb.drop();
    }
  }
  return { pure, withLedger };
}

function summarize(b: Bench, ledgerRefunds: number, decisions: Record<string, number>): PolicyTask {
  const t = b.tasks[0]!;
  const r = t.result;
  if (r.state !== 'completed') throw new Error(`policy benchmark ${t.name}: ${r.state}${'error' in r ? `: ${String(r.error)}` : ''}`);
  return {
    name: t.name,
    ledgerRefunds,
    decisionsPerSec: round(1000 / r.latency.mean),
    p50: round(r.latency.p50),
    p99: round(r.latency.p99),
    samples: r.latency.samplesCount,
    decisions,
  };
}

/**
 * `size` refund actions of quillfeather in one statement each table: users rep-ana/rep-ben/rep-eva
 * in turn, orders `P-0000…` round robin, created evenly over the last 30 days, 90 % succeeded and
 * the rest approved, running, failed_unknown or denied. Amounts are 0.01–0.09, so no cap trips and
 * the decision walks every rule to ALLOW (the sums are read whatever the outcome). Rows are
 * written in the order of their `created_at`, as a ledger is appended to, so one day's refunds
 * share pages (about 20 rows a page). Written in `generate_series` order, as before 2026-12-04,
 * each of the last day's 1,667 refunds at 50,000 sat on a page of its own, and the 24 h sums read
 * 1,400 pages per decision (p50 4.9 ms, against 1.2–2.1 ms in time order).
 */
async function seedLedger(db: Awaited<ReturnType<typeof createBenchDatabase>>['db'], size: number, orders: number): Promise<void> {
  await sql`INSERT INTO workflows (id, tenant, ticket_id, user_id, pack, mode, text_sha256, state, release_id, policy_revision, catalog_digest, created_at, updated_at)
    SELECT gen_random_uuid(), 'quillfeather', 'P-' || g, (ARRAY['rep-ana','rep-ben','rep-eva'])[1 + g % 3], 'support', 'act',
      md5(g::text) || md5(g::text), 'completed', 'rel-1', 'support-p1', repeat('f', 64), t, t
    FROM generate_series(1, ${size}::int) g, LATERAL (SELECT now() - ((g::bigint * 7919) % 43200) * interval '1 minute' AS t) x
    ORDER BY t`.execute(db);
  await sql`INSERT INTO proposals (id, workflow_id, round, call_id, tool, arguments_sha256, status, created_at)
    SELECT gen_random_uuid(), w.id, 1, 'call_' || w.ticket_id, 'issue_refund', repeat('0', 64), 'valid', w.created_at
    FROM workflows w ORDER BY w.created_at`.execute(db);
  await sql`INSERT INTO actions (id, workflow_id, proposal_id, call_id, version, tool, target, arguments, digest, decision, rule_id,
      policy_revision, status, operation_key, release_id, created_at, updated_at)
    SELECT gen_random_uuid(), p.workflow_id, p.id, p.call_id, 1, 'issue_refund', o.target,
      jsonb_build_object('orderId', o.target, 'amountCents', 1 + (n % 9), 'reason', 'seeded'),
      md5(p.id::text) || md5(p.call_id), 'ALLOW', 'ALL', 'support-p1',
      CASE WHEN n % 10 < 9 THEN 'succeeded' WHEN n % 40 = 9 THEN 'approved' WHEN n % 40 = 19 THEN 'running'
           WHEN n % 40 = 29 THEN 'failed_unknown' ELSE 'denied' END,
      p.workflow_id || ':action:1', 'rel-1', p.created_at, p.created_at
    FROM (SELECT p.*, row_number() OVER () AS n FROM proposals p) p,
      LATERAL (SELECT 'P-' || lpad((p.n % ${orders}::int)::text, 4, '0') AS target) o
    ORDER BY p.created_at`.execute(db);
  await sql`ANALYZE`.execute(db);
}
