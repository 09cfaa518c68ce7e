import type { Db, Trx } from '../db.ts';

/** What {@link overlappingDispatches} looks for. */
export interface OverlapQuery {
  /** The tool whose effects cannot be told apart by a count (today `reship_order`). */
  tool: string;
  /** The action's target (`actions.target`: the order id of a reship). */
  target: string;
  /** The caller's own operation key, left out. */
  exceptKey: string;
  /** When the caller's baseline was read: an effect that may have landed at or after it counts. */
  since: Date;
}

/**
 * Other operations of the same tool on the same target whose effect may have landed in the
 * downstream since `since` (docs/decisions/0560-read-back-with-a-rival.md): their write-ahead mark
 * is set (the request may have been sent) and they are still `running` or `failed_unknown` (the
 * request may still land), or their outcome was written at or after `since`. A read-back that
 * counts effects cannot tell such an operation's effect from the caller's. Returns their keys
 * (empty: the count is the caller's alone). One indexed read on `actions (tool, target)`.
 */
export async function overlappingDispatches(db: Db | Trx, q: OverlapQuery): Promise<string[]> {
  const rows = await db
    .selectFrom('operations as o')
    .innerJoin('actions as a', 'a.id', 'o.action_id')
    .select('o.key')
    .where('a.tool', '=', q.tool)
    .where('a.target', '=', q.target)
    .where('o.key', '<>', q.exceptKey)
    .where('o.dispatched_at', 'is not', null)
    .where((eb) => eb.or([eb('o.status', 'in', ['running', 'failed_unknown']), eb('o.updated_at', '>=', q.since)]))
    .orderBy('o.key')
    .execute();
  return rows.map((r) => r.key);
}

/** The read time a baseline carries (`readAt`, ISO 8601), or null for a baseline stored before it did. */
export function baselineReadAt(baseline: Record<string, unknown> | null | undefined): Date | null {
  const at = typeof baseline?.readAt === 'string' ? new Date(baseline.readAt) : null;
  return at && Number.isFinite(at.getTime()) ? at : null;
}
