import { tokenFor, call, type WorkflowView } from '@gatehouse/cli';
import { startE2EStack, type E2EStack } from '@gatehouse/test-harness';
import { sql, type Kysely } from 'kysely';
import type { DB } from '@gatehouse/ledger';

export const SECRET = 'local-auth-secret-change-me';

/** A stack of every service as processes (see packages/test-harness/src/stack.ts). */
export type HuntStack = E2EStack;

/** The shared process stack (packages/test-harness/src/stack.ts) with env overrides. */
export const startHuntStack = startE2EStack;

/** What a scripted answer may say of itself: its response `id`, `model` name and `usage` counts, true or not. */
export type AnswerFields = {
  id?: string;
  model?: string;
  usage?: { input_tokens?: number; output_tokens?: number; total_tokens?: number };
};

export type Entry =
  | ({
      type: 'function_calls';
      calls: Array<{ name: string; arguments: string | Record<string, unknown>; call_id?: string }>;
    } & AnswerFields)
  | ({ type: 'message'; text: string } & AnswerFields)
  | { type: 'error'; status: number; headers?: Record<string, string> };

export const fc = (...calls: Array<[string, string | Record<string, unknown>]>): Entry => ({
  type: 'function_calls',
  calls: calls.map(([name, args]) => ({ name, arguments: args })),
});
export const msg = (text = 'Done.'): Entry => ({ type: 'message', text });

export async function fixtures(s: HuntStack, ticketId: string, responses: Entry[], repeat = false): Promise<void> {
  const r = await call('POST', `${s.url('model-stub')}/fixtures`, null, { ticketId, responses, ...(repeat ? { repeat: true } : {}) });
  if (r.status !== 201) throw new Error(`fixtures: ${r.status} ${JSON.stringify(r.body)}`);
}

export async function submit(
  s: HuntStack,
  user: string,
  ticketId: string,
  text: string,
  mode: 'act' | 'investigate' = 'act',
  pack: 'support' | 'change' = 'support',
): Promise<{ token: string; workflowId: string }> {
  const token = await tokenFor(user, SECRET);
  const r = await call('POST', `${s.url('agent-loop')}/v1/tickets`, token, { ticketId, text, mode, pack });
  if (r.status !== 202) throw new Error(`intake: ${r.status} ${JSON.stringify(r.body)}`);
  return { token, workflowId: String(r.body.workflowId) };
}

export async function view(s: HuntStack, token: string, id: string): Promise<WorkflowView & Record<string, unknown>> {
  const r = await call('GET', `${s.url('agent-loop')}/v1/workflows/${id}`, token);
  if (r.status !== 200) throw new Error(`GET workflow ${r.status}`);
  return r.body as never;
}

export async function waitFor(
  s: HuntStack,
  token: string,
  id: string,
  pred: (v: WorkflowView & Record<string, unknown>) => boolean,
  timeoutMs = 45_000,
): Promise<WorkflowView & Record<string, unknown>> {
  const until = Date.now() + timeoutMs;
  let last: (WorkflowView & Record<string, unknown>) | undefined;
  while (Date.now() < until) {
    last = await view(s, token, id);
    if (pred(last)) return last;
    await sleep(150);
  }
  throw new Error(`workflow ${id} did not reach the expected view; last: ${JSON.stringify(summary(last))}`);
}

export function summary(v: (WorkflowView & Record<string, unknown>) | undefined): unknown {
  if (!v) return null;
  return {
    state: v.state,
    stopReason: v.stopReason,
    actions: v.actions.map((a) => `${a.tool} v${a.version} ${JSON.stringify(a.arguments)} ${a.decision}/${a.ruleId} ${a.status}`),
    pending: v.pendingApprovals.map((p) => `${p.approvalId.slice(0, 8)} v${p.actionVersion} ${p.status}`),
  };
}

export const settled = (v: { state: string }): boolean => ['completed', 'stopped', 'needs_reconciliation', 'paused'].includes(v.state);
export const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/** Whether the audit service's last heartbeat is older than `seconds` (the audit-health gate reads it). */
export async function auditHeartbeatOlderThan(db: Kysely<DB>, seconds: number): Promise<boolean> {
  const r = await sql<{
    old: boolean;
  }>`select now() - beat_at > make_interval(secs => ${seconds}) as old from audit_heartbeat where id = 1`.execute(db);
  return r.rows[0]?.old === true;
}

