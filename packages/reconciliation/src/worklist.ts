import { randomUUID } from 'node:crypto';
import type { Selectable } from 'kysely';
import {
  actorHash,
  inTransaction,
  operationKeyHash,
  recordAudit,
  type Db,
  type OutboxRow,
  type ReconciliationItemsTable,
  type Trx,
} from '@gatehouse/ledger';
import { ownerOf } from './classes.ts';
import type { Finding } from './classify.ts';
import { reconciledOutput, settleOperation, type Attribution } from './settle.ts';

/** A worklist row as read. */
export type WorklistItem = Selectable<ReconciliationItemsTable>;

/**
 * What a pass did with one finding: `matched` (no difference), `new` (an item was opened, or
 * frozen), `seen` (its live item already existed, or — no item — the in-flight step it would
 * have resumed moved on meanwhile), `explained` (a person resolved this exact
 * difference before, e.g. ratified it), `resumed` (the automatic repair ran; its item is
 * `auto_resolved`).
 */
export type Disposition = 'matched' | 'new' | 'seen' | 'explained' | 'resumed';

/** One finding and what became of it. */
export interface Disposed {
  finding: Finding;
  disposition: Disposition;
  itemId: string | null;
}

/** The pass that writes: its id and who it is attributed to. */
export interface PassWriter extends Attribution {
  runId: string;
}

function audit(trx: Trx, w: PassWriter, f: Finding, type: 'reconciliation.classified' | 'reconciliation.resolved', outcome: string) {
  return recordAudit(trx, {
    type,
    service: 'reconciliation',
    runId: f.workflowId,
    actorHash: actorHash(w.hmacKey, w.actor),
    tool: f.tool,
    operationKeyHash: f.operationKey ? operationKeyHash(f.operationKey) : null,
    outcome,
  });
}

/** The automatic repair: only for `in_flight_ledger_has_it`, never for a frozen operation. */
async function resume(trx: Trx, w: PassWriter, f: Finding): Promise<OutboxRow[] | null> {
  const op = f.operation;
  if (f.class !== 'in_flight_ledger_has_it' || !op || !f.resume || op.frozen) return null;
  return settleOperation(
    trx,
    op,
    {
      status: 'succeeded',
      evidenceRef: f.resume.evidenceRef,
      output: reconciledOutput(op.tool, 'succeeded', f.resume.data),
      note: `system of record has it: ${f.resume.evidenceRef}`,
    },
    w,
  );
}

/**
 * Writes one finding to the worklist in one transaction (nothing is overwritten silently; each
 * new classification and each resolution is an audit event):
 * - a live (`open`|`frozen`) item of the same class and subject is only marked seen — re-running
 *   a pass never duplicates items (unique partial index `reconciliation_items_one_live`);
 * - an item a person resolved for this exact difference explains it (no new item);
 * - `in_flight_ledger_has_it` is repaired at once (operation recorded from the ledger's evidence
 *   under the fencing rules, result returned to the workflow) and recorded `auto_resolved`;
 * - `amount_mismatch` opens a `frozen` item and freezes the operation (`frozen_at`), so nothing
 *   claims, retries or repairs it until a lead's remediation resolves the item;
 * - any other difference opens an `open` item owned per class.
 * Returns the disposition and the outbox rows to publish after commit.
 */
export async function recordFinding(db: Db, w: PassWriter, f: Finding): Promise<{ disposed: Disposed; rows: OutboxRow[] }> {
  if (f.class === 'matched') return { disposed: { finding: f, disposition: 'matched', itemId: null }, rows: [] };
  return inTransaction(db, async (trx) => {
    const live = await trx
      .selectFrom('reconciliation_items')
      .selectAll()
      .where('class', '=', f.class)
      .where('subject', '=', f.subject)
      .where('status', 'in', ['open', 'frozen'])
      .forUpdate()
      .executeTakeFirst();
    if (live) return seenAgain(trx, w, f, live);
    const resolved = await trx
      .selectFrom('reconciliation_items')
      .select('id')
      .where('class', '=', f.class)
      .where('subject', '=', f.subject)
      .where('status', '=', 'resolved')
      .executeTakeFirst();
    if (resolved) return { disposed: { finding: f, disposition: 'explained', itemId: resolved.id }, rows: [] };
    return openItem(trx, w, f);
  });
}

type Recorded = { disposed: Disposed; rows: OutboxRow[] };

/**
 * A finding whose live item (locked by the caller) already names it: an open item is resumed
 * when the ledger has the effect (then `auto_resolved`, audited), else only marked seen by this pass.
 */
async function seenAgain(trx: Trx, w: PassWriter, f: Finding, live: { id: string; status: string }): Promise<Recorded> {
  const rows = live.status === 'open' ? await resume(trx, w, f) : null;
  await trx
    .updateTable('reconciliation_items')
    .set(
      rows
        ? {
            status: 'auto_resolved',
            resolution: `resumed from ${f.resume?.evidenceRef}`,
            resolved_by: 'reconciliation',
            resolved_at: new Date(),
          }
        : { last_seen_run_id: w.runId, last_seen_at: new Date() },
    )
    .where('id', '=', live.id)
    .execute();
  if (rows) await audit(trx, w, f, 'reconciliation.resolved', `${f.class}:resumed`);
  return { disposed: { finding: f, disposition: rows ? 'resumed' : 'seen', itemId: live.id }, rows: rows ?? [] };
}

