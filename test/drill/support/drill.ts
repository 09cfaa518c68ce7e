import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { startStack, type RunningStack } from '@gatehouse/cli';
import { resetTestFaultsForTests } from '@gatehouse/contracts';
import { verifyAuditChain } from '@gatehouse/ledger';
import { freePort, type E2EStack } from '@gatehouse/test-harness';
import { loadDelegationSigningKey } from '@gatehouse/credentials';
import { executeRemediation, requestRemediation, runReconciliation } from '@gatehouse/reconciliation';
import { evaluateMonitors } from '@gatehouse/audit';
import { cli, decide, getApproval, sleep, submit } from '../../hard-cases/helpers.ts';
import { DrillClock } from './clock.ts';
import {
  busyWorkflows,
  denialsByRule,
  paymentsRecord,
  pendingApprovals,
  recordsMark,
  refundOps,
  ticketFates,
  workflowStates,
  type RefundOp,
} from './measure.ts';
import { disagreements, revisionRows, type DrillReport, type ReconciliationOutcome } from './report.ts';
import { draw, REPS, ticketStream, ticketText, type Ticket } from './traffic.ts';

/** The auto-approve limit of the good bundle (support-p1), cents: the yardstick of a violation. */
const AUTO_LIMIT_CENTS = 5000;
/** The audit service's monitor cadence, seconds (its default `MONITOR_INTERVAL_MS`), run here on the simulated clock. */
const MONITOR_EVERY_S = 30;
/** The monitor whose alert starts containment. */
const UNITS_MONITOR = 'refund_over_auto_limit_without_approval';
/**
 * Tickets of the run at work at once. Three hours at one ticket per 90 s cannot run one ticket at a
 * time in a few real minutes (each takes 1.5–6 s through every service on a loaded machine), so
 * up to this many overlap; the clock's error is bounded by it (ADR 0320).
 */
const MAX_IN_FLIGHT = 6;
const HMAC_DEFAULT = 'local-audit-hmac-change-me';

/** One drill run over a running stack (rel-1 active). Seconds are simulated seconds of the drill. */
export interface DrillPlan {
  /** Ticket id prefix (`<tag>-<n>`), unique per run on one ledger. */
  tag: string;
  seed: number;
  tickets: number;
  everyS: number;
  /** First order number (orders `O-<n>` / `N-<n>`, four digits), unique per run. */
  firstOrder: number;
  /** The release carrying the units mistake, forced at `forceAtS`. */
  badRelease: string;
  forceAtS: number;
  /** How long after containment on-call rolls back to rel-1. */
  rollbackAfterS: number;
  /** Where the simulated clock starts, ms after real now (a later run on the same ledger: a day later). */
  aheadMs: number;
  /** Extra environment of the bad release's services (a control-removed switch). */
  badEnv?: Record<string, string>;
  /**
   * Control-removed run only: until this second the units monitor is removed
   * (`GATEHOUSE_TEST_DISABLE_MONITORS`, needs `GATEHOUSE_ENV=test` in this process).
   */
  monitorRemovedUntilS?: number;
}

/** Where a run's stack keeps what the drill forces and restores. */
export interface DrillContext {
  s: E2EStack;
  policyDir: string;
  clockFile: string;
}

/**
 * One run of the incident drill of docs/product/hard-cases.md#units-mistake on a simulated clock
 * (docs/decisions/0320-drill-on-a-simulated-clock.md): tickets arrive every `everyS` seconds; a
 * monitor pass every 30 s; leads decide approvals minutes later; the units-mistake bundle is
 * forced through the two-person path; the first alert starts containment (switch off + epoch
 * bump); on-call rolls back to rel-1 later; at the end reconciliation selects the violations by
 * their own properties, a lead ratifies or reverses each, and the report is built.
 */
export class DrillRun {
  private clock: DrillClock;
  private readonly stream: Ticket[];
  private readonly timeline: string[] = [];
  private readonly decided = new Set<string>();
  /** Tickets that arrived while the bad release was active (forced, not yet restored). */
  private readonly underMistake: string[] = [];
  private readonly realStart = Date.now();
  private next = 0;
  private lastMark = '';
  private readonly alertsBefore: string[] = [];
  private bad: RunningStack | null = null;
  private readonly t: {
    forced?: number;
    alert?: number;
    contained?: number;
    containedReal?: Date;
    restored?: number;
    restoredReal?: Date;
  } = {};

