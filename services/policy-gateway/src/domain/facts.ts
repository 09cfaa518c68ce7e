import { sql } from 'kysely';
import type { Trx, Db } from '@gatehouse/ledger';
import { loadWorld } from '@gatehouse/contracts';
import type { SupportFacts } from '@gatehouse/policy';

/** Operation states whose refunds count toward the cumulative basis: done, started or unknown. */
export const COUNTED_REFUND_STATES = ['running', 'succeeded', 'failed_unknown'] as const;

/** The user as the identity directory (world.json) knows them, or null (SPEC §3 R0). */
export function lookupUser(userId: string, tenant: string): SupportFacts['user'] {
  const u = loadWorld().users.find((x) => x.id === userId && x.tenant === tenant);
  return u ? { id: u.id, tenant: u.tenant, region: u.region ?? null, scopes: u.scopes ?? [] } : null;
}

/**
 * Reads an order from the order system (`GET /orders/:id` of the staging systems). This is the
 * gateway's authoritative read for policy, not a tool effect: no delegated credential is minted
 * and the caller checks tenant and region (R2) before anything else sees the order.
 * @throws Error when the order system does not answer (the job is retried).
 */
export async function fetchOrder(stagingUrl: string, orderId: string): Promise<SupportFacts['order']> {
  const res = await fetch(`${stagingUrl}/orders/${encodeURIComponent(orderId)}`, { signal: AbortSignal.timeout(5000) });
  if (res.status === 404) return null;
  if (!res.ok) throw new Error(`order system answered ${res.status}`);
  const o = (await res.json()) as { id: string; tenant: string; region: string; paid: number; status: string };
  return { id: o.id, tenant: o.tenant, region: o.region, paid: o.paid, status: o.status };
}

/**
 * Sum of refunds recorded in the operation ledger (succeeded, running or failed_unknown),
 * integer cents, optionally restricted to an order, a user and a time window (ms).
 * Tenant-scoped through the workflows they belong to.
 */
export async function recordedRefundsCents(
  db: Db | Trx,
  opts: { tenant?: string; orderId?: string; userId?: string; sinceMs?: number },
): Promise<number> {
  let q = db
    .selectFrom('operations as o')
    .innerJoin('actions as a', 'a.id', 'o.action_id')
    .innerJoin('workflows as w', 'w.id', 'a.workflow_id')
    .select(sql<string>`coalesce(sum((a.arguments->>'amountCents')::bigint), 0)`.as('total'))
    .where('a.tool', '=', 'issue_refund')
    .where('o.status', 'in', [...COUNTED_REFUND_STATES]);
  if (opts.tenant) q = q.where('w.tenant', '=', opts.tenant);
  if (opts.orderId) q = q.where('a.target', '=', opts.orderId);
  if (opts.userId) q = q.where('w.user_id', '=', opts.userId);
  if (opts.sinceMs !== undefined) q = q.where('o.created_at', '>=', new Date(Date.now() - opts.sinceMs));
  const row = await q.executeTakeFirstOrThrow();
  return Number(row.total);
}
