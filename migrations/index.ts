import type { Migration } from 'kysely';
import * as createLedger from './20261130000100-CreateLedger.ts';
import * as createAudit from './20261130000200-CreateAudit.ts';
import * as changePack from './20261130000300-ChangePack.ts';
import * as reconciliation from './20261130000400-Reconciliation.ts';
import * as releaseRollout from './20261130000500-ReleaseRollout.ts';
import * as auditTraceContext from './20261130000600-AuditTraceContext.ts';
import * as refundWindowIndex from './20261130000700-RefundWindowIndex.ts';
import * as budgetWaits from './20261130000800-BudgetWaits.ts';
import * as releaseOverrides from './20261201000100-ReleaseOverrides.ts';
import * as reasoningItems from './20261201000145-ReasoningItems.ts';
import * as outboxJobIdIndex from './20261201000200-OutboxJobIdIndex.ts';
import * as workflowEvents from './20261201000300-WorkflowEvents.ts';
import * as operationTokenEpoch from './20261201000400-OperationTokenEpoch.ts';
import * as actionTenantAndUser from './20261201000900-ActionTenantAndUser.ts';
import * as toolReenables from './20261201000500-ToolReenables.ts';
import * as epochBumpIndex from './20261202000100-EpochBumpIndex.ts';
import * as monitorPasses from './20261202000200-MonitorPasses.ts';
import * as lockedRefundSums from './20261203000100-LockedRefundSums.ts';
import * as followUpIdempotencyKey from './20261205000100-FollowUpIdempotencyKey.ts';
import * as releaseFirstActive from './20261206000100-ReleaseFirstActive.ts';
import * as discardedModelAnswers from './20261206000680-DiscardedModelAnswers.ts';
import * as refundWindowsFromTheClaim from './20261206000682-RefundWindowsFromTheClaim.ts';
import * as refundsOutsideSteps from './20261206000686-RefundsOutsideSteps.ts';
import * as followUpAnswer from './20261206000689-FollowUpAnswer.ts';
import * as refundsOutsideStepsByWindow from './20261206000697-RefundsOutsideStepsByWindow.ts';
import * as releaseDrainingSince from './20261206000699-ReleaseDrainingSince.ts';
import * as refundSumsReadCandidatesOnce from './20261206000702-RefundSumsReadCandidatesOnce.ts';
import * as workflowWritesWithheld from './20261207000724-WorkflowWritesWithheld.ts';
import * as auditLossHold from './20261208000795-AuditLossHold.ts';
import * as userTokenRevocations from './20261206000695-UserTokenRevocations.ts';

/** Every migration, keyed by its file name (sorted order is apply order). */
export const migrations: Record<string, Migration> = {
  '20261130000100-CreateLedger': createLedger,
  '20261130000200-CreateAudit': createAudit,
  '20261130000300-ChangePack': changePack,
  '20261130000400-Reconciliation': reconciliation,
  '20261130000500-ReleaseRollout': releaseRollout,
  '20261130000600-AuditTraceContext': auditTraceContext,
  '20261130000700-RefundWindowIndex': refundWindowIndex,
  '20261130000800-BudgetWaits': budgetWaits,
  '20261201000100-ReleaseOverrides': releaseOverrides,
  '20261201000145-ReasoningItems': reasoningItems,
  '20261201000200-OutboxJobIdIndex': outboxJobIdIndex,
  '20261201000300-WorkflowEvents': workflowEvents,
  '20261201000400-OperationTokenEpoch': operationTokenEpoch,
  '20261201000500-ToolReenables': toolReenables,
  '20261201000900-ActionTenantAndUser': actionTenantAndUser,
  '20261202000100-EpochBumpIndex': epochBumpIndex,
  '20261202000200-MonitorPasses': monitorPasses,
  '20261203000100-LockedRefundSums': lockedRefundSums,
  '20261205000100-FollowUpIdempotencyKey': followUpIdempotencyKey,
  '20261206000100-ReleaseFirstActive': releaseFirstActive,
  '20261206000680-DiscardedModelAnswers': discardedModelAnswers,
  '20261206000682-RefundWindowsFromTheClaim': refundWindowsFromTheClaim,
  '20261206000686-RefundsOutsideSteps': refundsOutsideSteps,
  '20261206000689-FollowUpAnswer': followUpAnswer,
  '20261206000695-UserTokenRevocations': userTokenRevocations,
  '20261206000697-RefundsOutsideStepsByWindow': refundsOutsideStepsByWindow,
  '20261206000699-ReleaseDrainingSince': releaseDrainingSince,
  '20261206000702-RefundSumsReadCandidatesOnce': refundSumsReadCandidatesOnce,
  '20261207000724-WorkflowWritesWithheld': workflowWritesWithheld,
  '20261208000795-AuditLossHold': auditLossHold,
};
