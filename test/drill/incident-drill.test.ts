import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, type Server } from 'node:http';
import { copyFileSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { createHash } from 'node:crypto';
import { sql } from 'kysely';
import { repoRoot } from '@gatehouse/contracts';
import { startStack, type RunningStack } from '@gatehouse/cli';
import { freePort } from '@gatehouse/test-harness';
import { loadDelegationSigningKey } from '../../packages/credentials/src/index.ts';
import {
  executeRemediation,
  requestRemediation,
  runReconciliation,
  type ReconciliationReport,
} from '../../packages/reconciliation/src/index.ts';
import { startE2EStack, type E2EStack } from '@gatehouse/test-harness';
import { cli, decide, getApproval, sleep, submit, view } from '../hard-cases/helpers.ts';

/**
 * The incident drill of docs/product/hard-cases.md#units-mistake, deterministic by seed, in
 * compressed time: a ticket stream under support-p1; a bundle with the units mistake forced
 * active (`--force`, audited); the outcome monitor fires; containment (switch off + epoch bump)
 * stops further violations; the corrected bundle restored (rollback + requeue) and the paused
 * workflows resume under it; reconciliation selects exactly the refunds that executed above
 * the auto limit without a used approval, by their own properties; a lead ratifies or reverses
 * each; afterwards zero unexplained differences.
 */
const SEED = 20;
const HMAC_DEFAULT = 'local-audit-hmac-change-me';

/** mulberry32: a small deterministic PRNG (the drill's only source of randomness). */
function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A deterministic coin for one decision: `p` of the keys come up true. */
const coin = (key: string, p: number): boolean => createHash('sha256').update(`${SEED}:${key}`).digest().readUInt32BE(0) / 2 ** 32 < p;

interface Ticket {
  ticketId: string;
  user: string;
  orderId: string;
  amountCents: number;
  paidCents: number;
  reship: boolean;
}

/** The ticket stream: ~70% refunds under 50.00, ~22% 50.01–500.00, ~8% above 500.00; a third also ask for a reship. */
function tickets(rand: () => number, n: number, from: number): Ticket[] {
  return Array.from({ length: n }, (_, i) => {
    const r = rand();
    const amountCents =
      r < 0.7 ? 500 + Math.floor(rand() * 4500) : r < 0.92 ? 5001 + Math.floor(rand() * 44999) : 50001 + Math.floor(rand() * 40000);
    const k = from + i;
    // Paid covers the refund (R4). A reship of an order paid above 300.00 needs a lead (R9)
    // whose limit covers the paid amount, so those orders stay within lead-eli's 500.00.
    const big = amountCents > 48_000;
    return {
      ticketId: `D-${k}`,
      user: k % 2 ? 'rep-ben' : 'rep-ana',
      orderId: `O-${3000 + k}`,
      amountCents,
      paidCents: big ? amountCents + 1000 : Math.min(amountCents + 2000 + Math.floor(rand() * 20000), 50_000),
      reship: !big && rand() < 1 / 3,
    };
  });
}

const text = (t: Ticket): string =>
  `Customer on order ${t.orderId} reports a damaged item. Please refund ${(t.amountCents / 100).toFixed(2)} dollars${t.reship ? ' and ship a replacement' : ''}.`;

let s: E2EStack;
let bad: RunningStack | null = null;
let webhook: Server;
const alerts: Array<{ monitor: string; count: number }> = [];
const releasesDir = mkdtempSync(resolve(tmpdir(), 'gh-drill-releases-'));
const policyDir = mkdtempSync(resolve(tmpdir(), 'gh-drill-policy-'));
const timeline: string[] = [];
const t0 = Date.now();
const mark = (what: string): void => {
  timeline.push(`${String(((Date.now() - t0) / 1000).toFixed(1)).padStart(6)} s  ${what}`);
};

beforeAll(async () => {
  for (const f of ['support-p1.json', 'change-c1.json']) copyFileSync(resolve(repoRoot, 'policy', f), resolve(policyDir, f));
  copyFileSync(
    resolve(repoRoot, 'packages/policy/test/fixtures/support-units-mistake.json'),
    resolve(policyDir, 'support-units-mistake.json'),
  );
  const rel1 = JSON.parse(readFileSync(resolve(repoRoot, 'releases/rel-1.json'), 'utf8')) as Record<string, unknown>;
  writeFileSync(resolve(releasesDir, 'rel-1.json'), JSON.stringify(rel1));
  writeFileSync(
    resolve(releasesDir, 'rel-units.json'),
    JSON.stringify({
      ...rel1,
      id: 'rel-units',
      description: 'the units mistake',
      policy: { support: 'support-units-mistake', change: 'change-c1' },
    }),
  );
  const hookPort = await freePort();
  webhook = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      for (const a of (JSON.parse(body) as { alerts: Array<{ monitor: string; count: number }> }).alerts) alerts.push(a);
      res.end('ok');
    });
  }).listen(hookPort, '127.0.0.1');
  s = await startE2EStack({
    RELEASES_DIR: releasesDir,
    POLICY_DIR: policyDir,
    MONITOR_INTERVAL_MS: '500',
    ALERT_WEBHOOK_URL: `http://127.0.0.1:${hookPort}/alerts`,
    RECONCILE_INTERVAL_MS: '0',
    EXPIRY_SWEEP_MS: '500',
  });
}, 300_000);