  private readonly ctx: DrillContext;
  private readonly plan: DrillPlan;

  constructor(ctx: DrillContext, plan: DrillPlan) {
    this.ctx = ctx;
    this.plan = plan;
    this.clock = new DrillClock(ctx.clockFile, plan.aheadMs);
    this.stream = ticketStream({ seed: plan.seed, n: plan.tickets, everyS: plan.everyS, tag: plan.tag, firstOrder: plan.firstOrder });
  }

  /** Runs the drill to its end and returns its report (the verdict lists failed checks; it never throws on them). */
  async run(): Promise<DrillReport> {
    await this.prepare();
    this.clock = new DrillClock(this.ctx.clockFile, this.plan.aheadMs);
    this.mark(`clock started: ${this.plan.tickets} tickets, one per ${this.plan.everyS} s, under rel-1`);
    try {
      for (let tick = 0; !(await this.over()); tick++) await this.step(tick * MONITOR_EVERY_S);
      if (this.t.forced !== undefined && this.t.restored === undefined) await this.restore('end of traffic, never contained');
      return await this.finish();
    } finally {
      await this.bad?.stop();
    }
  }

  /**
   * One 30-second tick: the monitor pass, then what on-call, the leads and the customers do now.
   * While the mistake is live and not yet contained, the run's work rests before the pass (ADR
   * 0320, "the incident window"): a pass then sees each refund's outcome, never one still in
   * flight at the payments ledger, as it would when a ticket's few seconds are far shorter than
   * the 30 s between passes.
   */
  private async step(at: number): Promise<void> {
    this.clock.advanceTo(at);
    if (this.t.forced !== undefined && this.t.contained === undefined) await this.settle();
    await this.monitorPass();
    if (this.t.contained !== undefined && this.t.restored === undefined && at >= this.t.contained + this.plan.rollbackAfterS) {
      await this.restore('rollback to rel-1');
    }
    if (this.t.forced === undefined && at >= this.plan.forceAtS) await this.force();
    await this.decideDue();
    while (this.next < this.stream.length && this.stream[this.next]!.arrivesAt <= at) await this.arrive(this.stream[this.next++]!);
  }

  /** Waits until fewer than `limit` workflows of the run are at work (1: all rest). */
  private async settle(limit = 1): Promise<void> {
    const until = Date.now() + 120_000;
    while ((await busyWorkflows(this.ctx.s.db.db, this.plan.tag)) >= limit) {
      if (Date.now() > until)
        throw new Error(
          `drill ${this.plan.tag}: workflows still busy after 120 s (${JSON.stringify(await workflowStates(this.ctx.s.db.db, this.plan.tag))})`,
        );
      await sleep(40);
    }
  }

  /** Every ticket arrived and rests, no approval of the run pending, and a contained incident restored. */
  private async over(): Promise<boolean> {
    if (this.next < this.stream.length) return false;
    if (this.t.contained !== undefined && this.t.restored === undefined) return false;
    if ((await busyWorkflows(this.ctx.s.db.db, this.plan.tag)) > 0) return false;
    return (await pendingApprovals(this.ctx.s.db.db, this.plan.tag)).length === 0;
  }

  private mark(what: string): void {
    const line = `${this.clock.seconds().toFixed(1).padStart(8)} s  ${what}`;
    this.timeline.push(line);
    if (process.env.DRILL_VERBOSE) console.log(`[real ${((Date.now() - this.realStart) / 1000).toFixed(1)} s] ${line}`);
  }

  /** Every ticket's order exists in the order system before the clock starts (tenant and region of its rep). */
  private async createOrders(): Promise<void> {
    const rows = this.stream.map((t) => ({
      id: t.orderId,
      tenant: t.rep.tenant,
      region: t.rep.region,
      customer: t.rep.tenant === 'northwind' ? 'cust-n1' : 'cust-1',
      paid_cents: t.paidCents,
      status: 'shipped',
    }));
    await this.ctx.s.db.db
      .insertInto('staging.orders' as never)
      .values(rows as never)
      .execute();
  }

