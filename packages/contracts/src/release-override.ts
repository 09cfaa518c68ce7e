import { REMEDIATION_RULE_ID } from './reconciliation.ts';

/**
 * Rule id of an approval that a release override asks for (docs/decisions/0230-two-person-release-changes.md):
 * forcing a bundle past its boundary-case gate, activating one that raises a limit of the active
 * one, or going past a failing canary analysis. Like {@link REMEDIATION_RULE_ID}, deciding it
 * enqueues no executor or agent-loop job: the release command that needs it consumes it.
 */
export const RELEASE_OVERRIDE_RULE_ID = 'RELEASE';

/** Tool name of a release override's action (never in the agent's catalog; the approval's `tool`). */
export const RELEASE_OVERRIDE_TOOL = 'release_override';

/**
 * Approver role of a release override: held by every user whose directory role is one of
 * {@link RELEASE_APPROVER_ROLES} — and by nobody else, for no other kind of approval.
 */
export const RELEASE_APPROVER_ROLE = 'release_approver';

/** Directory roles that may decide a release override (a support lead may not). */
export const RELEASE_APPROVER_ROLES: readonly string[] = ['policy_owner', 'operator'];

/**
 * Whether deciding an approval with `ruleId` is out of band: no job follows the decision (a
 * reconciliation remediation, a release override); the command that asked consumes it.
 */
export function decidedOutOfBand(ruleId: string): boolean {
  return ruleId === REMEDIATION_RULE_ID || ruleId === RELEASE_OVERRIDE_RULE_ID;
}
