import { ConflictError, Forbidden, NotFound } from '@gatehouse/platform';
import type { StagingDb } from '../db/staging.database.ts';
import type { FencedTrx } from '../db/revocation-epoch.ts';
import type { ListPage } from './list-page.ts';
import { observeFencingToken } from './fencing.repository.ts';

/** A change record of the change service (seeded from world.json). */
export interface ChangeRecord {
  id: string;
  tenant: string;
  environment: string;
  service: string;
  summary: string;
  risk: string;
}

/**
 * A change operation; times ISO 8601. `status`: `scheduled` until its window starts, `started`
 * from then (`windowStartsAt` ≤ now), `cancelled` once a cancel-before-start ran.
 */
export interface ChangeOperation {
  operationKey: string;
  status: 'scheduled' | 'started' | 'cancelled';
  planId: string;
  changeId: string;
  window: string;
  note: string | null;
  tenant: string;
  requester: string;
  createdAt: string;
  windowStartsAt: string | null;
  cancelledAt: string | null;
  cancelledBy: string | null;
}

/** What a caller asks the change service to cancel (cancel-before-start). */
export interface CancelRequest {
  operationKey: string;
  /** The cancel's own idempotency key (the `Idempotency-Key` header). */
  cancelKey: string;
  reason: string;
  /** Tenant of the delegation: the operation must be in it. */
  tenant: string;
  /** Delegated user (`sub`). */
  by: string;
  fencingToken: number | null;
}

/**
 * When a window starts, from its scheduling time: the next maintenance window is the next
 * 02:00 UTC at least one hour ahead; a manual window has no start until someone starts it
 * (`POST /changes/operations/:operationKey/window-start`, synthetic).
 */
export function windowStartFor(window: string, scheduledAt: Date): Date | null {
  if (window !== 'next-maintenance-window') return null;
  const start = new Date(Date.UTC(scheduledAt.getUTCFullYear(), scheduledAt.getUTCMonth(), scheduledAt.getUTCDate(), 2));
  while (start.getTime() < scheduledAt.getTime() + 3_600_000) start.setUTCDate(start.getUTCDate() + 1);
  return start;
}

/** What a caller asks the change service to schedule. */
export interface ScheduleRequest {
  operationKey: string;
  planId: string;
  changeId: string;
  window: string;
  note: string | null;
  tenant: string;
  requester: string;
  actor: string;
  fencingToken: number | null;
}

/** Fencing namespace of the change service in `staging.fencing_tokens`. */
const FENCE_TARGET = 'changes';

type OperationRow = {
  operation_key: string;
  plan_id: string;
  change_id: string;
  window: string;
  note: string | null;
  tenant: string;
  requester: string;
  created_at: Date;
  window_starts_at: Date | null;
  cancelled_at: Date | null;
  cancelled_by: string | null;
};

function statusOf(r: OperationRow, now = Date.now()): ChangeOperation['status'] {
  if (r.cancelled_at) return 'cancelled';
  return r.window_starts_at && r.window_starts_at.getTime() <= now ? 'started' : 'scheduled';
}

function toOperation(r: OperationRow): ChangeOperation {
  return {
    operationKey: r.operation_key,
    status: statusOf(r),
    planId: r.plan_id,
    changeId: r.change_id,
    window: r.window,
    note: r.note,
    tenant: r.tenant,
    requester: r.requester,
    createdAt: r.created_at.toISOString(),
    windowStartsAt: r.window_starts_at?.toISOString() ?? null,
    cancelledAt: r.cancelled_at?.toISOString() ?? null,
    cancelledBy: r.cancelled_by,
  };
}

/**
 * `staging.changes` and `staging.change_operations`: the change service. Scheduling is
 * idempotent by operation key (docs/product/users-and-tools.md#change-pack, `schedule_change`), enforced by the primary key.
 */
export class ChangesRepository {
  private readonly db: StagingDb;
  constructor(db: StagingDb) {
    this.db = db;
  }

  /** The change record with this id, or undefined; read through `db` (an effect's transaction: ADR 0786; default the pool). */
  async findChange(id: string, db: StagingDb = this.db): Promise<ChangeRecord | undefined> {
    return db.selectFrom('staging.changes').selectAll().where('id', '=', id).executeTakeFirst();
  }

  /** The operation stored under this key, or undefined. */
  async findOperation(operationKey: string): Promise<ChangeOperation | undefined> {
    const row = await this.db
      .selectFrom('staging.change_operations')
      .selectAll()
      .where('operation_key', '=', operationKey)
      .executeTakeFirst();
    return row ? toOperation(row) : undefined;
  }

  /** Every scheduled operation (reconciliation read-back, docs/product/reconciliation.md), oldest first. */
  async listOperations(page?: ListPage): Promise<ChangeOperation[]> {
    if (page) {
      let q = this.db.selectFrom('staging.change_operations').selectAll();
      if (page.after !== undefined) q = q.where('operation_key', '>', page.after);
      return (await q.orderBy('operation_key', 'asc').limit(page.limit).execute()).map(toOperation);
    }
    const rows = await this.db
      .selectFrom('staging.change_operations')
      .selectAll()
      .orderBy('created_at', 'asc')
      .orderBy('operation_key', 'asc')
      .execute();
    return rows.map(toOperation);
  }

