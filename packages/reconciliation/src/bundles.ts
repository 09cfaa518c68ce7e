import { loadActiveChangeBundle, loadActiveSupportBundle, type ChangeBundle, type SupportBundle } from '@gatehouse/policy';

/**
 * The reference support bundle reconciliation judges against (its auto limit selects
 * `refund_over_limit_without_approval`; its approval rules govern remediations): loaded only if
 * it passes its boundary-case gate, so a bundle with a units mistake — even one forced active —
 * can never become reconciliation's reference.
 * @throws Error when the bundle is missing, not a support bundle, or fails its gate.
 */
export function referenceSupportBundle(revision = 'support-p1', dir?: string): SupportBundle {
  return loadActiveSupportBundle(revision, dir);
}

/**
 * The change bundle whose approval rules govern change remediations, gated like the support one.
 * @throws Error when the bundle is missing, not a change bundle, or fails its gate.
 */
export function referenceChangeBundle(revision = 'change-c1', dir?: string): ChangeBundle {
  return loadActiveChangeBundle(revision, dir);
}
