import { Queue, QueueEvents } from 'bullmq';
import { Redis } from 'ioredis';
import { executionsQueue, loadWorld, queueName } from '@gatehouse/contracts';
import { existsSync } from 'node:fs';
import { isTerminal, readWitness, verifyAuditChain, type ChainVerification, type Db } from '@gatehouse/ledger';
import { createIntakeClient } from '@gatehouse/client';
import { auditPublicKey } from './audit-key.ts';
import { withCliDb } from './cli-db.ts';
import { approveAsLead, call, pollWorkflow, tokenFor, type WorkflowView } from './api-client.ts';

/** Where the demo finds the running stack, and its settings. */
export interface DemoTarget {
  intakeUrl: string;
  approvalUrl: string;
  stagingUrl: string;
  databaseUrl: string;
  redisUrl: string;
  queuePrefix: string;
  release: string;
  authSecret: string;
  /** Path of the audit service's Ed25519 key (its public half verifies the anchors). */
  auditKeyPath?: string;
  /** The audit service's anchor witness (ADR 0570): checked with the chain when given. */
  witnessPath?: string;
}

/** Everything the demo observed; `ok` only when every check held. */
export interface DemoReport {
  ok: boolean;
  failures: string[];
  workflow: WorkflowView;
  timeline: string[];
  refunds: Array<{ idempotencyKey: string; amountCents: number }>;
  shipments: number;
  redelivery: string;
  audit: ChainVerification;
}

/** Whether the witness at `path` holds an anchor of `seq` (true when there is no witness to wait for). */
function witnessed(path: string | undefined, seq: number): boolean {
  if (!path) return true;
  return existsSync(path) && readWitness(path).some((a) => a.seq === seq);
}

const fmtCents = (c: unknown): string => (typeof c === 'number' ? (c / 100).toFixed(2) : '-');

/**
 * The demo flow (README "What runs"): ticket T-1 as rep-ana in `act` mode through every service;
 * each pending approval is approved as lead-eli through the approval API with the version and
 * digest read from it; then the refund's execution job is delivered a second time and the
 * payments ledger must still hold one refund for its key. Reads the audit chain and verifies it.
 */
export async function runDemo(t: DemoTarget, log: (line: string) => void = () => {}): Promise<DemoReport> {
  const world = loadWorld();
  const ticket = world.sampleTickets.find((s) => s.ticketId === 'T-1');
  if (!ticket) throw new Error('world.json has no ticket T-1');
  const rep = await tokenFor(ticket.user, t.authSecret);
  const lead = await tokenFor('lead-eli', t.authSecret);
  const failures: string[] = [];

  const intake = createIntakeClient({ baseUrl: t.intakeUrl, token: rep });
  const submitted = await intake.POST('/v1/tickets', { body: { ticketId: ticket.ticketId, text: ticket.text, mode: 'act' } });
  if (!submitted.data) throw new Error(`intake answered ${submitted.response.status}: ${JSON.stringify(submitted.error)}`);
  const workflowId = submitted.data.workflowId;
  log(`submitted ${ticket.ticketId} as ${ticket.user} (act mode) → workflow ${workflowId}`);

  const approved = new Set<string>();
  const workflow = await pollWorkflow(
    t.intakeUrl,
    rep,
    workflowId,
    (v) => isTerminal(v.state),
    async (v) => {
      for (const p of v.pendingApprovals.filter((x) => x.status === 'pending' && !approved.has(x.approvalId))) {
        approved.add(p.approvalId);
        const r = await approveAsLead(t.approvalUrl, lead, p.approvalId);
        log(
          `lead-eli approved ${String(r.approval.tool)} ${JSON.stringify(r.approval.arguments)} v${p.actionVersion} digest ${p.actionDigest.slice(0, 12)}… → ${r.status}`,
        );
        if (r.status !== 200) failures.push(`approval ${p.approvalId} answered ${r.status}`);
      }
    },
  );
  if (workflow.state !== 'completed') failures.push(`workflow ended ${workflow.state} (${workflow.stopReason ?? ''})`);

  // Deliver the refund's execution job a second time, as a queue redelivery would.
  const refund = workflow.actions.find((a) => a.tool === 'issue_refund');
  let redelivery = 'not attempted';
  if (refund) {
    redelivery = await redeliverRefund(t, workflowId, refund);
    log(`redelivered the refund execution job → executor answered "${redelivery}"`);
  } else failures.push('no refund action was proposed');

  const refunds = ((await call('GET', `${t.stagingUrl}/ledger/refunds?orderId=O-1002`, null)).body.refunds ?? []) as DemoReport['refunds'];
  const shipments = (((await call('GET', `${t.stagingUrl}/orders/O-1002/shipments`, null)).body.shipments ?? []) as unknown[]).length;
  if (refunds.length !== 1) failures.push(`payments ledger holds ${refunds.length} refunds for O-1002, expected 1`);
  if (refund && refunds[0]?.idempotencyKey !== refund.operationKey) failures.push('refund idempotency key differs from the operation key');
  if (shipments !== 1) failures.push(`order system holds ${shipments} shipments for O-1002, expected 1`);

  return withCliDb(t.databaseUrl, 2, async (db) => {
    await waitForAnchoredChain(db, t.witnessPath);
    const witness = t.witnessPath && existsSync(t.witnessPath) ? readWitness(t.witnessPath) : undefined;
    const audit = await verifyAuditChain(db, { trustedPublicKey: auditPublicKey(t.auditKeyPath), ...(witness ? { witness } : {}) });
    if (!audit.intact) failures.push(`audit chain broken at ${audit.firstBadSeq}: ${audit.reason}`);
    if (!audit.anchorsChecked || !audit.anchorsTrusted)
      failures.push('the chain head was not anchored and verified against the pinned key');
    if (t.witnessPath && !audit.witnessChecked) failures.push(`no anchor was witnessed in ${t.witnessPath}`);
    const timeline = await auditTimeline(db, workflowId);
    const report: DemoReport = { ok: failures.length === 0, failures, workflow, timeline, refunds, shipments, redelivery, audit };
    return report;
  });
}