  /** A ticket arrives (once fewer than {@link MAX_IN_FLIGHT} of the run are at work); it is not waited for. */
  private async arrive(t: Ticket): Promise<void> {
    await this.settle(MAX_IN_FLIGHT);
    await submit(this.ctx.s, t.rep.user, t.ticketId, ticketText(t));
    if (this.t.forced !== undefined && this.t.restored === undefined) this.underMistake.push(t.ticketId);
    if (process.env.DRILL_VERBOSE) this.mark(`${t.ticketId} arrived (${t.rep.user}, ${t.amountCents ?? 'reship'})`);
  }

  /** The leads decide every pending approval whose time has come: 2–10 minutes after it was asked, 75 % approved. */
  private async decideDue(): Promise<void> {
    const pending = await pendingApprovals(this.ctx.s.db.db, this.plan.tag);
    for (const p of pending) {
      const key = `${p.ticketId}:${p.actionVersion}:${p.tool}`;
      const dueS = this.clock.at(this.clock.simOf(p.createdAt)) + 120 + Math.floor(draw(this.plan.seed, `latency:${key}`) * 480);
      if (dueS > this.clock.seconds() || this.decided.has(p.id)) continue;
      this.decided.add(p.id);
      const lead = REPS.find((r) => r.tenant === p.tenant && r.region === p.region)!.lead;
      const yes = draw(this.plan.seed, `decision:${key}`) < 0.75;
      const shown = await getApproval(this.ctx.s, lead, p.id);
      const r = await decide(this.ctx.s, lead, p.id, {
        decision: yes ? 'approve' : 'deny',
        actionVersion: shown.body.actionVersion,
        actionDigest: shown.body.actionDigest,
      });
      if (r.status !== 200) throw new Error(`${lead} could not decide ${p.id}: ${r.status} ${JSON.stringify(r.body)}`);
    }
  }

  /** The audit service's monitor pass, on the simulated cadence; its first units alert starts containment. */
  private async monitorPass(): Promise<void> {
    // A pass over the same records finds what the former found: skipped (see recordsMark).
    const mark = `${await recordsMark(this.ctx.s.db.db)}:${this.clock.seconds() < (this.plan.monitorRemovedUntilS ?? 0)}`;
    if (mark === this.lastMark) return;
    this.lastMark = mark;
    const t0 = Date.now();
    this.removeMonitorUntil(this.plan.monitorRemovedUntilS ?? 0);
    const alerts = await evaluateMonitors(this.ctx.s.db.db, { autoApproveLimitCents: AUTO_LIMIT_CENTS, maxFailedUnknownPerHour: 3 });
    if (alerts.length && this.t.forced === undefined) {
      this.alertsBefore.push(...alerts.map((a) => a.monitor));
      this.mark(`ALERT before the mistake: ${alerts.map((a) => a.monitor).join(', ')}`);
    }
    if (process.env.DRILL_VERBOSE && Date.now() - t0 > 500) this.mark(`monitor pass took ${Date.now() - t0} ms`);
    if (this.t.alert !== undefined || !alerts.some((a) => a.monitor === UNITS_MONITOR)) return;
    this.t.alert = this.clock.seconds();
    this.mark(`monitor fired: ${alerts.map((a) => `${a.monitor} (${a.count})`).join(', ')}`);
    await this.contain();
  }

  /** Sets or clears the test-only switch removing the units monitor, by the simulated second. */
  private removeMonitorUntil(s: number): void {
    if (this.clock.seconds() < s) process.env.GATEHOUSE_TEST_DISABLE_MONITORS = UNITS_MONITOR;
    else delete process.env.GATEHOUSE_TEST_DISABLE_MONITORS;
    resetTestFaultsForTests(); // the switches are read once per process; this test flips one mid-run
  }

  /** Containment at the moment of effect: `switch off issue_refund` and `epoch bump`, as on-call runs them. */
  private async contain(): Promise<void> {
    await cli(this.ctx.s, ['switch', 'off', 'issue_refund']);
    await cli(this.ctx.s, ['epoch', 'bump']);
    this.t.contained = this.clock.seconds();
    this.t.containedReal = new Date();
    this.mark('containment: issue_refund switched off, epoch bumped');
  }

