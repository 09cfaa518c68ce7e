import { requestRemediation, runReconciliation, type RemediationTicket } from '@gatehouse/reconciliation';
import type { Remediation } from '@gatehouse/ledger';
import { TEST_REDIS_URL } from '@gatehouse/test-harness';
import { runGatehouse, type GatehouseRun } from '../../apps/cli/test/support/gatehouse-process.ts';
import { AUDIT_HMAC_KEY, type Harness } from '../executor/support/harness.ts';

/**
 * What the reconciliation tests over the executor harness (`harness()`, read at each call: the
 * tests start it in `beforeAll`) call: a pass as `ops-gus`, the
 * remediation settings (release `rel-1`, the harness's signing key; the audit gate's heartbeat age
 * `maxHeartbeatAgeMs`, default an hour), the live (`open` or `frozen`) item of a subject, an
 * operation by key, and a remediation requested by ops-gus and approved by lead-eli.
 */
export function reconOps(harness: () => Harness, maxHeartbeatAgeMs = 3_600_000) {
  const remediation = () => ({
    db: harness().db,
    stagingUrl: harness().stagingUrl,
    hmacKey: AUDIT_HMAC_KEY,
    release: 'rel-1',
    signingKey: harness().delegationKeys.signing,
    auditGate: { maxHeartbeatAgeMs, maxBacklogAgeMs: 3_600_000 },
  });
  return {
    pass: () => runReconciliation({ db: harness().db, stagingUrl: harness().stagingUrl, hmacKey: AUDIT_HMAC_KEY, actor: 'ops-gus' }),
    remediation,
    liveItem: (subject: string) =>
      harness()
        .db.selectFrom('reconciliation_items')
        .selectAll()
        .where('subject', '=', subject)
        .where('status', 'in', ['open', 'frozen'])
        .executeTakeFirstOrThrow(),
    op: (key: string) => harness().db.selectFrom('operations').selectAll().where('key', '=', key).executeTakeFirstOrThrow(),
    /** Requests `kind` on item `itemId` as ops-gus and lets lead-eli approve it (what the approval API writes for a `RECON` approval). */
    approvedRemediation: async (
      itemId: string,
      kind: Remediation,
      outcomes?: Record<string, string | null>,
    ): Promise<RemediationTicket> => {
      const t = await requestRemediation(remediation(), { itemId, remediation: kind, operator: 'ops-gus', outcomes });
      const db = harness().db;
      await db
        .updateTable('approvals')
        .set({ status: 'approved', approver: 'lead-eli', decided_at: new Date() })
        .where('id', '=', t.approvalId)
        .execute();
      await db.updateTable('actions').set({ status: 'approved' }).where('operation_key', '=', t.operationKey).execute();
      return t;
    },
  };
}

/**
 * The real `gatehouse` CLI process over the executor harness's ledger, queues and staging, as the
 * operator whose token `session()` holds (read at each call: the tests set it in `beforeAll`),
 * with the state folder `session().stateDir`. No audit service runs beside the harness: it wrote a
 * heartbeat at start, so the audit gate is made an hour wide. `env` overrides any variable (the
 * signing key's path, STAGING_URL); each run may take `timeoutMs`.
 */
export function harnessCli(harness: () => Harness, session: () => { stateDir: string; token?: string }, timeoutMs = 90_000) {
  return (args: string[], env: Record<string, string> = {}): Promise<GatehouseRun> =>
    runGatehouse(
      args,
      {
        DATABASE_URL: harness().tdb.url,
        REDIS_URL: TEST_REDIS_URL,
        QUEUE_PREFIX: harness().prefix,
        STAGING_URL: harness().stagingUrl,
        GATEHOUSE_STATE_DIR: session().stateDir,
        GATEHOUSE_TOKEN: session().token ?? '',
        GATEHOUSE_AUDIT_HMAC_KEY: AUDIT_HMAC_KEY,
        GATEHOUSE_DELEGATION_SIGNING_KEY_PATH: harness().delegationKeyPath,
        AUDIT_HEALTH_MAX_HEARTBEAT_AGE_MS: '3600000',
        AUDIT_HEALTH_MAX_BACKLOG_AGE_MS: '3600000',
        LOG_LEVEL: 'warn',
        ...env,
      },
      timeoutMs,
    );
}
