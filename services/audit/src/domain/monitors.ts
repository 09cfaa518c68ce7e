import { sql } from 'kysely';
import type { KeyObject } from 'node:crypto';
import { loadWorld, OWN_CREDENTIAL_REFUSED, testFaults, type World } from '@gatehouse/contracts';
import { existsSync } from 'node:fs';
import {
  effectsAfterSwitchOff,
  effectsWithRevokedEpoch,
  raiseAuditLossHold,
  readWitness,
  verifyAuditChain,
  type Db,
  type WitnessedAnchor,
} from '@gatehouse/ledger';
import type { Logger } from '@gatehouse/platform';
import { recordAlert } from '@gatehouse/telemetry';
import { effectsBeyondDelegation, recentAuditEvents, refundsAtLimitWhileApprovalsStopped } from './invariant-monitors.ts';

/** One invariant violation found by a standing query over the records. */
export interface Alert {
  /** Monitor id, stable (a metric label). */
  monitor: string;
  /** How many records violate it now. */
  count: number;
  /** Up to 10 example record ids (operation keys, action ids) for on-call. */
  examples: string[];
}

/** Thresholds of the monitors. Money in integer cents. */
export interface MonitorConfig {
  /** The auto-approve limit of the policy revision in force (support-p1: 5000). */
  autoApproveLimitCents: number;
  /** failed_unknown operations in the last hour above which an alert fires. */
  maxFailedUnknownPerHour: number;
  /** The audit service's public key: anchors are checked against it (none: the stored keys). */
  trustedPublicKey?: KeyObject;
  /** The directory users' delegations are judged by (default: {@link loadWorld}). */
  directory?: World;
  /** Refunds at the auto limit in an hour without approvals before the process-shape monitor fires (default 3). */
  minRefundsAtLimit?: number;
  /** Share of the auto limit from which a refund counts as "at the limit" (default 0.8). */
  nearLimitShare?: number;
  /** Refused approval decisions with a digest mismatch in an hour before an alert (default 3). */
  maxDigestMismatchesPerHour?: number;
  /** This replica's anchor witness, checked with the chain when it exists (docs/decisions/0570-audit-anchors-witnessed-outside-the-ledger.md). */
  witnessPath?: string;
  /** Longest an event may wait for an anchor, ms (anchoring interval plus slack); none: not checked. */
  maxUnanchoredAgeMs?: number;
  /**
   * Why this replica's key may not anchor (the refusal message of `anchorKeyRefusal`, ADR 0717),
   * when it may not. Its key is then not the one to pin: `audit_gap` verifies without a pin (the
   * first anchor's key stands in) and the refusal is its own alert, `audit_anchor_key`, rather
   * than every other key's anchors read as a broken chain.
   */
  anchorKeyRefused?: string;
}

type Row = { id: string };

/**
 * Monitors removed by the test-only switch `GATEHOUSE_TEST_DISABLE_MONITORS` (comma-separated
 * monitor ids), for the tests that show a monitor is load-bearing (the incident drill without
 * `refund_over_auto_limit_without_approval` never alerts, so nothing contains the damage).
 * Read per pass.
 * @throws Error when set outside `GATEHOUSE_ENV=test`.
 */
export function disabledMonitors(env: Record<string, string | undefined> = process.env): Set<string> {
  const list = testFaults(env).disableMonitors;
  return new Set(list ? list.split(',').map((m) => m.trim()) : []);
}
const ids = (rows: Row[]) => rows.slice(0, 10).map((r) => r.id);

