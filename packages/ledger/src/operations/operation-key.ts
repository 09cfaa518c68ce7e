import { canonicalJson, sha256Hex } from '@gatehouse/contracts';

/**
 * The first characters of every operation key derived from a ticket: the scheme's version. A key
 * of a former release begins with its run's UUID (`<workflowId>:action:<n>`), a change cancel's
 * with `cancel:`, a remediation's with `recon_`, an override's with `override:` — none with this.
 */
export const TICKET_KEY_SCHEME = 'tk1-';

/**
 * The part of an operation key that names the ticket: {@link TICKET_KEY_SCHEME} then the SHA-256,
 * hex, of the canonical JSON of `["operation-key", tenant, ticketId]` (68 characters whatever the
 * ids hold). JSON keeps the pair unambiguous (a `:` in a ticket id cannot shift the boundary
 * between tenant and ticket), and the digest keeps the key within the 1–255 visible ASCII
 * characters an `Idempotency-Key` may have at the systems of record, with room for a cancel's
 * `cancel:` and `.v<n>` around it (docs/decisions/0789-operation-keys-from-the-ticket.md).
 * The tenant and ticket id are the run's (`workflows.tenant`, `workflows.ticket_id`), any text.
 */
export function ticketKeyStem(tenant: string, ticketId: string): string {
  return `${TICKET_KEY_SCHEME}${sha256Hex(canonicalJson(['operation-key', tenant, ticketId]))}`;
}

/**
 * The operation key — the idempotency key at the systems of record — of version `version` of an
 * action in the run of `tenant`'s ticket `ticketId`: `tk1-<sha256>:action:<version>`. A tenant's
 * ticket id names one run while the ledger remembers it (`UNIQUE (tenant, ticket_id)`), and the
 * version is unique in the run, so a key is unique per action version; and a run started again for
 * the same ticket after the ledger lost the first (a promote that lost commits, ADR 0775) presents
 * the first run's keys, so the payments ledger replays what it already did instead of doing it
 * twice (ADR 0789). Keys already stored keep their form: only new action versions get this one.
 * @param run the run's row, or the part of it with `tenant` and `ticket_id`.
 * @param version the action version, a positive integer (the run's last version + 1).
 * @throws RangeError when `version` is not a positive safe integer.
 * @throws TypeError when `run` lacks its tenant or ticket id (a row read without them): keys of
 *   every such run would be the same, and one run would replay another's effects.
 */
export function ticketOperationKey(run: { tenant: string; ticket_id: string }, version: number): string {
  if (!Number.isSafeInteger(version) || version < 1) throw new RangeError(`an action version is a positive integer, not ${version}`);
  if (typeof run.tenant !== 'string' || typeof run.ticket_id !== 'string') {
    throw new TypeError("an operation key needs the run's tenant and ticket id");
  }
  return `${ticketKeyStem(run.tenant, run.ticket_id)}:action:${version}`;
}