/**
 * A new difference: repaired at once when the ledger has the effect (`auto_resolved`), else an
 * item opened (`frozen`, with its operation frozen, for `amount_mismatch`), audited
 * `reconciliation.classified`. A concurrent pass that opened it first wins (`seen`).
 */
async function openItem(trx: Trx, w: PassWriter, f: Finding): Promise<Recorded> {
  const rows = await resume(trx, w, f);
  // The repair found the step moved on since the snapshot (another pass or the executor settled
  // or re-claimed it): nothing is left to record; the next pass judges it afresh.
  if (!rows && f.class === 'in_flight_ledger_has_it' && f.operation && !f.operation.frozen)
    return { disposed: { finding: f, disposition: 'seen' as const, itemId: null }, rows: [] };
  const id = randomUUID();
  const frozen = f.class === 'amount_mismatch';
  const inserted = await trx
    .insertInto('reconciliation_items')
    .values({
      id,
      run_id: w.runId,
      class: f.class,
      owner: ownerOf(f.class, f.tool),
      status: rows ? 'auto_resolved' : frozen ? 'frozen' : 'open',
      subject: f.subject,
      operation_key: f.operationKey,
      workflow_id: f.workflowId,
      tenant: f.tenant,
      tool: f.tool,
      order_id: f.orderId,
      amount_cents: f.amountCents,
      ledger_ref: f.ledgerRef,
      detail: JSON.stringify(f.detail),
      last_seen_run_id: w.runId,
      // The pass's clock, as a later sighting's update and closeVanished's cut-off use (not the database's).
      last_seen_at: new Date(),
      ...(rows ? { resolution: `resumed from ${f.resume?.evidenceRef}`, resolved_by: 'reconciliation', resolved_at: new Date() } : {}),
    })
    .onConflict((oc) => oc.columns(['class', 'subject']).where('status', 'in', ['open', 'frozen']).doNothing())
    .returning('id')
    .executeTakeFirst();
  if (!inserted) return { disposed: { finding: f, disposition: 'seen' as const, itemId: null }, rows: rows ?? [] }; // a concurrent pass opened it
  if (frozen && f.operationKey) {
    await trx
      .updateTable('operations')
      .set({ frozen_at: new Date(), updated_at: new Date() })
      .where('key', '=', f.operationKey)
      .where('frozen_at', 'is', null)
      .execute();
  }
  await audit(trx, w, f, 'reconciliation.classified', frozen ? `${f.class}:frozen` : f.class);
  if (rows) await audit(trx, w, f, 'reconciliation.resolved', `${f.class}:resumed`);
  return { disposed: { finding: f, disposition: rows ? 'resumed' : 'new', itemId: id }, rows: rows ?? [] };
}

/**
 * Closes open items whose difference this pass no longer observed (e.g. an effect that landed
 * late and now matches): `auto_resolved` with the run that stopped seeing it, audited. Frozen
 * items and items with a remediation under way are never closed this way, nor is an item last
 * seen at or after `readAt` (when this pass read its picture): a concurrent pass observed it in a
 * newer picture than this one.
 * Returns how many items were closed.
 */
export async function closeVanished(db: Db, w: PassWriter, observed: Set<string>, readAt: Date): Promise<number> {
  const open = await db
    .selectFrom('reconciliation_items')
    .select(['id', 'class', 'subject'])
    .where('status', '=', 'open')
    .where('approval_id', 'is', null)
    .where('last_seen_at', '<', readAt)
    .execute();
  let closed = 0;
  for (const item of open) {
    if (observed.has(`${item.class}|${item.subject}`)) continue;
    const done = await inTransaction(db, async (trx) => {
      const row = await trx
        .updateTable('reconciliation_items')
        .set({
          status: 'auto_resolved',
          resolution: `no longer observed (run ${w.runId})`,
          resolved_by: 'reconciliation',
          resolved_at: new Date(),
        })
        .where('id', '=', item.id)
        .where('status', '=', 'open')
        .where('approval_id', 'is', null)
        .where('last_seen_at', '<', readAt)
        .returning(['workflow_id', 'tool', 'operation_key', 'class'])
        .executeTakeFirst();
      if (!row) return false;
      await recordAudit(trx, {
        type: 'reconciliation.resolved',
        service: 'reconciliation',
        runId: row.workflow_id,
        actorHash: actorHash(w.hmacKey, w.actor),
        tool: row.tool,
        operationKeyHash: row.operation_key ? operationKeyHash(row.operation_key) : null,
        outcome: `${row.class}:no_longer_observed`,
      });
      return true;
    });
    if (done) closed++;
  }
  return closed;
}
