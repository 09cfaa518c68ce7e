import { loadWorld } from '@gatehouse/contracts';
import { signUserToken } from '@gatehouse/credentials';
import { createApprovalClient, createIntakeClient, type ApprovalSchemas, type ApprovalView, type WorkflowView } from '@gatehouse/client';

/** `GET /v1/workflows/:id` as the intake's OpenAPI document types it (one definition: packages/contracts/src/api/intake.ts). */
export type { WorkflowView };

/** A bearer token for a user of world.json (local HS256 secret only). */
export async function tokenFor(userId: string, secret: string, ttlSeconds = 3600): Promise<string> {
  const user = loadWorld().users.find((u) => u.id === userId);
  if (!user) throw new Error(`no user ${userId} in world.json`);
  return signUserToken({ sub: user.id, tenant: user.tenant, roles: [user.role] }, secret, ttlSeconds);
}

/**
 * JSON over HTTP with a bearer token, untyped: for surfaces without an OpenAPI document (the
 * staging systems of record, the model-stub) and for tests that send what a typed client would
 * refuse to build. The intake, approval and ops APIs have typed clients: `@gatehouse/client`.
 */
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

/**
 * Polls a workflow through the intake client until `done(view)` holds, calling `onView` on each
 * poll (every 150 ms).
 * @throws Error when the intake answers other than 200, or with the last view when `timeoutMs` passes.
 */
export async function pollWorkflow(
  intakeUrl: string,
  token: string,
  workflowId: string,
  done: (v: WorkflowView) => boolean,
  onView: (v: WorkflowView) => Promise<void> = async () => {},
  timeoutMs = 60_000,
): Promise<WorkflowView> {
  const intake = createIntakeClient({ baseUrl: intakeUrl, token });
  const until = Date.now() + timeoutMs;
  let last: WorkflowView | undefined;
  while (Date.now() < until) {
    const r = await intake.GET('/v1/workflows/{id}', { params: { path: { id: workflowId } } });
    if (!r.data) throw new Error(`GET workflow answered ${r.response.status}: ${JSON.stringify(r.error)}`);
    last = r.data;
    await onView(last);
    if (done(last)) return last;
    await new Promise((res) => setTimeout(res, 150));
  }
  throw new Error(`workflow ${workflowId} did not settle: ${JSON.stringify(last)}`);
}

/**
 * Approves one pending approval as an approver, the way the inbox does: reads it from the
 * approval API and sends back the version and digest it read (docs/product/public-contract.md#approvals).
 * Resolves with the decision's status and body (a `DecisionResult` on 200, else an `ErrorBody`) and the approval as read.
 * @throws Error when the approval cannot be read (not 200).
 */
export async function approveAsLead(
  approvalUrl: string,
  leadToken: string,
  approvalId: string,
): Promise<{ status: number; body: ApprovalSchemas['DecisionResult'] | ApprovalSchemas['ErrorBody']; approval: ApprovalView }> {
  const approvals = createApprovalClient({ baseUrl: approvalUrl, token: leadToken });
  const path = { id: approvalId };
  const shown = await approvals.GET('/v1/approvals/{id}', { params: { path } });
  if (!shown.data) throw new Error(`GET approval answered ${shown.response.status}`);
  const decided = await approvals.POST('/v1/approvals/{id}/decision', {
    params: { path },
    body: {
      decision: 'approve',
      actionVersion: shown.data.actionVersion,
      actionDigest: shown.data.actionDigest,
      reason: 'verified with the customer',
    },
  });
  return { status: decided.response.status, body: decided.data ?? decided.error, approval: shown.data };
}