  /**
   * Before the clock starts: every ticket's order in the order system, and the two-person
   * overrides forcing the bad release asks for (ADR 0230: ops-gus asks, ops-ida approves force
   * past the gate and raised limits through the approval service) — prepared ahead, used once by
   * the activation at `forceAtS`.
   */
  private async prepare(): Promise<void> {
    await this.createOrders();
    for (const kind of ['force', 'raise-limits']) {
      const asked = await cli(this.ctx.s, [
        'release',
        'override',
        this.plan.badRelease,
        '--for',
        kind,
        '--reason',
        `incident drill ${this.plan.tag}`,
      ]);
      const id = /approval ([0-9a-f-]{36})/.exec(asked)?.[1];
      if (!id) throw new Error(`no override approval id in: ${asked}`);
      const shown = await getApproval(this.ctx.s, 'ops-ida', id);
      const ok = await decide(this.ctx.s, 'ops-ida', id, {
        decision: 'approve',
        actionVersion: shown.body.actionVersion,
        actionDigest: shown.body.actionDigest,
      });
      if (ok.status !== 200) throw new Error(`ops-ida could not approve override ${id}: ${ok.status} ${JSON.stringify(ok.body)}`);
    }
  }

  /** The units-mistake bundle forced active with the overrides prepared (audited). */
  private async force(): Promise<void> {
    const forced = await cli(this.ctx.s, ['release', 'activate', this.plan.badRelease, '--force']);
    if (!forced.includes('FORCED past its boundary-case gate')) throw new Error(`activation: ${forced}`);
    this.t.forced = this.clock.seconds();
    this.mark(`${this.plan.badRelease} (support-units-mistake) forced active, with ops-ida's overrides (force, raise-limits)`);
    // Its services boot only once it is forced active (a failing bundle refuses to load otherwise).
    await this.startBadServices();
    this.mark(`${this.plan.badRelease}'s services up`);
  }

  private async startBadServices(): Promise<void> {
    const ports: Record<string, string> = {};
    for (const v of ['AGENT_LOOP_PORT', 'POLICY_GATEWAY_PORT', 'APPROVAL_PORT', 'EXECUTOR_PORT']) ports[v] = String(await freePort());
    this.bad = await startStack({
      env: { ...process.env, ...this.ctx.s.env, ...ports, ...this.plan.badEnv, GATEHOUSE_RELEASE: this.plan.badRelease },
      dir: mkdtempSync(resolve(tmpdir(), `gh-drill-${this.plan.tag}-`)),
      only: ['policy-gateway', 'approval', 'executor', 'agent-loop'],
      readyTimeoutMs: 150_000,
    });
  }

  /** The corrected bundle: rollback to rel-1, its safety cases, writes on, held work requeued to it, the tool on again. */
  private async restore(why: string): Promise<void> {
    const rel = this.plan.badRelease;
    const rolled = await cli(this.ctx.s, ['release', 'rollback', '--to', 'rel-1', '--reason', `units mistake in ${rel}`]);
    if (!rolled.includes(`rolled back ${rel} to rel-1`)) throw new Error(`rollback: ${rolled}`);
    await cli(this.ctx.s, ['release', 'enable-writes', 'rel-1']);
    await cli(this.ctx.s, ['queues', 'requeue', '--from', rel, '--to', 'rel-1']).catch((e: Error) => e.message);
    await cli(this.ctx.s, ['switch', 'on', 'issue_refund']);
    this.t.restored = this.clock.seconds();
    // The switch's own time, not the moment the command's process has exited: held work runs as
    // soon as the switch commits, and a refund dispatched in between is not one under containment.
    const on = await this.ctx.s.db.db
      .selectFrom('tool_switches')
      .select('changed_at')
      .where('tool', '=', 'issue_refund')
      .executeTakeFirst();
    this.t.restoredReal = on ? new Date(on.changed_at) : new Date();
    this.mark(`${why}: rel-1 restored, writes enabled, held work requeued, issue_refund on`);
  }

