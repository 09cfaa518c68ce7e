import { mkdtempSync, readFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { sql } from 'kysely';
import { Queue } from 'bullmq';
import { SERVICES, approveAsLead, call, startStack, tokenFor, type RunningStack } from '@gatehouse/cli';
import { executionsQueue, queueName } from '@gatehouse/contracts';
import { freePort } from '@gatehouse/test-harness';
import type { E2EStack } from '@gatehouse/test-harness';
// The ticket kinds of the chaos load (one effect each at a system of record), reused here.
import { KIND_CYCLE, KINDS, type RunKind } from '../../chaos/support/load.ts';

/** Local HS256 secret of user tokens (the stack's default). */
export const AUTH_SECRET = 'local-auth-secret-change-me';

/**
 * The services that run as two replicas: every Gatehouse service. The model-stub and staging
 * stand in for systems outside the product (the model provider, the systems of record) and run once.
 */
export const REPLICATED = ['audit', 'policy-gateway', 'approval', 'executor', 'agent-loop', 'ops'] as const;

/** The second replica of every service: its own processes, ports and log folder, the same database, Redis prefix and secrets. */
export interface SecondReplicas {
  stack: RunningStack;
  dir: string;
  url: (service: string) => string;
}

/**
 * Starts a second process of every {@link REPLICATED} service beside `s` (the first stack):
 * the same environment (database, `QUEUE_PREFIX`, audit signing key, model-stub and staging URLs)
 * with a free port per service and its own log folder.
 */
export async function startSecondReplicas(s: E2EStack): Promise<SecondReplicas> {
  const env: Record<string, string> = { ...s.env };
  for (const svc of SERVICES.filter((x) => (REPLICATED as readonly string[]).includes(x.name))) env[svc.portVar] = String(await freePort());
  const dir = mkdtempSync(resolve(tmpdir(), 'gh-replica2-'));
  const stack = await startStack({ env, dir, only: [...REPLICATED], readyTimeoutMs: 150_000 });
  return { stack, dir, url: (service) => `http://127.0.0.1:${stack.ports[service]}` };
}

/**
 * Work one replica's log records (LOG_LEVEL=debug): queue jobs it processed, by queue (the
 * platform worker's `job processed` line), and audit events it chained (`audit events chained`).
 */
export function workDone(dir: string, service: string): { jobs: Record<string, number>; chained: number } {
  const file = resolve(dir, `${service}.log`);
  const jobs: Record<string, number> = {};
  let chained = 0;
  if (!existsSync(file)) return { jobs, chained };
  for (const line of readFileSync(file, 'utf8').split('\n')) {
    if (!line.startsWith('{')) continue;
    let rec: { msg?: string; queue?: string; events?: number };
    try {
      rec = JSON.parse(line) as typeof rec;
    } catch {
      continue;
    }
    if (rec.msg === 'job processed' && rec.queue) jobs[rec.queue] = (jobs[rec.queue] ?? 0) + 1;
    if (rec.msg === 'audit events chained') chained += rec.events ?? 0;
  }
  return { jobs, chained };
}

/** One batch ticket, on an order of its own. */
export interface Run {
  ticketId: string;
  user: string;
  kind: RunKind;
  orderId: string;
  workflowId: string;
}

/**
 * Creates `n` orders (`O-3000`… upward: the planner reads four-digit ids) and submits a ticket
 * for each, alternating the intake replica (`intakeUrls[i % 2]`) and the rep.
 * @throws Error when intake refuses a ticket.
 */
export async function submitBatch(s: E2EStack, intakeUrls: readonly string[], n: number): Promise<Run[]> {
  const runs: Run[] = [];
  for (let i = 0; i < n; i++) {
    const orderId = `O-${3000 + i}`;
    const kind = KIND_CYCLE[i % KIND_CYCLE.length]!;
    await sql`insert into staging.orders (id, tenant, region, customer, paid_cents, status)
      values (${orderId}, 'quillfeather', 'US', 'cust-2', ${KINDS[kind].paidCents}, 'shipped')`.execute(s.db.db);
    const user = i % 2 ? 'rep-ben' : 'rep-ana';
    const ticketId = `R-${i}`;
    const r = await call('POST', `${intakeUrls[i % intakeUrls.length]}/v1/tickets`, await tokenFor(user, AUTH_SECRET), {
      ticketId,
      text: KINDS[kind].text(orderId),
      mode: 'act',
    });
    if (r.status !== 202) throw new Error(`intake ${r.status}: ${JSON.stringify(r.body)}`);
    runs.push({ ticketId, user, kind, orderId, workflowId: String(r.body.workflowId) });
  }
  return runs;
}

/** The execution payload of one action version, as the approval service or the gateway enqueues it. */
export interface ExecutionTarget {
  workflowId: string;
  actionId: string;
  actionVersion: number;
  approvalId: string | null;
}

/**
 * A duplicate-delivery storm on the executions queue: `copies` deliveries of each target's
 * execution job, half under its deterministic job id (the queue drops an add while that job is
 * kept) and half under fresh ids (`…_storm<tag><i>`, a redelivery the queue cannot recognise), all
 * added at once so both executor replicas take them together. Returns the fresh job ids.
 */
export async function storm(q: Queue, targets: readonly ExecutionTarget[], copies: number, tag: string): Promise<string[]> {
  const fresh: string[] = [];
  const adds: Array<Promise<unknown>> = [];
  for (const t of targets) {
    const payload = { release: 'rel-1', ...t };
    const id = executionsQueue.jobId(payload);
    for (let i = 0; i < copies; i++) {
      const jobId = i % 2 ? `${id}_storm${tag}${i}` : id;
      if (jobId !== id) fresh.push(jobId);
      adds.push(q.add(executionsQueue.jobName, payload, { ...executionsQueue.options, jobId }));
    }
  }
  await Promise.all(adds);
  return fresh;
}

/** The executions queue of rel-1 under the stack's prefix. */
export function executionsQueueOf(s: E2EStack): Queue {
  return new Queue(queueName(executionsQueue.base, 'rel-1'), { connection: { url: s.env.REDIS_URL! }, prefix: s.prefix });
}

/**
 * A lead (lead-eli) deciding every pending approval of `workflowIds` while the batch runs,
 * alternating the approval replica it calls; `onApproved` runs right after each 200 (the
 * in-flight storm). Errors are retried on the next round.
 */
export function startApprover(
  s: E2EStack,
  approvalUrls: readonly string[],
  workflowIds: () => ReadonlySet<string>,
  onApproved: (t: ExecutionTarget) => Promise<void>,
): { approvedVia: number[]; stop: () => Promise<void> } {
  let running = true;
  const approvedVia = approvalUrls.map(() => 0);
  const decided = new Set<string>();
  let turn = 0;
  const loop = (async () => {
    const token = await tokenFor('lead-eli', AUTH_SECRET);
    while (running) {
      const pending = await s.db.db
        .selectFrom('approvals')
        .select(['id', 'workflow_id', 'action_id', 'action_version'])
        .where('status', '=', 'pending')
        .execute();
      for (const a of pending.filter((p) => workflowIds().has(p.workflow_id) && !decided.has(p.id))) {
        const via = turn++ % approvalUrls.length;
        const d = await approveAsLead(approvalUrls[via]!, token, a.id).catch(() => null);
        if (d?.status !== 200) continue;
        decided.add(a.id);
        approvedVia[via]!++;
        await onApproved({ workflowId: a.workflow_id, actionId: a.action_id, actionVersion: a.action_version, approvalId: a.id });
      }
      await new Promise((done) => setTimeout(done, 300));
    }
  })();
  return {
    approvedVia,
    stop: async () => {
      running = false;
      await loop;
    },
  };
}