afterAll(async () => {
  await bad?.stop();
  await s?.close();
  webhook?.close();
  console.log(`incident drill timeline (seed ${SEED}):\n${timeline.join('\n')}`);
});

/** Ground truth by the refunds' own properties: succeeded above the auto limit (cumulative on the order) without a used approval. */
async function violations(): Promise<string[]> {
  const r = await sql<{ key: string }>`
    select o.key from operations o join actions a on a.id = o.action_id
    where a.tool = 'issue_refund' and o.status = 'succeeded'
      and not exists (select 1 from approvals p where p.action_id = a.id and p.status = 'used')
      and (select coalesce(sum((a2.arguments->>'amountCents')::bigint), 0) from operations o2 join actions a2 on a2.id = o2.action_id
           where a2.tool = 'issue_refund' and a2.target = a.target and o2.status = 'succeeded' and o2.created_at <= o.created_at) > 5000
    order by o.key`.execute(s.db.db);
  return r.rows.map((x) => x.key);
}

const counts = { tickets: 0, approved: 0, denied: 0 };

/** Submits a batch and drives it: leads approve ~60% of what is pending (deterministic per approval), until every workflow settles. */
async function run(
  batch: Ticket[],
  settleOn: string[] = ['completed', 'stopped', 'needs_reconciliation'],
): Promise<Array<{ token: string; workflowId: string }>> {
  for (const t of batch) {
    await s.db.db
      .insertInto('staging.orders' as never)
      .values({
        id: t.orderId,
        tenant: 'quillfeather',
        region: 'US',
        customer: 'cust-1',
        paid_cents: t.paidCents,
        status: 'shipped',
      } as never)
      .execute();
  }
  const ws = await Promise.all(batch.map((t) => submit(s, t.user, t.ticketId, text(t))));
  counts.tickets += batch.length;
  await drive(ws, settleOn);
  return ws;
}

async function drive(ws: Array<{ token: string; workflowId: string }>, settleOn: string[]): Promise<void> {
  const decided = new Set<string>();
  for (let i = 0; i < 400; i++) {
    let open = 0;
    for (const w of ws) {
      const v = await view(s, w.token, w.workflowId);
      for (const p of v.pendingApprovals) {
        if (p.status !== 'pending' || decided.has(p.approvalId)) continue;
        decided.add(p.approvalId);
        const yes = coin(`${w.workflowId}:${p.actionVersion}`, 0.6);
        const r = await decide(s, 'lead-eli', p.approvalId, {
          decision: yes ? 'approve' : 'deny',
          actionVersion: p.actionVersion,
          actionDigest: p.actionDigest,
        });
        if (r.status === 200) counts[yes ? 'approved' : 'denied']++;
        else throw new Error(`lead-eli could not decide ${p.approvalId}: ${r.status} ${JSON.stringify(r.body)}`);
      }
      if (!settleOn.includes(v.state)) open++;
    }
    if (!open) return;
    await sleep(300);
  }
  const states = await Promise.all(ws.map((w) => view(s, w.token, w.workflowId)));
  throw new Error(`drill batch did not settle: ${JSON.stringify(states.map((v) => [v.state, v.nextStep, v.pendingApprovals.length]))}`);
}