  /** After the traffic: measure, reconcile, remediate, verify; the report with its verdict. */
  private async finish(): Promise<DrillReport> {
    await this.settle();
    const db = this.ctx.s.db.db;
    const ops = await refundOps(db, this.plan.tag, AUTO_LIMIT_CENTS);
    const rows = revisionRows(ops, await denialsByRule(db, this.plan.tag));
    const paymentsDisagreements = disagreements(rows, ops, await paymentsRecord(this.ctx.s.url('staging')));
    const simulatedSeconds = this.clock.seconds();
    this.mark('traffic over; reconciliation');
    const reconciliation = await this.reconcile(ops);
    const audit = await verifyAuditChain(db);
    const report: DrillReport = {
      tag: this.plan.tag,
      seed: this.plan.seed,
      tickets: this.plan.tickets,
      secondsBetweenTickets: this.plan.everyS,
      simulatedSeconds,
      realSeconds: (Date.now() - this.realStart) / 1000,
      rows,
      times: this.times(ops),
      effectsAfterContainment: this.effectsAfterContainment(ops).length,
      lateViolations: this.lateViolations(ops).length,
      alertsBeforeMistake: [...new Set(this.alertsBefore)],
      reconciliation,
      paymentsDisagreements,
      workflowStates: await workflowStates(db, this.plan.tag),
      auditIntact: audit.intact,
      timeline: this.timeline,
      verdict: [],
    };
    report.verdict = verdictOf(report);
    if (report.verdict.length || process.env.DRILL_VERBOSE)
      report.fatesUnderMistake = await ticketFates(db, this.plan.tag, this.underMistake);
    return report;
  }

  private simOfOp(o: RefundOp): number {
    return this.clock.at(this.clock.simOf(o.dispatchedAt!));
  }

  /**
   * The incident's times, from the first violating refund's dispatch (its write-ahead mark). The
   * monitor counts a claimed (`running`) refund too, so a pass that met one before its mark would
   * count as 0 s after it (the incident window rests its work before each pass, so it should not).
   */
  private times(ops: RefundOp[]): DrillReport['times'] {
    const first = ops.filter((o) => o.violation && o.dispatchedAt).map((o) => this.simOfOp(o));
    const firstViolationAt = first.length ? Math.min(...first) : null;
    const since = (at: number | undefined): number | null =>
      at === undefined || firstViolationAt === null ? null : Math.max(0, at - firstViolationAt);
    return {
      forcedAt: this.t.forced ?? null,
      firstViolationAt,
      alertAt: this.t.alert ?? null,
      containedAt: this.t.contained ?? null,
      restoredAt: this.t.restored ?? null,
      secondsToAlert: since(this.t.alert),
      secondsToContainment: since(this.t.contained),
    };
  }

  /** Refund effects dispatched while the tool was switched off by containment (there must be none). */
  private effectsAfterContainment(ops: RefundOp[]): RefundOp[] {
    const from = this.t.containedReal;
    const to = this.t.restoredReal;
    if (!from) return [];
    return ops.filter(
      (o) =>
        ['succeeded', 'running', 'failed_unknown'].includes(o.status) &&
        o.dispatchedAt &&
        o.dispatchedAt > from &&
        (!to || o.dispatchedAt < to),
    );
  }

  /**
   * Violations dispatched after containment — or, never contained, after the two monitor passes
   * that should have raised the alert past the first violation.
   */
  private lateViolations(ops: RefundOp[]): RefundOp[] {
    const v = ops.filter((o) => o.violation && o.dispatchedAt);
    if (!v.length) return [];
    const deadline = this.t.containedReal
      ? this.clock.at(this.clock.simOf(this.t.containedReal))
      : Math.min(...v.map((o) => this.simOfOp(o))) + 2 * MONITOR_EVERY_S;
    return v.filter((o) => this.simOfOp(o) > deadline);
  }

