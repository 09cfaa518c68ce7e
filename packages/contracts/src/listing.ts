/**
 * A system of record's listing, read whole or not at all: the entries of `body[key]`, each read
 * by `entry`, or null when `body` has no `key` array or one of its entries is not an object that
 * `entry` can read (it returns null). What a system of record sends is untrusted (ADR 0640): a
 * missing or partly unreadable list says nothing about what it lists, so it is never read as a
 * shorter or an empty one (ADR 0771, 0773). The executor's reads and reconciliation's read-back
 * both read listings through it; each decides what an unreadable one means for it (a failed read,
 * an unknown outcome, `ReadBackUnavailable`).
 */
export function wholeList<T>(body: unknown, key: string, entry: (row: Record<string, unknown>) => T | null): T[] | null {
  const list = typeof body === 'object' && body !== null ? (body as Record<string, unknown>)[key] : undefined;
  if (!Array.isArray(list)) return null;
  const out: T[] = [];
  for (const row of list as unknown[]) {
    const read = typeof row === 'object' && row !== null ? entry(row as Record<string, unknown>) : null;
    if (read === null) return null;
    out.push(read);
  }
  return out;
}

/**
 * A shipment of the order system's listing (`GET /orders/{id}/shipments` → `{shipments: [...]}`):
 * its id, when the order system created it (ms since the epoch; NaN when the time cannot be read,
 * which the readers judge as such, ADR 0665, 0678) and whether it was cancelled.
 */
export interface ListedShipment {
  shipmentId: string;
  createdAtMs: number;
  cancelled: boolean;
}

/** A listing entry as a {@link ListedShipment}, or null without a non-empty `shipmentId` (for {@link wholeList}). */
export function listedShipment(row: Record<string, unknown>): ListedShipment | null {
  if (typeof row.shipmentId !== 'string' || row.shipmentId === '') return null;
  const createdAtMs = typeof row.createdAt === 'string' ? Date.parse(row.createdAt) : NaN;
  return { shipmentId: row.shipmentId, createdAtMs, cancelled: Boolean(row.cancelledAt) };
}
