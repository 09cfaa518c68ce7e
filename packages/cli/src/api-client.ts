import { loadWorld } from '@gatehouse/contracts';
import { signUserToken } from '@gatehouse/credentials';

/** A bearer token for a user of world.json (local HS256 secret only). */
export async function tokenFor(userId: string, secret: string, ttlSeconds = 3600): Promise<string> {
  const user = loadWorld().users.find((u) => u.id === userId);
  if (!user) throw new Error(`no user ${userId} in world.json`);
  return signUserToken({ sub: user.id, tenant: user.tenant, roles: [user.role] }, secret, ttlSeconds);
}

/** JSON over HTTP with a bearer token; returns status and parsed body. */
export async function call(
  method: string,
  url: string,
  token: string | null,
  body?: unknown,
): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(url, {
    method,
    headers: { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(10_000),
  });
  const text = await res.text();
  return { status: res.status, body: text ? (JSON.parse(text) as Record<string, unknown>) : {} };
}

/** Workflow view of `GET /v1/workflows/:id`. */
export interface WorkflowView {
  workflowId: string;
  state: string;
  stopReason: string | null;
  nextStep: string | null;
  actions: Array<{
    actionId: string;
    callId: string;
    tool: string;
    target: string;
    version: number;
    supersedesVersion: number | null;
    digest: string;
    decision: string;
    ruleId: string;
    policyRevision: string;
    status: string;
    operationKey: string;
    arguments: Record<string, unknown>;
  }>;
  pendingApprovals: Array<{ approvalId: string; actionVersion: number; actionDigest: string; status: string }>;
}

/**
 * Polls a workflow until `done(view)` holds, calling `onView` on each poll (every 150 ms).
 * @throws Error with the last view when `timeoutMs` passes.
 */
export async function pollWorkflow(
  intakeUrl: string,
  token: string,
  workflowId: string,
  done: (v: WorkflowView) => boolean,
  onView: (v: WorkflowView) => Promise<void> = async () => {},
  timeoutMs = 60_000,
): Promise<WorkflowView> {
  const until = Date.now() + timeoutMs;
  let last: WorkflowView | undefined;
  while (Date.now() < until) {
    const r = await call('GET', `${intakeUrl}/v1/workflows/${workflowId}`, token);
    if (r.status !== 200) throw new Error(`GET workflow answered ${r.status}: ${JSON.stringify(r.body)}`);
    last = r.body as unknown as WorkflowView;
    await onView(last);
    if (done(last)) return last;
    await new Promise((res) => setTimeout(res, 150));
  }
  throw new Error(`workflow ${workflowId} did not settle: ${JSON.stringify(last)}`);
}

/**
 * Approves one pending approval as an approver, the way the inbox does: reads it from the API
 * and sends back the version and digest it read (docs/product/public-contract.md#approvals).
 */
export async function approveAsLead(
  approvalUrl: string,
  leadToken: string,
  approvalId: string,
): Promise<{ status: number; body: Record<string, unknown>; approval: Record<string, unknown> }> {
  const shown = await call('GET', `${approvalUrl}/v1/approvals/${approvalId}`, leadToken);
  if (shown.status !== 200) throw new Error(`GET approval answered ${shown.status}`);
  const decided = await call('POST', `${approvalUrl}/v1/approvals/${approvalId}/decision`, leadToken, {
    decision: 'approve',
    actionVersion: shown.body.actionVersion,
    actionDigest: shown.body.actionDigest,
    reason: 'verified with the customer',
  });
  return { ...decided, approval: shown.body };
}
