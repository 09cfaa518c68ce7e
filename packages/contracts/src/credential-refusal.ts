/**
 * The refusals by a system of record of Gatehouse's own delegated credential, as opposed to a
 * refusal of the request on the system's own authority (tenant, ceiling, revoked epoch): a token
 * that does not verify (401 `invalid_token…`: signed with a key the system does not trust,
 * expired, malformed) or one minted for another audience or scope (403 `wrong_audience`,
 * `wrong_scope`). Such an action is `failed`, not `denied`, and the audit service's
 * `delegation_rejected` monitor raises it for on-call (docs/decisions/0600-our-credential-refused-is-not-a-denial.md).
 * A regular expression over an operation's error `<status>:<reason>`, read alike by JavaScript
 * and PostgreSQL's `~`.
 */
export const OWN_CREDENTIAL_REFUSED = '^(401:|403:(wrong_audience|wrong_scope)$)';

/** Whether an operation's error `<status>:<reason>` is a refusal of our own credential ({@link OWN_CREDENTIAL_REFUSED}). */
export function ownCredentialRefused(error: string): boolean {
  return new RegExp(OWN_CREDENTIAL_REFUSED).test(error);
}

/**
 * The reason a system of record answers with 503 when it cannot read Gatehouse's revocation epoch
 * to check a delegated credential (docs/decisions/0170-delegated-credentials-bind-the-operation.md,
 * 0685). The systems of record check the epoch before any effect, and hold it across the effect's
 * commit, rolling the effect back when they cannot: a 503 with this reason says nothing was
 * written (docs/decisions/0698-epoch-unavailable-wrote-nothing.md), so an effect the system does not
 * deduplicate (mail) is sent again under a fresh token instead of ending `failed_unknown`.
 */
export const EPOCH_UNAVAILABLE = 'epoch_unavailable';