/** Polls `cond` every 150 ms until it holds. @throws Error naming `what` after `timeoutMs`. */
export async function waitUntil(cond: () => Promise<boolean>, what: string, timeoutMs = 45_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (Date.now() < until) {
    if (await cond()) return;
    await sleep(150);
  }
  throw new Error(`timed out waiting for ${what}`);
}

export async function refunds(s: HuntStack, orderId: string): Promise<Array<{ amountCents: number; idempotencyKey: string }>> {
  return ((await call('GET', `${s.url('staging')}/ledger/refunds?orderId=${orderId}`, null)).body.refunds ?? []) as never;
}
export async function shipments(s: HuntStack, orderId: string): Promise<unknown[]> {
  return ((await call('GET', `${s.url('staging')}/orders/${orderId}/shipments`, null)).body.shipments ?? []) as never;
}
export async function mails(s: HuntStack, orderId: string): Promise<unknown[]> {
  return ((await call('GET', `${s.url('staging')}/mail/messages?orderId=${orderId}`, null)).body.messages ?? []) as never;
}
export async function stagingRequests(s: HuntStack, q = ''): Promise<Array<Record<string, unknown>>> {
  return ((await call('GET', `${s.url('staging')}/requests${q}`, null)).body.requests ?? []) as never;
}
export async function fault(s: HuntStack, spec: Record<string, unknown>): Promise<void> {
  const r = await call('POST', `${s.url('staging')}/faults`, null, spec);
  if (r.status !== 201) throw new Error(`fault: ${r.status} ${JSON.stringify(r.body)}`);
}
export async function modelRequests(
  s: HuntStack,
  ticketId: string,
): Promise<{ requests: Array<{ tools: string[]; input: unknown }>; pairingErrors: number }> {
  return (await call('GET', `${s.url('model-stub')}/requests?ticketId=${ticketId}`, null)).body as never;
}

export async function getApproval(s: HuntStack, as: string, id: string): Promise<{ status: number; body: Record<string, unknown> }> {
  return call('GET', `${s.url('approval')}/v1/approvals/${id}`, await tokenFor(as, SECRET));
}
export async function decide(
  s: HuntStack,
  as: string,
  id: string,
  body: Record<string, unknown>,
): Promise<{ status: number; body: Record<string, unknown> }> {
  return call('POST', `${s.url('approval')}/v1/approvals/${id}/decision`, await tokenFor(as, SECRET), body);
}
/** Reads the approval as `as` and approves with the version and digest shown. */
export async function approve(s: HuntStack, as: string, id: string): Promise<{ status: number; body: Record<string, unknown> }> {
  const shown = await getApproval(s, 'lead-eli', id);
  return decide(s, as, id, { decision: 'approve', actionVersion: shown.body.actionVersion, actionDigest: shown.body.actionDigest });
}

export { tokenFor, call };

import { execFile } from 'node:child_process';
import { resolve as resolvePath } from 'node:path';
import { repoRoot } from '@gatehouse/contracts';

/**
 * Runs the real `gatehouse` CLI against this stack; ops commands carry `as`'s token (default
 * the operator ops-gus) in GATEHOUSE_TOKEN.
 */
export async function cli(s: HuntStack, args: string[], as = 'ops-gus'): Promise<string> {
  const token = await tokenFor(as, SECRET);
  return new Promise((done, fail) => {
    execFile(
      process.execPath,
      [resolvePath(repoRoot, 'apps/cli/src/main.ts'), ...args],
      { cwd: repoRoot, env: { ...process.env, ...s.env, LOG_LEVEL: 'warn', GATEHOUSE_TOKEN: token }, timeout: 120_000 },
      (err, stdout, stderr) => {
        if (err) fail(new Error(`cli ${args.join(' ')}: ${err.message} ${stderr}`));
        else done(stdout + stderr);
      },
    );
  });
}
