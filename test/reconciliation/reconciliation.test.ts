import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { resolve as resolvePath } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { Queue } from 'bullmq';
import { Redis } from 'ioredis';
import { repoRoot } from '@gatehouse/contracts';
import type { Db } from '@gatehouse/ledger';
import {
  auditHeartbeatOlderThan,
  call,
  SECRET,
  sleep,
  stagingRequests,
  startHuntStack,
  tokenFor,
  waitUntil,
  type HuntStack,
} from '../hard-cases/helpers.ts';
import { seedRefund, seedShipment, seedStep, type SeededStep } from './seed.ts';

// docs/product/invariants.md#agreement and #containment, docs/product/reconciliation.md: one example of each reconciliation
// class is seeded straight into the ledger and the systems of record; the repeatable job and
// `gatehouse reconcile` find exactly those, with an owner per class; every difference is then
// remediated through a lead's approval (exactly once, audited), after which reconciliation shows
// zero unexplained differences. Every reconcile command refuses a non-operator token, audited,
// with zero downstream calls.

let s: HuntStack;
let db: Db;
let redis: Redis;
let queue: Queue;

beforeAll(async () => {
  // One pass at start-up, then only on demand within the test: passes stay deterministic.
  s = await startHuntStack({ RECONCILE_INTERVAL_MS: '3600000' });
  db = s.db.db;
  redis = new Redis(s.env.REDIS_URL ?? 'redis://127.0.0.1:6379', { maxRetriesPerRequest: null });
  queue = new Queue('reconcile.rel-1', { connection: redis, prefix: s.prefix });
  // The scheduler's first pass runs at start-up (on an empty ledger): wait for it, before seeding.
  for (const until = Date.now() + 60_000; ((await queue.getJobCounts('completed')).completed ?? 0) < 1 && Date.now() < until;)
    await sleep(100);
});
afterAll(async () => {
  await queue?.close();
  redis?.disconnect();
  await s?.close();
});

/** Runs the real CLI with `token` in GATEHOUSE_TOKEN; never throws on a non-zero exit. */
function run(args: string[], token: string, env: Record<string, string> = {}): Promise<{ code: number; out: string }> {
  return new Promise((done) => {
    execFile(
      process.execPath,
      [resolvePath(repoRoot, 'apps/cli/src/main.ts'), ...args],
      { cwd: repoRoot, env: { ...process.env, ...s.env, ...env, LOG_LEVEL: 'warn', GATEHOUSE_TOKEN: token }, timeout: 30_000 },
      (err, stdout, stderr) => done({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, out: stdout + stderr }),
    );
  });
}
const asUser = async (args: string[], user = 'ops-gus') => run(args, await tokenFor(user, SECRET));

async function auditEvents(type: string): Promise<Array<Record<string, unknown>>> {
  const r = await sql<{ event: Record<string, unknown> }>`
    select event from audit_log where event->>'type' = ${type}
    union all select event from audit_outbox where event->>'type' = ${type}`.execute(db);
  return r.rows.map((x) => x.event);
}

const items = () => db.selectFrom('reconciliation_items').selectAll().orderBy('created_at').execute();
const item = async (cls: string) => (await items()).find((i) => i.class === cls)!;
const effectCalls = async () => (await stagingRequests(s)).length;

async function runJob(): Promise<string> {
  const job = await queue.add('reconcile', { release: 'rel-1', trigger: 'manual' }, { jobId: `manual-${randomUUID()}` });
  for (const until = Date.now() + 60_000; Date.now() < until;) {
    const state = await job.getState();
    if (state === 'completed') return String((await queue.getJob(job.id!))?.returnvalue);
    if (state === 'failed') throw new Error(`reconcile job failed: ${(await queue.getJob(job.id!))?.failedReason}`);
    await sleep(100);
  }
  throw new Error('reconcile job did not finish');
}

