import { ConflictError } from '@gatehouse/platform';
import type { StagingDb } from '../db/staging.database.ts';
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

/** A scheduled change operation; `createdAt` ISO 8601. */
export interface ChangeOperation {
  operationKey: string;
  status: 'scheduled';
  planId: string;
  changeId: string;
  window: string;
  note: string | null;
  tenant: string;
  requester: string;
  createdAt: string;
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
};

function toOperation(r: OperationRow): ChangeOperation {
  return {
    operationKey: r.operation_key,
    status: 'scheduled',
    planId: r.plan_id,
    changeId: r.change_id,
    window: r.window,
    note: r.note,
    tenant: r.tenant,
    requester: r.requester,
    createdAt: r.created_at.toISOString(),
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

  /** The change record with this id, or undefined. */
  async findChange(id: string): Promise<ChangeRecord | undefined> {
    return this.db.selectFrom('staging.changes').selectAll().where('id', '=', id).executeTakeFirst();
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
  async listOperations(): Promise<ChangeOperation[]> {
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
   * window and note), in one transaction.
   * @throws ConflictError(`stale_fencing_token`) when the fencing token is below the highest seen.
   * @throws ConflictError(`idempotency_key_reuse`) when the key was used with other parameters.
   */
  async schedule(req: ScheduleRequest): Promise<{ operation: ChangeOperation; replayed: boolean }> {
    return this.db.transaction().execute(async (trx) => {
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
    });
  }
}
