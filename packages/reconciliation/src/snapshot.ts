import { sql } from 'kysely';
import { listedShipment, loadWorld, fetchCapped, SystemError, wholeList, type ListedShipment } from '@gatehouse/contracts';
import type { Db, OperationStatus } from '@gatehouse/ledger';
import { RECONCILED_TOOLS } from './classes.ts';

/** One agent operation with what reconciliation needs of its action, workflow and approval. */
export interface AgentOperation {
  key: string;
  tool: string;
  status: OperationStatus;
  workflowId: string;
  tenant: string;
  actionId: string;
  actionStatus: string;
  callId: string;
  /** Order id (refund, reship, mail) or plan id (schedule_change). */
  target: string;
  args: Record<string, unknown>;
  /** The fencing token read (bigint as text): an automatic repair is conditional on it. */
  fencingToken: string;
  /** Epoch ms; null when no lease was ever granted. */
  leaseExpiresAtMs: number | null;
  /** Shipment count committed before dispatch (reship only). */
  baselineShipments: number | null;
  /** Epoch ms of the write-ahead mark (`dispatched_at`, written before the request is sent); null when never dispatched. */
  dispatchedAtMs: number | null;
  /** The system of record's id of the effect the operation recorded (a reship's shipment id), or null. */
  evidenceRef: string | null;
  frozen: boolean;
  /** Epoch ms when the operation was reserved (its claim). */
  createdAtMs: number;
  /** Whether a `used` approval of its action exists (docs/product/invariants.md#approval), or of a lead-approved replay of it. */
  usedApproval: boolean;
}

/** A refund in the payments ledger (read-back). Amount in integer cents; time epoch ms. */
export interface LedgerRefund {
  refundId: string;
  orderId: string;
  amountCents: number;
  idempotencyKey: string;
  createdAtMs: number;
}

/** A reversal (compensation) of a whole refund. */
export interface LedgerReversal {
  reversalId: string;
  refundId: string;
  idempotencyKey: string;
  createdAtMs: number;
}

/** A scheduled change operation (the change service, keyed by operation key). */
export interface LedgerChangeOperation {
  operationKey: string;
  changeId: string;
  tenant: string;
  planId: string;
  window: string;
  status: string;
}

/** A mail message (no dedupe, no key); `createdAtMs` epoch ms, NaN when its time cannot be read. */
export interface LedgerMessage {
  messageId: string;
  template: string;
  createdAtMs: number;
}

/**
 * How far back a pass reads the order system's shipments and the mail service's messages of any
 * order (`GET /shipments?since=`, `GET /mail/messages?since=`), ms: 24 hours. An order found there
 * that no step, world order or live item names has its whole listing read and judged (ADR 0791).
 */
export const READ_BACK_WINDOW_MS = 24 * 3_600_000;

/** Everything one pass compares, read once; classification is a pure function of it. */
export interface Snapshot {
  operations: AgentOperation[];
  refunds: LedgerRefund[];
  reversals: LedgerReversal[];
  /** Shipments per order id (the order system has no idempotency keys: read-back matches by count and time). */
  shipments: Map<string, ListedShipment[]>;
  /**
   * Messages per order id: orders with a mail operation in flight, with a message in the read-back
   * window that no step names as its effect, or with a live mail item (ADR 0791).
   */
  messages: Map<string, LedgerMessage[]>;
  /** Tenant of each order as the time-windowed listings gave it (orders world.json may not know). */
  recordTenants: Map<string, string>;
  changeOperations: LedgerChangeOperation[];
  /** Tenant and region of every known order (the order system's records). */
  orders: Map<string, { tenant: string; region: string; paidCents: number }>;
  /** The auto-approve limit of the support bundle in force, cents (support-p1: 5000). */
  autoApproveLimitCents: number;
  /** When the snapshot was taken, epoch ms (lease expiry is judged against it). */
  nowMs: number;
}

/** A system of record could not be read: the pass stops rather than classify half the picture. */
export class ReadBackUnavailable extends SystemError {
  constructor(message: string) {
    super('read_back_unavailable', message);
  }
}