describe('incident drill: the units mistake', () => {
  it(
    'forced bundle → monitor → containment → corrected bundle → reconciliation selects exactly the violations → lead remediates → zero unexplained',
    { timeout: 600_000 },
    async () => {
      const rand = prng(SEED);
      mark('stack up under rel-1 (support-p1)');
      await run(tickets(rand, 6, 1));
      expect(await violations()).toEqual([]);
      mark(`phase A: 6 tickets under support-p1, ${counts.approved} approved / ${counts.denied} denied, violations 0`);

      // The units-mistake bundle forced active (the gate refuses it without --force).
      await expect(cli(s, ['release', 'activate', 'rel-units'])).rejects.toThrow(/R7 just above auto limit/);
      // Forcing it, and loosening the active bundle's limits, takes a second person (ADR 0230).
      await expect(cli(s, ['release', 'activate', 'rel-units', '--force'])).rejects.toThrow(
        /needs a second person .*for: force_gate .*raise_limits/,
      );
      for (const kind of ['force', 'raise-limits']) {
        const asked = await cli(s, ['release', 'override', 'rel-units', '--for', kind, '--reason', 'incident drill']);
        const id = /approval ([0-9a-f-]{36})/.exec(asked)?.[1];
        expect(id, asked).toBeDefined();
        // The second operator decides it through the approval API, as the inbox does.
        const shown = await getApproval(s, 'ops-ida', id!);
        const body = { decision: 'approve', actionVersion: shown.body.actionVersion, actionDigest: shown.body.actionDigest };
        expect(await decide(s, 'ops-ida', id!, body)).toMatchObject({ status: 200, body: { status: 'approved' } });
      }
      mark('forcing rel-units: one operator asked, a second approved through the approval API (force past the gate, raised limits)');
      const forced = await cli(s, ['release', 'activate', 'rel-units', '--force']);
      expect(forced).toContain('FORCED past its boundary-case gate');
      const ports: Record<string, string> = {};
      for (const v of ['AGENT_LOOP_PORT', 'POLICY_GATEWAY_PORT', 'APPROVAL_PORT', 'EXECUTOR_PORT']) ports[v] = String(await freePort());
      bad = await startStack({
        env: { ...process.env, ...s.env, ...ports, GATEHOUSE_RELEASE: 'rel-units' },
        dir: mkdtempSync(resolve(tmpdir(), 'gh-drill-bad-')),
        only: ['policy-gateway', 'approval', 'executor', 'agent-loop'],
        readyTimeoutMs: 150_000,
      });
      mark('rel-units forced active (audited); its services up');

      const phaseB = tickets(rand, 8, 7);
      await run(phaseB);
      const afterB = await violations();
      expect(afterB.length, 'the units mistake lets refunds above 50.00 run without approval').toBeGreaterThan(0);
      mark(`phase B: 8 tickets under the units mistake, violations ${afterB.length}`);
      const alertBy = Date.now() + 60_000;
      while (!alerts.some((a) => a.monitor === 'refund_over_auto_limit_without_approval') && Date.now() < alertBy) await sleep(250);
      expect(alerts.map((a) => a.monitor)).toContain('refund_over_auto_limit_without_approval');
      mark('monitor fired: refund_over_auto_limit_without_approval');

      // Containment at the moment of effect.
      await cli(s, ['switch', 'off', 'issue_refund']);
      await cli(s, ['epoch', 'bump']);
      mark('containment: issue_refund switched off, epoch bumped');
      const phaseC = tickets(rand, 4, 15);
      const held = await run(phaseC, ['completed', 'stopped', 'needs_reconciliation', 'paused']);
      expect(await violations(), 'containment stops further violations').toEqual(afterB);
      const paused = (await Promise.all(held.map((w) => view(s, w.token, w.workflowId)))).filter((v) => v.state === 'paused').length;
      mark(`phase C: 4 tickets after containment, ${paused} paused on a held refund, violations still ${afterB.length}`);

      // The corrected bundle: roll back to rel-1, move the paused workflows, switch the tool on.
      const rolled = await cli(s, ['release', 'rollback', '--to', 'rel-1', '--reason', 'units mistake in support-units']);
      expect(rolled).toContain('rolled back rel-units to rel-1');
      expect(rolled).toContain('next: gatehouse release enable-writes rel-1');
      expect(await cli(s, ['release', 'enable-writes', 'rel-1'])).toMatch(/rel-1: safety cases pass .* consequential writes enabled/);
      await cli(s, ['queues', 'requeue', '--from', 'rel-units', '--to', 'rel-1']).catch((e: Error) => e.message);
      await cli(s, ['switch', 'on', 'issue_refund']);
      mark(
        'rel-1 restored (rollback, writes off), safety cases passed, writes enabled, paused workflows requeued to it, issue_refund switched on',
      );
      await drive(held, ['completed', 'stopped', 'needs_reconciliation']);
      const resumed = await Promise.all(held.map((w) => view(s, w.token, w.workflowId)));
      // Every held refund was re-decided at execution under the restored support-p1 (a new action
      // version), and no refund of these workflows ran under the units mistake.
      const refundActions = resumed.flatMap((v) => v.actions.filter((a) => a.tool === 'issue_refund'));
      expect(refundActions.filter((a) => a.status === 'succeeded').every((a) => a.policyRevision === 'support-p1')).toBe(true);
      expect(refundActions.filter((a) => a.policyRevision === 'support-p1').length).toBeGreaterThanOrEqual(paused);
      expect(await violations(), 'resumed refunds run under support-p1').toEqual(afterB);
      mark(`held workflows resumed under support-p1: ${resumed.map((v) => v.state).join(', ')}`);

      // Reconciliation selects exactly the violating refunds, by their properties.
      const deps = {
        db: s.db.db,
        stagingUrl: s.url('staging'),
        hmacKey: s.env.GATEHOUSE_AUDIT_HMAC_KEY ?? HMAC_DEFAULT,
        actor: 'ops-gus',
        policyDir,
      };
      const first: ReconciliationReport = await runReconciliation(deps);
      const selected = first.worklist.filter((i) => i.class === 'refund_over_limit_without_approval');
      expect(selected.map((i) => i.operation_key).sort()).toEqual(afterB);
      // Nothing else is selected, though other refunds ran in the same window (under the limit, or
      // with a used approval): the selection is by each refund's own properties, not by time.
      const ranInWindow = await sql<{ n: string }>`select count(*) as n from operations o join actions a on a.id = o.action_id
        where a.tool = 'issue_refund' and o.status = 'succeeded'`.execute(s.db.db);
      expect(Number(ranInWindow.rows[0]!.n)).toBeGreaterThan(afterB.length);
      mark(`reconciliation: ${selected.length} item(s) refund_over_limit_without_approval, ${first.unexplained} unexplained in all`);

      // A lead ratifies or reverses each (deterministic choice), through a real approval.
      const rdeps = {
        db: s.db.db,
        stagingUrl: s.url('staging'),
        hmacKey: deps.hmacKey,
        release: 'rel-1',
        policyDir,
        // The stack's delegation signing key, as the operator CLI would load it.
        signingKey: await loadDelegationSigningKey(s.env.GATEHOUSE_DELEGATION_SIGNING_KEY_PATH!),
      };
      const outcome = { ratify: 0, reverse: 0 };
      for (const item of first.worklist) {
        const remediation =
          item.class === 'refund_over_limit_without_approval' ? (coin(item.order_id ?? item.id, 0.5) ? 'ratify' : 'reverse') : 'ratify';
        const ticket = await requestRemediation(rdeps, { itemId: item.id, remediation, operator: 'ops-gus' });
        const shown = await getApproval(s, 'lead-eli', ticket.approvalId);
        const ok = await decide(s, 'lead-eli', ticket.approvalId, {
          decision: 'approve',
          actionVersion: shown.body.actionVersion,
          actionDigest: shown.body.actionDigest,
        });
        expect(ok.status, JSON.stringify(ok.body)).toBe(200);
        const done = await executeRemediation(rdeps, item.id);
        expect(done.state, JSON.stringify(done)).toBe('resolved');
        if (item.class === 'refund_over_limit_without_approval') outcome[remediation as 'ratify' | 'reverse']++;
      }
      mark(`lead remediated: ${outcome.ratify} ratified, ${outcome.reverse} reversed`);
      expect(outcome.ratify + outcome.reverse).toBe(afterB.length);

      const after = await runReconciliation(deps);
      expect(after.unexplained, JSON.stringify(after.worklist)).toBe(0);
      mark(`reconciliation after remediation: ${after.unexplained} unexplained differences`);
      const verify = await cli(s, ['audit', 'verify']);
      expect(verify).toMatch(/^intact \d+ events/m);
      mark(`audit chain ${verify.trim()}`);
      console.log(`counts: ${JSON.stringify({ ...counts, violations: afterB.length, ...outcome, alerts: alerts.length })}`);
    },
  );
});