/** One action of a workflow as the intake API shows it. */
type WorkflowAction = WorkflowView['actions'][number];

/**
 * Delivers the refund's execution job a second time, as a queue redelivery would (its own job id,
 * the approval the ledger holds for it), and waits (30 s at most) for the executor's answer.
 * Returns that answer (the job's return value, as a string).
 * @throws Error when the job fails or does not finish in time, or Postgres/Redis does not answer.
 */
async function redeliverRefund(t: DemoTarget, workflowId: string, refund: WorkflowAction): Promise<string> {
  const approval = await withCliDb(t.databaseUrl, 2, (db) =>
    db.selectFrom('approvals').select('id').where('action_id', '=', refund.actionId).executeTakeFirst(),
  );
  const data = {
    release: t.release,
    workflowId,
    actionId: refund.actionId,
    actionVersion: refund.version,
    approvalId: approval?.id ?? null,
  };
  const jobId = `${executionsQueue.jobId({ ...data, approvalId: null })}_redelivery`;
  const queue = { redisUrl: t.redisUrl, queuePrefix: t.queuePrefix, name: queueName(executionsQueue.base, t.release) };
  return String(await addAndAwaitJob(queue, { name: executionsQueue.jobName, data, jobId }, 30_000));
}

/** Where {@link addAndAwaitJob} adds its job: the Redis URL, the key prefix and the queue's full name. */
export interface DemoQueue {
  redisUrl: string;
  queuePrefix: string;
  name: string;
}

/**
 * Adds one job (`name`, `data`, id `jobId`) to `queue` and waits at most `timeoutMs` ms for a
 * worker to finish it, on two Redis connections of its own (the queue's, the queue events') that
 * are closed however it ends — answered, failed, timed out or Redis gone — so a failed redelivery
 * leaves no connection behind. Resolves the job's return value.
 * @throws Error when the job fails or does not finish within `timeoutMs`, or Redis does not answer.
 */
export async function addAndAwaitJob(
  queue: DemoQueue,
  job: { name: string; data: Record<string, unknown>; jobId: string },
  timeoutMs: number,
): Promise<unknown> {
  const connection = new Redis(queue.redisUrl, { maxRetriesPerRequest: null });
  const eventsConnection = new Redis(queue.redisUrl, { maxRetriesPerRequest: null });
  const q = new Queue(queue.name, { connection, prefix: queue.queuePrefix });
  const events = new QueueEvents(queue.name, { connection: eventsConnection, prefix: queue.queuePrefix });
  try {
    await events.waitUntilReady();
    const added = await q.add(job.name, job.data, { jobId: job.jobId });
    return await added.waitUntilFinished(events, timeoutMs);
  } finally {
    await Promise.allSettled([q.close(), events.close()]);
    connection.disconnect();
    eventsConnection.disconnect();
  }
}