/**
 * Evaluates the invariant monitors (docs/product/invariants.md) — written on outcomes, not on code paths,
 * so a bad release that every unit test passed still trips them:
 * - `effect_without_required_approval`: an action whose policy required approval has an effect
 *   (operation succeeded or running) without a `used` approval;
 * - `refund_over_auto_limit_without_approval`: a refund whose order's cumulative executed refunds
 *   exceed the auto limit ran without a `used` approval (a refund a lead reversed counts until its
 *   reversal, and is not named itself);
 * - `approvals_stopped_while_refunds_continue`: refunds above the auto limit executed in the last
 *   hour while no approval was requested in that hour;
 * - `refunds_at_limit_while_approvals_stopped`: the same shape before damage — refunds arriving
 *   just under the auto limit while approvals fell to zero;
 * - `effect_beyond_delegation` (Authority): an effect outside its user's scopes, tenant or
 *   refund ceiling, judged from the directory;
 * - `effect_after_switch_off` (Containment): an effect dispatched after its tool was switched off;
 * - `effect_after_epoch_bump` (Containment): an effect whose token carried an epoch below the one
 *   in force when it was dispatched;
 * - `approval_digest_mismatches`: repeated approval decisions refused for a digest mismatch
 *   (a client or person approving something other than what is shown);
 * - `release_digest_mismatch`: a service refused to boot because the code's tool catalog,
 *   prompt or audit schema differs from its release manifest;
 * - `failed_unknown_rising`: more unknown outcomes in the last hour than configured;
 * - `idempotency_conflict`: any key reused with another digest (audited by the executor);
 * - `delegation_rejected`: in the last hour, a system of record refused our own delegated
 *   credential (`OWN_CREDENTIAL_REFUSED`: a key it does not trust, another audience or scope) —
 *   a broken deployment for on-call, never a business denial;
 * - `audit_gap`: the chain no longer verifies (an edited, deleted or reordered event; with the
 *   witness, a rewritten or cut chain or deleted anchors; past the freshness limit, stale anchors);
 *   a cut chain (a witnessed anchor beyond the head) also raises the audit-loss hold, which holds
 *   consequential steps until an operator acknowledges the loss (ADR 0795);
 * - `audit_anchor_key`: the replica running the pass may not anchor with its key (a replica
 *   started with a key of its own; `cfg.anchorKeyRefused` says which and how to fix it).
 * Returns the alerts that fire (empty when all hold).
 */
export async function evaluateMonitors(db: Db, cfg: MonitorConfig): Promise<Alert[]> {
  const alerts: Alert[] = [];
  const removed = disabledMonitors();
  const fire = (monitor: string, rows: Row[]) => {
    if (rows.length && !removed.has(monitor)) alerts.push({ monitor, count: rows.length, examples: ids(rows) });
  };
  // A lead's reconciliation remediation (ratified or reversed, docs/product/reconciliation.md#remediations) explains the violation; it stays in the records.
  const noUsedApproval = sql<boolean>`not exists (select 1 from approvals p where p.action_id = a.id and p.status = 'used')
    and not exists (select 1 from reconciliation_items r where r.operation_key = o.key
      and r.class = 'refund_over_limit_without_approval' and r.status = 'resolved')`;

  fire(
    'effect_without_required_approval',
    (
      await sql<Row>`select o.key as id from operations o join actions a on a.id = o.action_id
        where a.decision = 'REQUIRE_APPROVAL' and o.status in ('succeeded', 'running', 'failed_unknown') and ${noUsedApproval}`.execute(db)
    ).rows,
  );
  fire(
    'refund_over_auto_limit_without_approval',
    // One pass with a running sum per order (the window's default frame counts ties, as `<=` did),
    // not a correlated sum per operation: linear in the ledger, not quadratic. A refund a lead
    // reversed (action `compensated`, its last transition) adds its amount when it ran and takes
    // it away when it was reversed, as R4/R7's basis and reconciliation count it; it is no longer
    // an effect itself, so it is never named (ADR 0666).
    (
      await sql<Row>`select c.key as id from (
          select e.key, e.named, sum(e.cents) over (partition by e.target order by e.at) as cumulative
          from (
            select o.key, a.target, o.created_at as at, (a.arguments->>'amountCents')::bigint as cents, a.status <> 'compensated' as named
              from operations o join actions a on a.id = o.action_id
             where a.tool = 'issue_refund' and o.status in ('succeeded', 'running', 'failed_unknown')
            union all
            select o.key, a.target, a.updated_at, -(a.arguments->>'amountCents')::bigint, false
              from operations o join actions a on a.id = o.action_id
             where a.tool = 'issue_refund' and o.status in ('succeeded', 'running', 'failed_unknown') and a.status = 'compensated'
          ) e
        ) c join operations o on o.key = c.key join actions a on a.id = o.action_id
        where c.named and c.cumulative > ${cfg.autoApproveLimitCents} and ${noUsedApproval}`.execute(db)
    ).rows,
  );
  const recent = sql`o.created_at > now() - interval '1 hour'`;
  const bigRefunds = (
    await sql<Row>`select o.key as id from operations o join actions a on a.id = o.action_id
      where a.tool = 'issue_refund' and o.status = 'succeeded' and ${recent} and (a.arguments->>'amountCents')::bigint > ${cfg.autoApproveLimitCents}`.execute(
      db,
    )
  ).rows;
  const requested = await sql<{ n: string }>`select count(*) as n from approvals where created_at > now() - interval '1 hour'`.execute(db);
  if (bigRefunds.length && Number(requested.rows[0]?.n ?? 0) === 0) fire('approvals_stopped_while_refunds_continue', bigRefunds);
  const unknown = (await sql<Row>`select o.key as id from operations o where o.status = 'failed_unknown' and ${recent}`.execute(db)).rows;
  if (unknown.length > cfg.maxFailedUnknownPerHour) fire('failed_unknown_rising', unknown);
  fire(
    'idempotency_conflict',
    (
      await sql<Row>`select event->>'operationKeyHash' as id from audit_log where event->>'outcome' = 'idempotency_conflict'
        union all select event->>'operationKeyHash' from audit_outbox where event->>'outcome' = 'idempotency_conflict'`.execute(db)
    ).rows,
  );
  fire(
    'delegation_rejected',
    (
      await sql<Row>`select o.key as id from operations o
        where o.status = 'failed' and o.error ~ ${OWN_CREDENTIAL_REFUSED} and o.updated_at > now() - interval '1 hour'`.execute(db)
    ).rows,
  );
  await evaluateShapeAndAuthority(db, cfg, fire);
  const gap = await auditGap(db, cfg);
  if (gap) alerts.push({ monitor: 'audit_gap', count: 1, examples: [gap] });
  if (cfg.anchorKeyRefused) alerts.push({ monitor: 'audit_anchor_key', count: 1, examples: [cfg.anchorKeyRefused] });
  return alerts;
}

