/**
 * A cohort (who runs a candidate release or a re-enabled tool first) as `--cohort` spells it.
 * `apps/cli` parses the flag (`parseCohort`); this module is the one way back to text, for
 * refusals, status lines, audit outcomes and the items an override is bound to.
 */

/** A cohort: tenant ids and user ids (either list may be missing when read from a stored column). */
export interface CohortLists {
  tenants?: readonly string[];
  users?: readonly string[];
}

/** The cohort's entries in `--cohort` order: every `tenant:<id>`, then every `user:<id>`. */
export function cohortEntries(cohort: CohortLists): string[] {
  return [...(cohort.tenants ?? []).map((t) => `tenant:${t}`), ...(cohort.users ?? []).map((u) => `user:${u}`)];
}

/** `tenant:T,user:U` as `--cohort` takes it, or `no one` for an empty or missing cohort. */
export function formatCohort(cohort: CohortLists | null): string {
  const entries = cohort ? cohortEntries(cohort) : [];
  return entries.length ? entries.join(',') : 'no one';
}
