import { randomUUID } from 'node:crypto';
import type { Db, OutboxRow, ReconciliationClass } from '@gatehouse/ledger';
import { referenceSupportBundle } from './bundles.ts';
import { RECONCILIATION_CLASSES } from './classes.ts';
import { classify } from './classify.ts';
import { readSnapshot } from './snapshot.ts';
import { closeVanished, recordFinding, type Disposed, type WorklistItem } from './worklist.ts';

/** Inputs of one reconciliation pass. */
export interface PassDeps {
  db: Db;
  /** Base URL of the systems of record (staging, docs/product/public-contract.md#staging-read-back). */
  stagingUrl: string;
  /** Key of the HMAC that hashes actor ids in audit events. */
  hmacKey: string;
  /** Who runs the pass: the operator's id, or `reconciliation-job`. */
  actor: string;
  /**
   * The reference support bundle, whose `limits.autoApproveLimitCents` decides
   * `refund_over_limit_without_approval` (default `support-p1`: 5000 cents). It must pass its
   * boundary-case gate: a bundle with a units mistake is never the reference.
   */
  supportRevision?: string;
  /** Folder of policy bundles (default the repository's `policy/`). */
  policyDir?: string;
  /** Read-back timeout per request, ms (default 5000). */
  timeoutMs?: number;
  /**
   * How far back shipments and messages of any order are read, ms (default
   * `READ_BACK_WINDOW_MS`, 24 h; ADR 0791).
   */
  windowMs?: number;
}

/** What one pass found and did. */
export interface ReconciliationReport {
  runId: string;
  /** Every comparison with its disposition, `matched` ones included. */
  findings: Disposed[];
  /** Findings per class (all eight classes present, zero when empty). */
  counts: Record<ReconciliationClass, number>;
  /** In-flight operations the pass repaired automatically (their items are `auto_resolved`). */
  resumed: number;
  /** Differences a person resolved before (e.g. ratified): explained, not open. */
  explained: number;
  /** Open items whose difference was no longer observed, closed as `auto_resolved`. */
  vanished: number;
  /** The live worklist after the pass (`open` and `frozen` items), oldest first. */
  worklist: WorklistItem[];
  /** Differences neither repaired nor explained: the live worklist's size. Zero means agreement (docs/product/invariants.md#agreement). */
  unexplained: number;
  /** Outbox rows (results of resumed calls) the caller publishes after the pass. */
  rows: OutboxRow[];
}

/**
 * One reconciliation pass (docs/product/invariants.md#agreement, docs/product/reconciliation.md): reads the agent's operations and
 * the systems of record's read-backs, classifies every comparison into the eight classes (never
 * trusting the agent's own status), writes the worklist with an owner per class, repairs only
 * `in_flight_ledger_has_it` automatically, freezes amount mismatches, and closes open items whose
 * difference vanished. Safe to run concurrently with another pass, the executor and the CLI
 * (unique live items, conditional fenced updates).
 * @throws ReadBackUnavailable when a system of record cannot be read (nothing is written).
 * @throws Error when the reference bundle cannot be loaded or fails its boundary-case gate.
 */
export async function runReconciliation(deps: PassDeps): Promise<ReconciliationReport> {
  const bundle = referenceSupportBundle(deps.supportRevision, deps.policyDir);
  const autoApproveLimitCents = bundle.limits.autoApproveLimitCents;
  const snapshot = await readSnapshot(deps.db, deps.stagingUrl, {
    autoApproveLimitCents,
    timeoutMs: deps.timeoutMs,
    windowMs: deps.windowMs,
  });
  const findings = classify(snapshot);
  const writer = { runId: randomUUID(), actor: deps.actor, hmacKey: deps.hmacKey };
  const disposed: Disposed[] = [];
  const rows: OutboxRow[] = [];
  for (const f of findings) {
    const r = await recordFinding(deps.db, writer, f);
    disposed.push(r.disposed);
    rows.push(...r.rows);
  }
  const observed = new Set(findings.filter((f) => f.class !== 'matched').map((f) => `${f.class}|${f.subject}`));
  const vanished = await closeVanished(deps.db, writer, observed, new Date(snapshot.nowMs));
  const worklist = await deps.db
    .selectFrom('reconciliation_items')
    .selectAll()
    .where('status', 'in', ['open', 'frozen'])
    .orderBy('created_at')
    .orderBy('id')
    .execute();
  const counts = Object.fromEntries(RECONCILIATION_CLASSES.map((c) => [c, 0])) as Record<ReconciliationClass, number>;
  for (const f of findings) counts[f.class]++;
  return {
    runId: writer.runId,
    findings: disposed,
    counts,
    resumed: disposed.filter((d) => d.disposition === 'resumed').length,
    explained: disposed.filter((d) => d.disposition === 'explained').length,
    vanished,
    worklist,
    unexplained: worklist.length,
    rows,
  };
}
