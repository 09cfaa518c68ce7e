import { runReconciliation } from '@gatehouse/reconciliation';
import { AUDIT_HMAC_KEY, type Harness } from '../executor/support/harness.ts';

/**
 * What the reconciliation tests over the executor harness (`harness()`, read at each call: the
 * tests start it in `beforeAll`) call: a pass as `ops-gus`, the
 * remediation settings (release `rel-1`, the harness's signing key; the audit gate's heartbeat age
 * `maxHeartbeatAgeMs`, default an hour), the live (`open` or `frozen`) item of a subject, and an
 * operation by key.
 */
export function reconOps(harness: () => Harness, maxHeartbeatAgeMs = 3_600_000) {
  return {
    pass: () => runReconciliation({ db: harness().db, stagingUrl: harness().stagingUrl, hmacKey: AUDIT_HMAC_KEY, actor: 'ops-gus' }),
    remediation: () => ({
      db: harness().db,
      stagingUrl: harness().stagingUrl,
      hmacKey: AUDIT_HMAC_KEY,
      release: 'rel-1',
      signingKey: harness().delegationKeys.signing,
      auditGate: { maxHeartbeatAgeMs, maxBacklogAgeMs: 3_600_000 },
    }),
    liveItem: (subject: string) =>
      harness()
        .db.selectFrom('reconciliation_items')
        .selectAll()
        .where('subject', '=', subject)
        .where('status', 'in', ['open', 'frozen'])
        .executeTakeFirstOrThrow(),
    op: (key: string) => harness().db.selectFrom('operations').selectAll().where('key', '=', key).executeTakeFirstOrThrow(),
  };
}
