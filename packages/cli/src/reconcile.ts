import { actorHash, inTransaction, operationKeyHash, recordAudit, type Db } from '@gatehouse/ledger';

/** What reconciliation decided for one `failed_unknown` operation. */
export interface Reconciled {
  key: string;
  tool: string;
  outcome: 'succeeded' | 'failed' | 'unresolved';
  evidence: string;
}

async function readJson(url: string): Promise<Record<string, unknown> | null> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(5000) });
    return res.ok ? ((await res.json()) as Record<string, unknown>) : null;
  } catch {
    return null;
  }
}

/**
 * Decides one unknown outcome from the system of record, never from the agent's own status:
 * refunds by idempotency key in the payments ledger; shipments by count against the baseline
 * committed before dispatch. Mail has no key and stays unresolved for a person.
 */
async function decide(
  stagingUrl: string,
  op: { key: string; tool: string; baseline: unknown; orderId: string },
): Promise<Omit<Reconciled, 'key' | 'tool'>> {
  const order = encodeURIComponent(op.orderId);
  if (op.tool === 'issue_refund') {
    const body = await readJson(`${stagingUrl}/ledger/refunds?orderId=${order}`);
    if (!body) return { outcome: 'unresolved', evidence: 'payments ledger unavailable' };
    const hit = (body.refunds as Array<{ idempotencyKey: string; refundId: string }>).find((r) => r.idempotencyKey === op.key);
    return hit ? { outcome: 'succeeded', evidence: `refund ${hit.refundId}` } : { outcome: 'failed', evidence: 'no refund with this key' };
  }
  if (op.tool === 'reship_order') {
    const body = await readJson(`${stagingUrl}/orders/${order}/shipments`);
    const baseline = Number((op.baseline as { shipments?: number } | null)?.shipments ?? NaN);
    if (!body || !Number.isFinite(baseline)) return { outcome: 'unresolved', evidence: 'no read-back or no baseline' };
    const now = (body.shipments as unknown[]).length;
    if (now === baseline + 1) return { outcome: 'succeeded', evidence: `shipments ${baseline}→${now}` };
    if (now === baseline) return { outcome: 'failed', evidence: `shipments unchanged at ${now}` };
    return { outcome: 'unresolved', evidence: `shipments ${baseline}→${now}: more than one change` };
  }
  return { outcome: 'unresolved', evidence: 'no read-back key for this tool; a person must check' };
}

/**
 * `gatehouse reconcile` (minimal, by operation key): resolves every `failed_unknown` operation
 * against the staging systems' read-back, records the outcome with an audit event, and closes a
 * `needs_reconciliation` workflow once none of its operations is unknown.
 */
export async function reconcileUnknown(db: Db, stagingUrl: string, operator: string, hmacKey: string): Promise<Reconciled[]> {
  const ops = await db
    .selectFrom('operations as o')
    .innerJoin('actions as a', 'a.id', 'o.action_id')
    .select(['o.key', 'o.tool', 'o.baseline', 'o.workflow_id', 'a.id as action_id', 'a.target', 'a.release_id'])
    .where('o.status', '=', 'failed_unknown')
    .execute();
  const out: Reconciled[] = [];
  for (const op of ops) {
    const d = await decide(stagingUrl, { key: op.key, tool: op.tool, baseline: op.baseline, orderId: op.target });
    out.push({ key: op.key, tool: op.tool, ...d });
    if (d.outcome === 'unresolved') continue;
    const outcome = d.outcome;
    await inTransaction(db, async (trx) => {
      await trx.selectFrom('actions').select('id').where('id', '=', op.action_id).forUpdate().execute(); // lock order: actions → operations
      const upd = await trx
        .updateTable('operations')
        .set({ status: outcome, evidence_ref: d.evidence, updated_at: new Date() })
        .where('key', '=', op.key)
        .where('status', '=', 'failed_unknown')
        .returning('key')
        .executeTakeFirst();
      if (!upd) return;
      await trx.updateTable('actions').set({ status: outcome, updated_at: new Date() }).where('id', '=', op.action_id).execute();
      await recordAudit(trx, {
        type: 'operation.reconciled',
        service: 'cli',
        runId: op.workflow_id,
        actorHash: actorHash(hmacKey, operator),
        tool: op.tool,
        operationKeyHash: operationKeyHash(op.key),
        outcome: d.outcome,
        revisions: { release: op.release_id },
      });
      const left = await trx
        .selectFrom('operations')
        .select('key')
        .where('workflow_id', '=', op.workflow_id)
        .where('status', '=', 'failed_unknown')
        .execute();
      if (!left.length) {
        await trx
          .updateTable('workflows')
          .set({ state: 'completed', next_step: `Reconciled by on-call: ${op.tool} ${d.outcome} (${d.evidence}).`, updated_at: new Date() })
          .where('id', '=', op.workflow_id)
          .where('state', '=', 'needs_reconciliation')
          .execute();
      }
    });
  }
  return out;
}