async function readJson<T>(url: string, timeoutMs: number): Promise<T> {
  let res: Response;
  try {
    res = await fetchCapped(url, { signal: AbortSignal.timeout(timeoutMs) });
  } catch (err) {
    // fetch says only "fetch failed"; the socket's error (ECONNREFUSED, a timeout) is its cause.
    const cause = (err as { cause?: { message?: unknown } }).cause?.message;
    throw new ReadBackUnavailable(
      `read-back ${new URL(url).pathname} unavailable: ${(err as Error).message}${cause ? ` (${String(cause)})` : ''}`,
    );
  }
  if (!res.ok) throw new ReadBackUnavailable(`read-back ${new URL(url).pathname} answered ${res.status}`);
  try {
    return (await res.json()) as T;
  } catch (err) {
    // A body past the cap while streaming, cut or not JSON: nothing is classified on half the data.
    throw new ReadBackUnavailable(`read-back ${new URL(url).pathname} unreadable: ${(err as Error).message}`);
  }
}

/** Rows per page of a whole-ledger listing: each answer stays well under the read-back body cap. */
const PAGE_ROWS = 500;

/**
 * Reads every row of a paged read-back listing (`?limit=…&after=<cursor>` → `{<list>, next}`),
 * page after page until `next` is null: a long ledger never has to fit in one capped answer. A
 * listing that does not page (no `next`) answered everything at once. `query` (`name=value&`…)
 * comes before the paging parameters.
 * @throws ReadBackUnavailable when a page fails, or the answer is not a list with a usable cursor.
 */
async function readAll<T>(url: string, list: string, timeoutMs: number, query = ''): Promise<T[]> {
  const rows: T[] = [];
  for (let after: string | null = null; ;) {
    const page: string = `${url}?${query}limit=${PAGE_ROWS}${after === null ? '' : `&after=${encodeURIComponent(after)}`}`;
    const body: Record<string, unknown> = await readJson<Record<string, unknown>>(page, timeoutMs);
    const got = body[list];
    const next: unknown = body.next;
    if (!Array.isArray(got) || (next !== undefined && next !== null && (typeof next !== 'string' || next === after)))
      throw new ReadBackUnavailable(`read-back ${new URL(url).pathname} answered no usable page`);
    rows.push(...(got as T[]));
    if (typeof next !== 'string') return rows;
    after = next;
  }
}

const ms = (iso: string): number => new Date(iso).getTime();

/**
 * Reads one listing that does not page (`url` → `{<list>: [...]}`) and keeps each entry `entry`
 * reads, so nothing is classified on half the data (docs/decisions/0773-a-partial-read-back-stops-the-pass.md).
 * @throws ReadBackUnavailable when the read fails ({@link readJson}), the answer has no `list`
 *   array, or an entry is not one `entry` can read (it returns null).
 */
async function readList<T>(url: string, list: string, timeoutMs: number, entry: (row: Record<string, unknown>) => T | null): Promise<T[]> {
  const got = wholeList(await readJson<Record<string, unknown>>(url, timeoutMs), list, entry);
  if (got === null) throw new ReadBackUnavailable(`read-back ${new URL(url).pathname} answered no whole ${list} list`);
  return got;
}

/** A listed mail message, or null without a message id or a template. */
function messageOf(row: Record<string, unknown>): LedgerMessage | null {
  if (typeof row.messageId !== 'string' || row.messageId === '' || typeof row.template !== 'string') return null;
  return {
    messageId: row.messageId,
    template: row.template,
    createdAtMs: typeof row.createdAt === 'string' ? Date.parse(row.createdAt) : NaN,
  };
}

/** One entry of a time-windowed listing: the effect's id, its order and that order's tenant. */
interface WindowEntry {
  id: string;
  orderId: string;
  tenant: string | null;
}

/**
 * Reads a time-windowed listing of the order system or the mail service (`url?since=…`, page by
 * page): every entry must name its effect (`idKey`) and its order, so nothing is judged on half
 * the data (ADR 0773).
 * @throws ReadBackUnavailable when a page fails or an entry lacks its id or order.
 */
async function readWindow(url: string, list: string, idKey: string, sinceMs: number, timeoutMs: number): Promise<WindowEntry[]> {
  const rows = await readAll<unknown>(url, list, timeoutMs, `since=${encodeURIComponent(new Date(sinceMs).toISOString())}&`);
  return rows.map((r) => {
    const row = (typeof r === 'object' && r !== null ? r : {}) as Record<string, unknown>;
    const id = row[idKey];
    if (typeof id !== 'string' || id === '' || typeof row.orderId !== 'string' || row.orderId === '')
      throw new ReadBackUnavailable(`read-back ${new URL(url).pathname} listed an entry without its ${idKey} or order`);
    return { id, orderId: row.orderId, tenant: typeof row.tenant === 'string' && row.tenant !== '' ? row.tenant : null };
  });
}