/**
 * Waits (at most 60 s each: a loaded machine lags) for the audit service to chain everything the
 * run wrote (an empty audit outbox), then to anchor the head it reached (and, with `witnessPath`,
 * to witness that anchor), so verification covers an anchor too. Returns when both held or the
 * time ran out (the verification that follows then reports what is missing).
 */
async function waitForAnchoredChain(db: Db, witnessPath: string | undefined): Promise<void> {
  // The audit service chains everything this run wrote…
  const chainDeadline = Date.now() + 60_000;
  while (Date.now() < chainDeadline) {
    const left = await db
      .selectFrom('audit_outbox')
      .select((eb) => eb.fn.countAll<string>().as('n'))
      .executeTakeFirstOrThrow();
    if (Number(left.n) === 0) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  // …and to anchor the head it reached, so verification covers an anchor too.
  const anchorDeadline = Date.now() + 60_000;
  while (Date.now() < anchorDeadline) {
    const head = await db.selectFrom('audit_log').select('seq').orderBy('seq', 'desc').limit(1).executeTakeFirst();
    const anchored = await db.selectFrom('audit_anchors').select('seq').orderBy('id', 'desc').limit(1).executeTakeFirst();
    if (head && anchored?.seq === head.seq && witnessed(witnessPath, Number(head.seq))) break;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * The audit chain's events of workflow `workflowId` (and those of no run), in order, one line each:
 * `#seq type tool` and the decision, rule, version, approval, operation-key hash and outcome they carry.
 */
async function auditTimeline(db: Db, workflowId: string): Promise<string[]> {
  const events = await db.selectFrom('audit_log').select(['seq', 'event']).orderBy('seq').execute();
  return events
    .filter((e) => e.event.runId === workflowId || e.event.runId === null)
    .map((e) => {
      const ev = e.event as Record<string, unknown>;
      const parts = [String(ev.type).padEnd(20), String(ev.tool ?? '').padEnd(16)];
      if (ev.decision) parts.push(`decision=${String(ev.decision)}`);
      if (ev.ruleId) parts.push(`rule=${String(ev.ruleId)}`);
      if (ev.actionVersion) parts.push(`v${String(ev.actionVersion)}`);
      if (ev.approvalId) parts.push(`approval=${String(ev.approvalId).slice(0, 8)}`);
      if (ev.operationKeyHash) parts.push(`opkey#=${String(ev.operationKeyHash).slice(0, 10)}`);
      if (ev.outcome) parts.push(`outcome=${String(ev.outcome)}`);
      return `#${String(e.seq).padStart(3)} ${parts.join(' ')}`;
    });
}

/** Prints a demo report for a person. */
export function printReport(r: DemoReport, out: (line: string) => void): void {
  out('\nTimeline (audit chain, this workflow):');
  for (const line of r.timeline) out(`  ${line}`);
  out('\nActions:');
  for (const a of r.workflow.actions) {
    out(
      `  v${a.version} ${a.tool.padEnd(15)} ${JSON.stringify(a.arguments)} decision=${a.decision} rule=${a.ruleId} status=${a.status} key=${a.operationKey}`,
    );
  }
  out(`\nWorkflow ${r.workflow.workflowId}: ${r.workflow.state}`);
  out(
    `Payments ledger, O-1002: ${r.refunds.length} refund(s) ${r.refunds.map((x) => `${fmtCents(x.amountCents)} key=${x.idempotencyKey}`).join(', ')}`,
  );
  out(`Order system, O-1002: ${r.shipments} shipment(s)`);
  out(`Second delivery of the refund job: ${r.redelivery}`);
  out(
    `Audit chain: ${r.audit.intact ? 'intact' : 'BROKEN'}, ${r.audit.events} events, head ${r.audit.headHash}, ${r.audit.anchorsChecked} anchor(s) checked against the ${r.audit.anchorsTrusted ? 'pinned' : 'stored'} key${r.audit.firstBadSeq ? `, first bad seq ${r.audit.firstBadSeq}` : ''}`,
  );
  out(r.ok ? '\nDEMO OK' : `\nDEMO FAILED:\n  ${r.failures.join('\n  ')}`);
}