/** Reads the approval as the lead (trusted view) and decides it with the version and digest shown. */
async function decideAs(lead: string, approvalId: string, decision: 'approve' | 'deny') {
  const token = await tokenFor(lead, SECRET);
  const view = await call('GET', `${s.url('approval')}/v1/approvals/${approvalId}`, token);
  return call('POST', `${s.url('approval')}/v1/approvals/${approvalId}/decision`, token, {
    decision,
    actionVersion: view.body.actionVersion,
    actionDigest: view.body.actionDigest,
  });
}
const approvalIdIn = (out: string) => /approval ([0-9a-f-]{36})/.exec(out)![1]!;

/**
 * With the audit service down, an approved remediation is held: exit 4 naming audit, zero calls
 * downstream, its approval left unused (docs/product/invariants.md#evidence). Audit is back after.
 */
async function heldWhileAuditIsDown(itemId: string, flag: string, approvalId: string): Promise<void> {
  const stale = (seconds: number) => auditHeartbeatOlderThan(db, seconds);
  const calls = await effectCalls();
  await s.stack.kill('audit', 'SIGKILL', { keepDown: true });
  try {
    await waitUntil(() => stale(2), 'the audit heartbeat to go stale');
    const held = await run(['reconcile', 'resolve', itemId, flag], await tokenFor('ops-gus', SECRET), {
      AUDIT_HEALTH_MAX_HEARTBEAT_AGE_MS: '1500',
    });
    expect(held.code, held.out).toBe(4);
    expect(held.out).toMatch(/audit storage is unavailable .*: nothing was sent and the approval is left unused/);
    expect(await effectCalls()).toBe(calls);
    const approval = await db.selectFrom('approvals').select('status').where('id', '=', approvalId).executeTakeFirstOrThrow();
    expect(approval.status).toBe('approved');
  } finally {
    await s.stack.restart('audit');
  }
  await waitUntil(async () => !(await stale(1)), 'a fresh audit heartbeat', 120_000);
}

const seeded: Record<string, SeededStep> = {};
const refundIds: Record<string, string> = {};