/** Orders of live (`open` | `frozen`) worklist items of `tool`: read on every pass until resolved, wherever their window is. */
async function liveItemOrders(db: Db, tool: string): Promise<string[]> {
  const rows = await db
    .selectFrom('reconciliation_items')
    .select('order_id')
    .distinct()
    .where('status', 'in', ['open', 'frozen'])
    .where('tool', '=', tool)
    .where('order_id', 'is not', null)
    .execute();
  return rows.map((r) => r.order_id!);
}

/**
 * The orders a pass reads beyond those it knows (ADR 0791): of the shipments and messages created
 * in the window, those of orders `known` does not list and, for mail, those no step names as its
 * effect; plus the orders of live items, so an open difference stays judged after its window.
 * Returns the extra order ids per system and the tenants the window listings gave.
 * @throws ReadBackUnavailable when a window listing fails or answers in part.
 */
async function windowOrders(
  db: Db,
  stagingUrl: string,
  known: { shipments: Set<string>; mail: Set<string>; evidence: Set<string> },
  o: { sinceMs: number; timeoutMs: number },
): Promise<{ shipments: Set<string>; mail: Set<string>; tenants: Map<string, string> }> {
  const [shipped, mailed, shipItems, mailItems] = await Promise.all([
    readWindow(`${stagingUrl}/shipments`, 'shipments', 'shipmentId', o.sinceMs, o.timeoutMs),
    readWindow(`${stagingUrl}/mail/messages`, 'messages', 'messageId', o.sinceMs, o.timeoutMs),
    liveItemOrders(db, 'reship_order'),
    liveItemOrders(db, 'notify_customer'),
  ]);
  const tenants = new Map<string, string>();
  for (const e of [...shipped, ...mailed]) if (e.tenant !== null) tenants.set(e.orderId, e.tenant);
  const shipments = new Set([...shipped.map((e) => e.orderId), ...shipItems].filter((id) => !known.shipments.has(id)));
  const unnamed = mailed.filter((e) => !known.evidence.has(e.id)).map((e) => e.orderId);
  const mail = new Set([...unnamed, ...mailItems].filter((id) => !known.mail.has(id)));
  return { shipments, mail, tenants };
}

/** The agent's operations of the reconciled tools, with action, workflow and approval facts. */
export async function readAgentOperations(db: Db): Promise<AgentOperation[]> {
  const rows = await db
    .selectFrom('operations as o')
    .innerJoin('actions as a', 'a.id', 'o.action_id')
    .innerJoin('workflows as w', 'w.id', 'o.workflow_id')
    .select([
      'o.key',
      'o.tool',
      'o.status',
      'o.workflow_id',
      'w.tenant',
      'a.id as action_id',
      'a.status as action_status',
      'a.call_id',
      'a.target',
      'a.arguments',
      'o.fencing_token',
      'o.lease_expires_at',
      'o.baseline',
      'o.dispatched_at',
      'o.evidence_ref',
      'o.frozen_at',
      'o.created_at',
      // Its own approval, or a lead's approval of replaying it (a lost refund replayed under its key).
      sql<boolean>`exists (select 1 from approvals p where p.action_id = a.id and p.status = 'used')
        or exists (select 1 from reconciliation_items r join approvals p on p.id = r.approval_id
          where r.operation_key = o.key and r.remediation = 'replay' and p.status = 'used')`.as('used_approval'),
    ])
    .where('o.tool', 'in', [...RECONCILED_TOOLS])
    .orderBy('o.created_at')
    .orderBy('o.key')
    .execute();
  return rows.map((r) => {
    const baseline = (r.baseline as { shipments?: unknown } | null)?.shipments;
    return {
      key: r.key,
      tool: r.tool,
      status: r.status,
      workflowId: r.workflow_id,
      tenant: r.tenant,
      actionId: r.action_id,
      actionStatus: r.action_status,
      callId: r.call_id,
      target: r.target,
      args: r.arguments,
      fencingToken: String(r.fencing_token),
      leaseExpiresAtMs: r.lease_expires_at ? new Date(r.lease_expires_at).getTime() : null,
      baselineShipments: typeof baseline === 'number' ? baseline : null,
      dispatchedAtMs: r.dispatched_at ? new Date(r.dispatched_at).getTime() : null,
      evidenceRef: r.evidence_ref,
      frozen: r.frozen_at !== null,
      createdAtMs: new Date(r.created_at).getTime(),
      usedApproval: r.used_approval,
    };
  });
}

