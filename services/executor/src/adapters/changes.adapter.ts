import { createHash } from 'node:crypto';
import { findPlan } from '@gatehouse/policy';
import { attempt } from './http-call.ts';
import type { AdapterCall, AdapterResult } from './adapter.ts';
import { idempotentWrite } from './idempotent-write.ts';

/** Attempts at most for the idempotent change-service write. */
export const CHANGES_MAX_ATTEMPTS = 4;

/**
 * The plan id of an operation (docs/product/users-and-tools.md#change-pack: `plan_` + 16 lowercase alphanumerics): derived from the
 * operation key, so every attempt and redelivery of one `prepare_change` names the same plan.
 */
export function planIdFor(operationKey: string): string {
  const digits = BigInt(`0x${createHash('sha256').update(operationKey).digest('hex')}`).toString(36);
  return `plan_${digits.padStart(16, '0').slice(-16)}`;
}

/**
 * `lookup_change`: reads the change record (bounded read, 3 attempts). The tenant was checked by
 * policy (C2); only the fields the next step needs are returned.
 */
export async function lookupChange(call: AdapterCall): Promise<AdapterResult> {
  const id = encodeURIComponent(String(call.args.changeId));
  for (let n = 1; n <= 3; n++) {
    const res = await attempt(`${call.stagingUrl}/changes/${id}`, {}, Math.max(1, Math.min(call.deadlineMs - Date.now(), 5000)));
    if (res.kind === 'response' && res.status === 404)
      return { status: 'failed', reason: 'change_not_found', retryable: false, attempts: n };
    if (res.kind === 'response' && res.status === 200) {
      const c = res.body;
      return {
        status: 'succeeded',
        attempts: n,
        evidenceRef: null,
        data: { changeId: c.id, environment: c.environment, service: c.service, summary: c.summary, risk: c.risk },
      };
    }
    await new Promise((r) => setTimeout(r, 100 * n));
  }
  return { status: 'failed', reason: 'change_service_unavailable', retryable: true, attempts: 3 };
}

/**
 * `prepare_change`: writes the draft plan to the ledger (`change_plans`) — no external state.
 * Idempotent by operation key: a repeat returns the plan the first attempt wrote.
 */
export async function prepareChange(call: AdapterCall): Promise<AdapterResult> {
  const id = planIdFor(call.operationKey);
  await call.ledger
    .insertInto('change_plans')
    .values({
      id,
      workflow_id: call.workflow.id,
      operation_key: call.operationKey,
      tenant: call.workflow.tenant,
      change_id: String(call.args.changeId),
      window: call.args.window as 'next-maintenance-window' | 'manual-window',
      note: (call.args.note as string | null) ?? null,
    })
    .onConflict((oc) => oc.column('operation_key').doNothing())
    .execute();
  const plan = await call.ledger
    .selectFrom('change_plans')
    .select(['id', 'change_id', 'window', 'note'])
    .where('operation_key', '=', call.operationKey)
    .executeTakeFirstOrThrow();
  return {
    status: 'succeeded',
    attempts: 1,
    evidenceRef: plan.id,
    data: { planId: plan.id, changeId: plan.change_id, window: plan.window, note: plan.note },
  };
}

/**
 * `schedule_change`: schedules the plan on the staging change service (idempotent by operation
 * key, read-back by operation key). The change id comes from the plan this workflow prepared,
 * never from the model's arguments.
 */
export async function scheduleChange(call: AdapterCall): Promise<AdapterResult> {
  const plan = await findPlan(call.ledger, call.workflow.id, String(call.args.planId));
  if (!plan) return { status: 'failed', reason: 'plan_not_found', retryable: false, attempts: 0 };
  return idempotentWrite(call, {
    downstream: 'changes',
    url: `${call.stagingUrl}/changes/operations`,
    body: { planId: plan.id, changeId: plan.changeId, window: call.args.window, note: call.args.note ?? null },
    target: { planId: plan.id, changeId: plan.changeId, window: call.args.window ?? null, note: call.args.note ?? null },
    maxAttempts: CHANGES_MAX_ATTEMPTS,
    evidence: (b) => String(b.operationKey ?? ''),
  });
}