describe('reconciliation', () => {
  it('starts with the job scheduled and an empty worklist', async () => {
    const schedulers = await queue.getJobSchedulers();
    expect(schedulers).toEqual([expect.objectContaining({ key: 'reconcile-every', every: 3_600_000 })]);
    expect((await queue.getJobCounts('completed')).completed ?? 0).toBeGreaterThanOrEqual(1);
    expect(await items()).toEqual([]);
  });

  it('refuses a non-operator token for every reconcile command: audited, nothing written, zero downstream calls', async () => {
    const calls = await effectCalls();
    const refusedBefore = (await auditEvents('ops.refused')).length;
    for (const user of ['rep-ana', 'lead-eli']) {
      for (const args of [['reconcile'], ['reconcile', 'resolve', randomUUID(), '--reverse']]) {
        const r = await asUser(args, user);
        expect(r.code).toBe(3); // not authorized
        expect(r.out).toMatch(/refused \(not_an_operator\)/);
      }
    }
    const forged = await run(['reconcile'], 'not-a-jwt');
    expect(forged.code).toBe(3);
    expect(forged.out).toMatch(/refused \(invalid_token\)/);
    const refused = (await auditEvents('ops.refused')).slice(refusedBefore).map((e) => e.outcome);
    expect(refused.sort()).toEqual(
      [
        ...Array(2).fill('reconcile:not_an_operator'),
        ...Array(2).fill('reconcile resolve:not_an_operator'),
        'reconcile:invalid_token',
      ].sort(),
    );
    expect(await items()).toEqual([]);
    expect(await effectCalls()).toBe(calls);
  }, 120_000);

  it('the repeatable job finds exactly one item per seeded class, with its owner; the in-flight step the ledger has is resumed', async () => {
    // matched: the agent's refund and the ledger's agree.
    seeded.matched = await seedStep(db, { tool: 'issue_refund', orderId: 'O-1001', amountCents: 2000, opStatus: 'succeeded' });
    refundIds.matched = await seedRefund(db, { key: seeded.matched.key, orderId: 'O-1001', amountCents: 2000 });
    // agent_done_ledger_missing: the agent recorded success, the ledger has nothing under the key.
    seeded.missing = await seedStep(db, { tool: 'issue_refund', orderId: 'O-1004', amountCents: 3000, opStatus: 'succeeded' });
    // amount_mismatch: same key, another amount.
    seeded.mismatch = await seedStep(db, { tool: 'issue_refund', orderId: 'O-1007', amountCents: 2500, opStatus: 'succeeded' });
    refundIds.mismatch = await seedRefund(db, { key: seeded.mismatch.key, orderId: 'O-1007', amountCents: 4000 });
    // ledger_entry_without_step: a refund nobody's step made.
    refundIds.stray = await seedRefund(db, { key: 'manual-console-refund-1', orderId: 'O-1008', amountCents: 1200 });
    // in_flight_ledger_has_it: unknown outcome, parked; the ledger committed it.
    seeded.has = await seedStep(db, {
      tool: 'issue_refund',
      orderId: 'O-0812',
      amountCents: 1500,
      opStatus: 'failed_unknown',
      workflowState: 'needs_reconciliation',
    });
    refundIds.has = await seedRefund(db, { key: seeded.has.key, orderId: 'O-0812', amountCents: 1500 });
    // in_flight_ledger_lacks_it: its worker died after dispatch (lease long gone); the ledger has nothing.
    seeded.lacks = await seedStep(db, {
      tool: 'issue_refund',
      orderId: 'O-1006',
      amountCents: 1000,
      opStatus: 'running',
      workflowState: 'needs_reconciliation',
    });
    // refund_over_limit_without_approval: a wrong policy let 60.00 through on O-1002 with no approval;
    // a control on the same order — above the limit too, but with its used approval — is not selected.
    seeded.control = await seedStep(db, {
      tool: 'issue_refund',
      orderId: 'O-1002',
      amountCents: 5500,
      opStatus: 'succeeded',
      decision: 'REQUIRE_APPROVAL',
      approval: 'used',
    });
    refundIds.control = await seedRefund(db, { key: seeded.control.key, orderId: 'O-1002', amountCents: 5500 });
    seeded.over = await seedStep(db, { tool: 'issue_refund', orderId: 'O-1002', amountCents: 6000, opStatus: 'succeeded' });
    refundIds.over = await seedRefund(db, { key: seeded.over.key, orderId: 'O-1002', amountCents: 6000 });
    // shipment_count_mismatch: a shipment on O-1003 no reship made.
    await seedShipment(db, 'O-1003');
    const calls = await effectCalls();

    const summary = await runJob();
    expect(summary).toMatch(/6 unexplained/);
    const all = await items();
    const view = all.map((i) => [i.class, i.subject, i.status, i.owner]);
    expect(view.sort()).toEqual(
      [
        ['agent_done_ledger_missing', `op:${seeded.missing!.key}`, 'open', 'payments-lead'],
        ['amount_mismatch', `op:${seeded.mismatch!.key}`, 'frozen', 'payments-lead'],
        ['in_flight_ledger_has_it', `op:${seeded.has!.key}`, 'auto_resolved', 'on-call'],
        ['in_flight_ledger_lacks_it', `op:${seeded.lacks!.key}`, 'open', 'on-call'],
        ['ledger_entry_without_step', `refund:${refundIds.stray}`, 'open', 'payments-lead'],
        ['refund_over_limit_without_approval', `refund:${refundIds.over}`, 'open', 'support-lead'],
        ['shipment_count_mismatch', 'order:O-1003:surplus+1', 'open', 'support-lead'],
      ].sort(),
    );
    // Amount mismatch freezes the agent's record.
    const frozen = await db
      .selectFrom('operations')
      .select(['frozen_at', 'status'])
      .where('key', '=', seeded.mismatch!.key)
      .executeTakeFirstOrThrow();
    expect(frozen.frozen_at).not.toBeNull();
    // The only automatic repair: the in-flight step is recorded from the ledger's evidence, the parked workflow completes.
    const resumed = await db.selectFrom('operations').selectAll().where('key', '=', seeded.has!.key).executeTakeFirstOrThrow();
    expect([resumed.status, resumed.evidence_ref, Number(resumed.fencing_token)]).toEqual(['succeeded', refundIds.has, 2]);
    // Its audit event names the refund it settled on (docs/decisions/0146-execution-audit-fields.md).
    const reconciled = (await auditEvents('operation.reconciled')).filter((e) => e.callId === seeded.has!.callId);
    expect(reconciled.map((e) => e.effectRef)).toEqual([refundIds.has]);
    const wf = await db.selectFrom('workflows').select(['state']).where('id', '=', seeded.has!.workflowId).executeTakeFirstOrThrow();
    expect(wf.state).toBe('completed');
    // Its completion is audited, as a model turn's is.
    const completed = (await auditEvents('run.completed')).filter((e) => e.runId === seeded.has!.workflowId);
    expect(completed.map((e) => [e.service, e.outcome])).toEqual([['reconciliation', 'reconciled']]);
    // Nothing else the agent recorded was touched.
    const lacks = await db.selectFrom('operations').select('status').where('key', '=', seeded.lacks!.key).executeTakeFirstOrThrow();
    expect(lacks.status).toBe('running');
    // Every classification and resolution is an audit event; reading is no downstream call.
    expect((await auditEvents('reconciliation.classified')).map((e) => e.outcome).sort()).toEqual(
      [
        'agent_done_ledger_missing',
        'amount_mismatch:frozen',
        'in_flight_ledger_has_it',
        'in_flight_ledger_lacks_it',
        'ledger_entry_without_step',
        'refund_over_limit_without_approval',
        'shipment_count_mismatch',
      ].sort(),
    );
    expect((await auditEvents('reconciliation.resolved')).map((e) => e.outcome)).toEqual(['in_flight_ledger_has_it:resumed']);
    expect(await effectCalls()).toBe(calls);
  });

  it('`gatehouse reconcile` on demand prints the same worklist and duplicates nothing', async () => {
    const before = await items();
    const r = await asUser(['reconcile']);
    expect(r.code).toBe(0);
    for (const i of before.filter((x) => x.status === 'open' || x.status === 'frozen')) expect(r.out).toContain(i.id);
    expect(r.out).toMatch(
      /classes: matched=4 agent_done_ledger_missing=1 amount_mismatch=1 ledger_entry_without_step=1 in_flight_ledger_has_it=0 in_flight_ledger_lacks_it=1 refund_over_limit_without_approval=1 shipment_count_mismatch=1/,
    );
    expect(r.out).toMatch(/6 unexplained \(5 open, 1 frozen\)/);
    expect((await items()).map((i) => [i.id, i.status])).toEqual(before.map((i) => [i.id, i.status]));
    expect((await auditEvents('reconciliation.classified')).length).toBe(7);
  });

  it('a frozen operation is never claimed again: a redelivered execution job is skipped', async () => {
    const executions = new Queue('executions.rel-1', { connection: redis, prefix: s.prefix });
    try {
      const job = await executions.add(
        'execution',
        {
          release: 'rel-1',
          workflowId: seeded.mismatch!.workflowId,
          actionId: seeded.mismatch!.actionId,
          actionVersion: 1,
          approvalId: null,
        },
        { jobId: `frozen-${randomUUID()}` },
      );
      for (const until = Date.now() + 60_000; (await job.getState()) !== 'completed' && Date.now() < until;) await sleep(100);
      expect((await executions.getJob(job.id!))?.returnvalue).toBe('skip:operation_frozen');
    } finally {
      await executions.close();
    }
  });

  it('an item id of 36 dashes or a change id that is no uuid names nothing: refused as unknown, no crash', async () => {
    const item = await asUser(['reconcile', 'resolve', '--reverse', '--', '-'.repeat(36)]);
    expect(item.code, item.out).toBe(1);
    expect(item.out).toContain('no reconciliation item');
    const change = await asUser(['change', 'cancel', '--', '-'.repeat(36)]);
    expect(change.code, change.out).toBe(1);
    expect(change.out).toContain('no scheduled change');
  });

  it('a denied remediation makes zero downstream calls and opens the item again; authority is the approval service’s', async () => {
    const over = await item('refund_over_limit_without_approval');
    const calls = await effectCalls();
    const asked = await asUser(['reconcile', 'resolve', over.id, '--reverse']);
    expect(asked.code).toBe(0);
    expect(asked.out).toMatch(/requested: reverse of item/);
    expect(asked.out).toContain(`recon_${over.id}`);
    const approvalId = approvalIdIn(asked.out);
    // The lead sees the exact compensation, built from the records: tool, order, amount.
    const shown = await call('GET', `${s.url('approval')}/v1/approvals/${approvalId}`, await tokenFor('lead-eli', SECRET));
    expect(shown.body).toMatchObject({
      tool: 'reverse_refund',
      target: 'O-1002',
      ruleId: 'RECON',
      requester: 'ops-gus',
      amountCents: 6000,
      canDecide: true,
      arguments: expect.objectContaining({ remediation: 'reverse', ledgerRef: refundIds.over, amountCents: 6000 }),
    });
    expect((await decideAs('ops-gus', approvalId, 'approve')).status).toBe(403); // the requester
    expect((await decideAs('lead-dee', approvalId, 'approve')).body).toMatchObject({ error: { reason: 'wrong_region' } });
    // Run again while the approval is pending: nothing done, and the exit code says so (as `change cancel`).
    const pending = await asUser(['reconcile', 'resolve', over.id, '--reverse']);
    expect(pending.code, pending.out).toBe(1);
    expect(pending.out).toContain(`item ${over.id}: refused — approval ${approvalId} is still pending`);
    expect(pending.out).toContain(`POST /v1/approvals/${approvalId}/decision`);
    expect(await effectCalls()).toBe(calls);
    expect((await decideAs('lead-eli', approvalId, 'deny')).status).toBe(200);
    const after = await asUser(['reconcile', 'resolve', over.id, '--reverse']);
    expect(after.code).toBe(1);
    expect(after.out).toMatch(/refused \(approval_denied\)/);
    expect(await effectCalls()).toBe(calls);
    expect((await call('GET', `${s.url('staging')}/ledger/reversals`, null)).body.reversals).toEqual([]);
    expect(await item('refund_over_limit_without_approval')).toMatchObject({ status: 'open', remediation: null, approval_id: null });
  });

  it('each remaining difference is remediated once with a lead’s approval; ratify and adopt make no downstream call', async () => {
    const plan: Array<{ cls: string; flag: string; lead: string }> = [
      { cls: 'refund_over_limit_without_approval', flag: '--ratify', lead: 'lead-eli' },
      { cls: 'amount_mismatch', flag: '--reverse', lead: 'lead-eli' },
      { cls: 'agent_done_ledger_missing', flag: '--replay', lead: 'lead-eli' },
      { cls: 'in_flight_ledger_lacks_it', flag: '--ratify', lead: 'lead-fay' },
      { cls: 'shipment_count_mismatch', flag: '--cancel-shipment', lead: 'lead-dee' }, // O-1003 is an EU order
      { cls: 'ledger_entry_without_step', flag: '--adopt', lead: 'lead-eli' },
    ];
    const before = await stagingRequests(s);
    for (const p of plan) {
      const it = await item(p.cls);
      const asked = await asUser(['reconcile', 'resolve', it.id, p.flag]);
      expect(asked.code, asked.out).toBe(0);
      expect((await decideAs(p.lead, approvalIdIn(asked.out), 'approve')).status).toBe(200);
      if (p.cls === 'amount_mismatch') await heldWhileAuditIsDown(it.id, p.flag, approvalIdIn(asked.out));
      // The adoption is left to the repeatable job; the others run on demand (a reversal twice: the second is a no-op).
      if (p.cls === 'ledger_entry_without_step') continue;
      for (let n = 0; n < (p.flag === '--reverse' ? 2 : 1); n++) {
        const done = await asUser(['reconcile', 'resolve', it.id, p.flag]);
        expect(done.code, done.out).toBe(0);
        expect(done.out).toMatch(new RegExp(`item ${it.id} resolved: ${p.flag.slice(2).replace('-', '_')} approved by ${p.lead}`));
      }
    }
    expect(await runJob()).toMatch(/1 remediation\(s\) executed/);

    // Exactly one compensating call each, carrying its idempotency key; none for ratify or adopt.
    const calls = (await stagingRequests(s)).slice(before.length);
    const mismatch = await item('amount_mismatch');
    const shipment = await item('shipment_count_mismatch');
    expect(calls.map((c) => [c.method, c.path, c.idempotencyKey, c.status])).toEqual([
      ['POST', `/ledger/refunds/${refundIds.mismatch}/reversals`, `recon_${mismatch.id}`, 201],
      ['POST', '/ledger/refunds', seeded.missing!.key, 201],
      ['POST', expect.stringMatching(/^\/orders\/O-1003\/shipments\/shp_\w+\/cancel$/), `recon_${shipment.id}`, 201],
    ]);
    // The records now agree: reversal, replayed refund under the original key, cancelled shipment.
    const reversals = (await call('GET', `${s.url('staging')}/ledger/reversals`, null)).body.reversals as Array<{ refundId: string }>;
    expect(reversals.map((r) => r.refundId)).toEqual([refundIds.mismatch]);
    const replayed = (await call('GET', `${s.url('staging')}/ledger/refunds?orderId=O-1004`, null)).body.refunds as Array<{
      idempotencyKey: string;
      amountCents: number;
    }>;
    expect(replayed.map((r) => [r.idempotencyKey, r.amountCents])).toEqual([[seeded.missing!.key, 3000]]);
    const ships = (await call('GET', `${s.url('staging')}/orders/O-1003/shipments`, null)).body.shipments as Array<{
      cancelledAt: string | null;
    }>;
    expect(ships.map((x) => x.cancelledAt !== null)).toEqual([true]);
    const action = await db.selectFrom('actions').select('status').where('id', '=', seeded.mismatch!.actionId).executeTakeFirstOrThrow();
    expect(action.status).toBe('compensated');
    const lacks = await db.selectFrom('operations').select(['status']).where('key', '=', seeded.lacks!.key).executeTakeFirstOrThrow();
    expect(lacks.status).toBe('failed');
    const wf = await db.selectFrom('workflows').select('state').where('id', '=', seeded.lacks!.workflowId).executeTakeFirstOrThrow();
    expect(wf.state).toBe('completed');

    // Each item is resolved with the approving lead's identity; each approval was used once.
    const resolved = (await items()).filter((i) => i.status === 'resolved');
    expect(resolved.map((i) => [i.class, i.resolved_by]).sort()).toEqual(plan.map((p) => [p.cls, p.lead]).sort());
    const used = await db.selectFrom('approvals').select(['status']).where('rule_id', '=', 'RECON').execute();
    expect(used.map((u) => u.status).sort()).toEqual([...Array(6).fill('used'), 'denied'].sort());
    expect((await auditEvents('reconciliation.resolved')).map((e) => e.outcome).sort()).toEqual(
      [
        'in_flight_ledger_has_it:resumed',
        'refund_over_limit_without_approval:ratify',
        'amount_mismatch:reverse',
        'agent_done_ledger_missing:replay',
        'in_flight_ledger_lacks_it:ratify',
        'shipment_count_mismatch:cancel_shipment',
        'ledger_entry_without_step:adopt',
      ].sort(),
    );
  }, 300_000);

  it('afterwards reconciliation shows zero unexplained differences, and the audit chain verifies', async () => {
    const r = await asUser(['reconcile']);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/worklist \(0\):/);
    expect(r.out).toMatch(/0 unexplained \(0 open, 0 frozen\)/);
    // The ratified refund and the adopted entry stay in the records, explained by their resolutions.
    expect(r.out).toMatch(/2 explained/);
    expect((await items()).filter((i) => i.status === 'open' || i.status === 'frozen')).toEqual([]);
    for (let i = 0; i < 50 && (await db.selectFrom('audit_outbox').select('id').limit(1).execute()).length; i++) await sleep(100);
    const verify = await asUser(['audit', 'verify']);
    expect(verify.out).toMatch(/^intact/);
  });
});
