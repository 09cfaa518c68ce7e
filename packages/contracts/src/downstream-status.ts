/**
 * Whether an HTTP status a system of record answered means it did not process the request, so the
 * same request may be sent again (an outage, not an answer to it): 408 Request Timeout (the
 * server stopped reading it, ADR 0690), 429 Too Many Requests, and every 5xx. Every other 4xx is
 * a refusal: the system understood the request and rejected it, and sending it again gets the
 * same answer (docs/decisions/0050-reconciliation.md, 0290). The one owner of this rule: an
 * authoritative read (`readRecordJson`: `DependencyUnavailable` vs `RecordRefused`) and a
 * reconciliation's compensating call (`retry` vs `failed`) both ask it. No answer at all (refused,
 * cut, timed out) is the caller's to classify, as an outage too.
 */
export function isOutageStatus(status: number): boolean {
  return isUnprocessedStatus(status) || status >= 500;
}

/**
 * Whether the status says, of a write, that the system did not act on it: 408 (it stopped reading
 * the request before it had it whole, RFC 9110 §15.5.9) and 429 (refused for the rate, RFC 6585
 * §4). Unlike a 5xx, which a server may answer after its effect, these are safe to send again
 * even to a system that does not deduplicate (the mail service, `notify_customer`).
 */
export function isUnprocessedStatus(status: number): boolean {
  return status === 408 || status === 429;
}