  /** Reconciliation selects the refunds over the limit without approval; a lead ratifies or reverses each (half each, by seed). */
  private async reconcile(ops: RefundOp[]): Promise<ReconciliationOutcome> {
    const s = this.ctx.s;
    const hmacKey = s.env.GATEHOUSE_AUDIT_HMAC_KEY ?? HMAC_DEFAULT;
    const deps = { db: s.db.db, stagingUrl: s.url('staging'), hmacKey, actor: 'ops-gus', policyDir: this.ctx.policyDir };
    const first = await runReconciliation(deps);
    const mine = new Set(ops.map((o) => o.key));
    const violations = ops
      .filter((o) => o.violation)
      .map((o) => o.key)
      .sort();
    const selected = first.worklist
      .filter((i) => i.class === 'refund_over_limit_without_approval' && mine.has(i.operation_key ?? ''))
      .map((i) => i.operation_key!)
      .sort();
    const signingKey = await loadDelegationSigningKey(s.env.GATEHOUSE_DELEGATION_SIGNING_KEY_PATH!);
    const rdeps = { db: s.db.db, stagingUrl: s.url('staging'), hmacKey, release: 'rel-1', policyDir: this.ctx.policyDir, signingKey };
    const out = { ratified: 0, reversed: 0, centsReversed: 0 };
    for (const item of first.worklist) {
      const reverse = item.class === 'refund_over_limit_without_approval' && draw(this.plan.seed, `remedy:${item.operation_key}`) < 0.5;
      const ticket = await requestRemediation(rdeps, { itemId: item.id, remediation: reverse ? 'reverse' : 'ratify', operator: 'ops-gus' });
      const lead = REPS.find((r) => r.tenant === ticket.tenant && r.region === ticket.region)?.lead ?? 'lead-eli';
      const shown = await getApproval(s, lead, ticket.approvalId);
      const ok = await decide(s, lead, ticket.approvalId, {
        decision: 'approve',
        actionVersion: shown.body.actionVersion,
        actionDigest: shown.body.actionDigest,
      });
      if (ok.status !== 200) throw new Error(`${lead} could not approve remediation ${item.id}: ${ok.status} ${JSON.stringify(ok.body)}`);
      const done = await executeRemediation(rdeps, item.id);
      if (done.state !== 'resolved') throw new Error(`remediation ${item.id}: ${JSON.stringify(done)}`);
      out[reverse ? 'reversed' : 'ratified']++;
      if (reverse) out.centsReversed += Number(item.amount_cents ?? 0);
    }
    const after = await runReconciliation(deps);
    this.mark(
      `reconciliation: ${selected.length} selected, ${out.ratified} ratified, ${out.reversed} reversed; unexplained ${first.unexplained} → ${after.unexplained}`,
    );
    return {
      selected,
      selectedExactly: JSON.stringify(selected) === JSON.stringify(violations),
      ...out,
      unexplainedBefore: first.unexplained,
      unexplainedAfter: after.unexplained,
    };
  }
}

/**
 * The drill's checks on its report; each failed one is a line (empty: the drill passes): the
 * mistake caused damage (else it tested nothing), nothing alerted before it and nothing violated
 * under support-p1, the monitor alerted within two passes of the first violation, containment
 * ran and no effect followed it, reconciliation selected exactly the violations and nothing
 * stays unexplained, the payments ledger agrees, every run ended, the audit chain is intact.
 */
export function verdictOf(r: DrillReport): string[] {
  const v: string[] = [];
  const t = r.times;
  if (t.firstViolationAt === null) v.push('no violation under the units mistake: the drill tested nothing');
  if (r.alertsBeforeMistake.length) v.push(`alerts before the mistake: ${r.alertsBeforeMistake.join(', ')}`);
  const good = r.rows.filter((x) => x.revision !== 'support-units-mistake' && x.overLimitWithoutApproval > 0);
  if (good.length) v.push(`violations under ${good.map((x) => x.revision).join(', ')}`);
  if (t.secondsToAlert === null) v.push('no alert: the monitor never fired');
  else if (t.secondsToAlert > 2 * MONITOR_EVERY_S) v.push(`alert ${t.secondsToAlert.toFixed(1)} s after the first violation`);
  if (t.secondsToContainment === null) v.push('no containment');
  if (r.effectsAfterContainment > 0) v.push(`${r.effectsAfterContainment} refund effect(s) after containment`);
  if (r.lateViolations > 0) v.push(`${r.lateViolations} violation(s) after containment (never contained: after two monitor passes)`);
  if (!r.reconciliation.selectedExactly) v.push('reconciliation did not select exactly the violations');
  if (r.reconciliation.unexplainedAfter !== 0) v.push(`${r.reconciliation.unexplainedAfter} unexplained difference(s) after remediation`);
  if (r.paymentsDisagreements.length) v.push(`payments ledger disagrees: ${r.paymentsDisagreements.join('; ')}`);
  const live = Object.entries(r.workflowStates).filter(([st]) => !['completed', 'stopped'].includes(st));
  if (live.length) v.push(`workflows not ended: ${JSON.stringify(Object.fromEntries(live))}`);
  if (!r.auditIntact) v.push('audit chain not intact');
  return v;
}