/**
 * Why the chain does not verify (`seq N: reason`), or null: against the pinned key (none while
 * this replica's key is refused), this
 * replica's anchor witness when it exists (an unreadable one is itself the gap: `witness: …`)
 * and the freshness limit when set. A truncation against the witness raises the audit-loss hold
 * (`raiseAuditLossHold`, ADR 0795).
 */
async function auditGap(db: Db, cfg: MonitorConfig): Promise<string | null> {
  let witness: WitnessedAnchor[] | undefined;
  try {
    if (cfg.witnessPath && existsSync(cfg.witnessPath)) witness = readWitness(cfg.witnessPath);
  } catch (err) {
    return `witness: ${(err as Error).message}`;
  }
  const chain = await verifyAuditChain(db, {
    ...(cfg.trustedPublicKey && !cfg.anchorKeyRefused ? { trustedPublicKey: cfg.trustedPublicKey } : {}),
    ...(witness ? { witness } : {}),
    ...(cfg.maxUnanchoredAgeMs !== undefined ? { maxUnanchoredAgeMs: cfg.maxUnanchoredAgeMs } : {}),
  });
  if (witness) await raiseAuditLossHold(db, chain);
  return chain.intact ? null : `seq ${chain.firstBadSeq}: ${chain.reason}`;
}

/** The monitors of Authority, Containment, the process shape and tampering attempts (see {@link evaluateMonitors}). */
async function evaluateShapeAndAuthority(db: Db, cfg: MonitorConfig, fire: (monitor: string, rows: Row[]) => void): Promise<void> {
  fire(
    'refunds_at_limit_while_approvals_stopped',
    await refundsAtLimitWhileApprovalsStopped(db, {
      autoApproveLimitCents: cfg.autoApproveLimitCents,
      nearShare: cfg.nearLimitShare ?? 0.8,
      minRefunds: cfg.minRefundsAtLimit ?? 3,
    }),
  );
  fire('effect_beyond_delegation', await effectsBeyondDelegation(db, cfg.directory ?? loadWorld()));
  fire('effect_after_switch_off', await effectsAfterSwitchOff(db));
  fire('effect_after_epoch_bump', await effectsWithRevokedEpoch(db));
  const mismatches = await recentAuditEvents(db, 'approval.refused', 'digest_mismatch');
  if (mismatches.length >= (cfg.maxDigestMismatchesPerHour ?? 3)) fire('approval_digest_mismatches', mismatches);
  fire('release_digest_mismatch', await recentAuditEvents(db, 'service.boot_refused', null));
}

/**
 * Raises alerts: one structured error log line per alert (`alert: <monitor>`), one increment of
 * `gatehouse.monitor.alerts{monitor}` per alert, and a POST of
 * all of them to `webhookUrl` when configured (errors logged, never thrown).
 */
export async function raiseAlerts(alerts: Alert[], log: Logger, webhookUrl?: string): Promise<void> {
  for (const a of alerts) {
    log.error({ alert: a.monitor, count: a.count, examples: a.examples }, `invariant monitor fired: ${a.monitor}`);
    recordAlert(a.monitor);
  }
  if (!alerts.length || !webhookUrl) return;
  try {
    await fetch(webhookUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ alerts }),
      signal: AbortSignal.timeout(5000),
    });
  } catch (err) {
    log.warn({ err: (err as Error).message }, 'alert webhook failed');
  }
}