/**
 * Reads one consistent-enough picture for a pass: the ledger's operations first, then the
 * systems of record through their read-back endpoints (docs/product/public-contract.md#staging-read-back): every refund and
 * reversal (page by page), the shipments of every known order, every change operation, and the mail of orders
 * with a mail operation in flight; and, by time window (`opts.windowMs`, default
 * {@link READ_BACK_WINDOW_MS}), the shipments and messages of any order, whose orders no step or
 * world order names (and orders of live items) get their whole listings read too (ADR 0791).
 * Records written after the operations were read show up as
 * `ledger_entry_without_step` at worst for one pass, then match.
 * @throws ReadBackUnavailable when any read-back fails or answers in part — a listing without its
 *   list, or an entry without its id (nothing is classified on half the data, ADR 0773).
 */
export async function readSnapshot(
  db: Db,
  stagingUrl: string,
  opts: { autoApproveLimitCents: number; timeoutMs?: number; windowMs?: number },
): Promise<Snapshot> {
  const timeoutMs = opts.timeoutMs ?? 5000;
  const nowMs = Date.now();
  const operations = await readAgentOperations(db);
  const [refunds, reversals, changeOperations] = await Promise.all([
    readAll<{ refundId: string; orderId: string; amountCents: number; idempotencyKey: string; createdAt: string }>(
      `${stagingUrl}/ledger/refunds`,
      'refunds',
      timeoutMs,
    ),
    readAll<{ reversalId: string; refundId: string; idempotencyKey: string; createdAt: string }>(
      `${stagingUrl}/ledger/reversals`,
      'reversals',
      timeoutMs,
    ),
    readAll<LedgerChangeOperation>(`${stagingUrl}/changes/operations`, 'operations', timeoutMs),
  ]);
  const orders = new Map(loadWorld().orders.map((o) => [o.id, { tenant: o.tenant, region: o.region, paidCents: o.paid }]));
  const orderIds = new Set([...orders.keys(), ...operations.filter((o) => o.tool === 'reship_order').map((o) => o.target)]);
  const mailOrders = new Set(operations.filter((o) => o.tool === 'notify_customer' && o.status !== 'succeeded').map((o) => o.target));
  const evidence = new Set(operations.filter((o) => o.tool === 'notify_customer' && o.evidenceRef !== null).map((o) => o.evidenceRef!));
  const more = await windowOrders(
    db,
    stagingUrl,
    { shipments: orderIds, mail: mailOrders, evidence },
    { sinceMs: nowMs - (opts.windowMs ?? READ_BACK_WINDOW_MS), timeoutMs },
  );
  const shipments = new Map<string, ListedShipment[]>();
  for (const id of [...orderIds, ...more.shipments])
    shipments.set(id, await readList(`${stagingUrl}/orders/${encodeURIComponent(id)}/shipments`, 'shipments', timeoutMs, listedShipment));
  const messages = new Map<string, LedgerMessage[]>();
  for (const id of [...mailOrders, ...more.mail])
    messages.set(id, await readList(`${stagingUrl}/mail/messages?orderId=${encodeURIComponent(id)}`, 'messages', timeoutMs, messageOf));
  return {
    operations,
    refunds: refunds.map((r) => ({
      refundId: r.refundId,
      orderId: r.orderId,
      amountCents: r.amountCents,
      idempotencyKey: r.idempotencyKey,
      createdAtMs: ms(r.createdAt),
    })),
    reversals: reversals.map((v) => ({
      reversalId: v.reversalId,
      refundId: v.refundId,
      idempotencyKey: v.idempotencyKey,
      createdAtMs: ms(v.createdAt),
    })),
    shipments,
    messages,
    recordTenants: more.tenants,
    changeOperations,
    orders,
    autoApproveLimitCents: opts.autoApproveLimitCents,
    nowMs,
  };
}