  /**
   * Schedules the operation or replays the one stored under its key (same planId, changeId,
   * window and note), in `trx` (the epoch fence's transaction, ADR 0685).
   * @throws ConflictError(`stale_fencing_token`) when the fencing token is below the highest seen.
   * @throws ConflictError(`idempotency_key_reuse`) when the key was used with other parameters.
   */
  async schedule(trx: FencedTrx, req: ScheduleRequest): Promise<{ operation: ChangeOperation; replayed: boolean }> {
    if (req.fencingToken !== null) await observeFencingToken(trx, FENCE_TARGET, req.operationKey, req.fencingToken);
    const inserted = await trx
      .insertInto('staging.change_operations')
      .values({
        operation_key: req.operationKey,
        plan_id: req.planId,
        change_id: req.changeId,
        tenant: req.tenant,
        window: req.window,
        note: req.note,
        status: 'scheduled',
        requester: req.requester,
        actor: req.actor,
        window_starts_at: windowStartFor(req.window, new Date()),
      })
      .onConflict((oc) => oc.column('operation_key').doNothing())
      .returningAll()
      .executeTakeFirst();
    if (inserted) return { operation: toOperation(inserted), replayed: false };
    const existing = await trx
      .selectFrom('staging.change_operations')
      .selectAll()
      .where('operation_key', '=', req.operationKey)
      .executeTakeFirstOrThrow();
    const same =
      existing.plan_id === req.planId &&
      existing.change_id === req.changeId &&
      existing.window === req.window &&
      existing.note === req.note;
    if (!same) throw new ConflictError('idempotency_key_reuse', 'this operation key was used with different parameters');
    return { operation: toOperation(existing), replayed: true };
  }

  /**
   * Cancels a scheduled operation before its window starts, in `trx` (the epoch fence's
   * transaction, ADR 0685): the fencing
   * token (namespace `changes-cancel`, per operation) first, then the row locked. Idempotent by
   * the cancel's key: the same key again answers the cancelled operation (`replayed`).
   * @throws NotFound(`operation_not_found`, 404); Forbidden(`tenant_mismatch`, 403).
   * @throws ConflictError(`stale_fencing_token`) — a lower fence than seen for this operation.
   * @throws ConflictError(`window_started`) — the window started: cancel-before-start no longer applies.
   * @throws ConflictError(`already_cancelled`) — cancelled before under another key.
   */
  async cancel(trx: FencedTrx, req: CancelRequest): Promise<{ operation: ChangeOperation; replayed: boolean }> {
    if (req.fencingToken !== null) await observeFencingToken(trx, `${FENCE_TARGET}-cancel`, req.operationKey, req.fencingToken);
    const row = await trx
      .selectFrom('staging.change_operations')
      .selectAll()
      .where('operation_key', '=', req.operationKey)
      .forUpdate()
      .executeTakeFirst();
    if (!row) throw new NotFound('operation_not_found', 'no operation with this key');
    if (row.tenant !== req.tenant) throw new Forbidden('tenant_mismatch', 'the operation is outside the tenant of the delegation');
    if (row.cancelled_at) {
      if (row.cancel_key === req.cancelKey) return { operation: toOperation(row), replayed: true };
      throw new ConflictError('already_cancelled', `the operation was cancelled at ${row.cancelled_at.toISOString()}`);
    }
    if (statusOf(row) === 'started') {
      throw new ConflictError(
        'window_started',
        `the change window started at ${row.window_starts_at!.toISOString()}: cancel-before-start no longer applies`,
      );
    }
    const updated = await trx
      .updateTable('staging.change_operations')
      .set({ status: 'cancelled', cancel_key: req.cancelKey, cancel_reason: req.reason, cancelled_by: req.by, cancelled_at: new Date() })
      .where('operation_key', '=', req.operationKey)
      .returningAll()
      .executeTakeFirstOrThrow();
    return { operation: toOperation(updated), replayed: false };
  }

  /**
   * Starts the operation's window now (the synthetic environment's clock for a window; a no-op
   * for a cancelled or already started one). Returns the operation, or undefined when unknown.
   */
  async startWindow(operationKey: string): Promise<ChangeOperation | undefined> {
    const row = await this.db
      .updateTable('staging.change_operations')
      .set({ window_starts_at: new Date() })
      .where('operation_key', '=', operationKey)
      .where('cancelled_at', 'is', null)
      .where((eb) => eb.or([eb('window_starts_at', 'is', null), eb('window_starts_at', '>', new Date())]))
      .returningAll()
      .executeTakeFirst();
    return row ? toOperation(row) : this.findOperation(operationKey);
  }
}
