import type { DelegationSigningKey } from '@gatehouse/credentials';
import { executeChangeCancel, requestChangeCancel, type CancelOutcome } from '@gatehouse/reconciliation';
import { auditGateFromEnv } from '@gatehouse/platform';
import { outageOf, untilLeaseEnds, type ReconcileContext } from './reconcile-commands.ts';
import { UsageError } from './commands.ts';

function say(o: CancelOutcome): string {
  switch (o.state) {
    case 'cancelled':
      return `${o.operationKey}: cancelled before its window (approved by ${o.approver})${o.replayed ? ' — already done, nothing sent again' : ''}`;
    case 'awaiting_approval':
      return `${o.operationKey}: refused — approval ${o.approvalId} is still pending; a change owner must approve it (POST /v1/approvals/${o.approvalId}/decision), then run this command again`;
    case 'busy':
      return `${o.operationKey}: another process is executing this cancel${untilLeaseEnds(o.leaseUntil)}`;
    case 'retry': // thrown as exit 4 by the command (outageOf); kept for completeness
      return `${o.operationKey}: not cancelled — the change service did not process it (${o.reason}); run this command again (same key, idempotent)`;
    case 'refused':
      return `${o.operationKey}: refused (${o.reason}). Next step: ${o.nextStep}`;
    case 'not_requested':
      return `${o.operationKey}: no cancel requested`;
  }
}

/**
 * `gatehouse change cancel <operationKey|workflowId> --reason <why>` (docs/decisions/0280,
 * docs/runbooks/reenable.md#cancel-a-scheduled-change): the first run asks a change owner of the
 * change's tenant to approve a cancel-before-start (an approval decided through the approval
 * API; the operator who asks cannot decide it); a run while it is pending is refused; once
 * approved, it runs the cancel exactly once; after a denial or expiry, a new request.
 * Returns the exit code: 0 when requested or cancelled, 1 when refused (the change service's 4xx
 * with its reason and the next step, or the approval denied, expired or void), pending or busy.
 * @throws DependencyUnavailable (exit 4) when the change service did not process the cancel (no
 *   answer, 408, 429, 5xx) or Postgres did not answer reading the credential epoch: nothing was
 *   cancelled, the message names the server and how to check it ({@link outageOf}); the same key
 *   is sent when the command runs again.
 * @throws AuditUnavailable when audit storage is unhealthy (exit 4): nothing sent, the approval left unused.
 * @throws UsageError (exit 2) when the run would ask for the cancel and `--reason` is missing:
 *   nothing was written (a run after a denial says so and exits 1 instead).
 * @throws RemediationRefused when the reference names no scheduled change, the step is not
 *   scheduled (yet, naming the pending approval of the schedule to deny, or any more), or the
 *   reason is malformed.
 */
export async function changeCancelCommand(
  ctx: ReconcileContext & { signingKey: DelegationSigningKey },
  ref: string,
  reason: string | undefined,
): Promise<number> {
  const deps = {
    db: ctx.db,
    stagingUrl: ctx.stagingUrl,
    hmacKey: ctx.hmacKey,
    release: ctx.release,
    signingKey: ctx.signingKey,
    auditGate: auditGateFromEnv(),
  };
  const o = await executeChangeCancel(deps, ref);
  const again = o.state === 'refused' && /^approval_(denied|expired|void)$/.test(o.reason);
  if (o.state === 'retry') throw outageOf(ctx, o, `the cancel of ${o.operationKey}`, 'the change service') ?? new Error(say(o));
  if (o.state !== 'not_requested' && !again) {
    ctx.out(say(o));
    return o.state === 'cancelled' ? 0 : 1;
  }
  if (again) ctx.out(say(o));
  if (reason === undefined || reason === '') {
    const ask = `gatehouse change cancel ${ref} --reason <why>`;
    // After a denial the answer was no (exit 1); with nothing requested, nothing ran (exit 2).
    if (again) {
      ctx.out(`  to ask a change owner again: ${ask}`);
      return 1;
    }
    throw new UsageError(`change cancel needs --reason <why> to ask for the cancel of ${o.operationKey} (nothing was requested): ${ask}`);
  }
  const t = await requestChangeCancel(deps, { ref, reason, operator: ctx.operator });
  ctx.out(
    `${t.existing ? 'already requested' : 'requested'}: cancel of ${t.operationKey} — approval ${t.approvalId} (action v${t.actionVersion}, digest ${t.actionDigest}, key ${t.cancelKey})`,
  );
  ctx.out(
    `  a ${t.approverRole} of ${t.tenant} other than you must decide it before ${t.expiresAt.toISOString()} (POST /v1/approvals/${t.approvalId}/decision); then run this command again`,
  );
  return 0;
}
