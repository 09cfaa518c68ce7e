import { randomBytes } from 'node:crypto';
import { ConflictError } from '@gatehouse/platform';
import type { StagingDb } from '../db/staging.database.ts';
import type { FencedTrx } from '../db/revocation-epoch.ts';
import type { ListPage } from './list-page.ts';
import { observeFencingToken } from './fencing.repository.ts';

/** A refund in the payments ledger. `amountCents` is integer cents; `createdAt` ISO 8601. */
export interface Refund {
  refundId: string;
  orderId: string;
  amountCents: number;
  idempotencyKey: string;
  reason: string;
  requester: string;
  createdAt: string;
}

/** What a caller asks the ledger to refund. */
export interface RefundRequest {
  idempotencyKey: string;
  orderId: string;
  tenant: string;
  /** Integer cents, > 0 (checked by the router and by a CHECK constraint). */
  amountCents: number;
  reason: string;
  requester: string;
  actor: string;
  fencingToken: number | null;
}

/** Outcome of {@link RefundsRepository.create}: the stored refund and whether it was a replay. */
export interface RefundResult {
  refund: Refund;
  replayed: boolean;
}

/** Fencing namespace of the payments ledger in `staging.fencing_tokens`. */
const FENCE_TARGET = 'payments';

type RefundRow = {
  refund_id: string;
  order_id: string;
  amount_cents: number;
  idempotency_key: string;
  reason: string;
  requester: string;
  created_at: Date;
};

function toRefund(r: RefundRow): Refund {
  return {
    refundId: r.refund_id,
    orderId: r.order_id,
    amountCents: r.amount_cents,
    idempotencyKey: r.idempotency_key,
    reason: r.reason,
    requester: r.requester,
    createdAt: r.created_at.toISOString(),
  };
}

/**
 * `staging.refunds`: the payments ledger. Idempotency follows real payments APIs (e.g. Stripe's
 * `Idempotency-Key`): the first request with a key creates the refund; a repeat with the same
 * parameters (orderId, amountCents) replays the stored result; the same key with other
 * parameters is refused. Uniqueness is the database's unique index, not a read-then-write.
 */
export class RefundsRepository {
  private readonly db: StagingDb;
  constructor(db: StagingDb) {
    this.db = db;
  }

  /**
   * Creates the refund or replays the one stored under the key, in `trx` (the epoch fence's
   * transaction, ADR 0685): the fencing check first (its row lock serialises a key's requests), then
   * `INSERT … ON CONFLICT (idempotency_key) DO NOTHING`, then read-back of the winner.
   * @throws ConflictError(`stale_fencing_token`) when the fencing token is below the highest seen.
   * @throws ConflictError(`idempotency_key_reuse`) when the key was used with other parameters.
   */
  async create(trx: FencedTrx, req: RefundRequest): Promise<RefundResult> {
    if (req.fencingToken !== null) await observeFencingToken(trx, FENCE_TARGET, req.idempotencyKey, req.fencingToken);
    const inserted = await trx
      .insertInto('staging.refunds')
      .values({
        refund_id: `re_${randomBytes(12).toString('hex')}`,
        idempotency_key: req.idempotencyKey,
        order_id: req.orderId,
        tenant: req.tenant,
        amount_cents: req.amountCents,
        reason: req.reason,
        requester: req.requester,
        actor: req.actor,
        fencing_token: req.fencingToken,
      })
      .onConflict((oc) => oc.column('idempotency_key').doNothing())
      .returningAll()
      .executeTakeFirst();
    if (inserted) return { refund: toRefund(inserted), replayed: false };
    // READ COMMITTED: this statement sees the row the conflicting transaction committed.
    const existing = await trx
      .selectFrom('staging.refunds')
      .selectAll()
      .where('idempotency_key', '=', req.idempotencyKey)
      .executeTakeFirstOrThrow();
    if (existing.order_id !== req.orderId || existing.amount_cents !== req.amountCents) {
      throw new ConflictError('idempotency_key_reuse', 'this idempotency key was used with different parameters');
    }
    return { refund: toRefund(existing), replayed: true };
  }

  /** The refund with this id, with its tenant (for the delegation's tenant check), or undefined; read through `db` (an effect's transaction: ADR 0786; default the pool). */
  async find(refundId: string, db: StagingDb = this.db): Promise<(Refund & { tenant: string }) | undefined> {
    const row = await db.selectFrom('staging.refunds').selectAll().where('refund_id', '=', refundId).executeTakeFirst();
    return row ? { ...toRefund(row), tenant: row.tenant } : undefined;
  }

  /**
   * Every refund in the ledger (reconciliation read-back, docs/product/reconciliation.md), oldest first; only `tenant`'s
   * when given.
   */
  async listAll(tenant?: string, page?: ListPage): Promise<Refund[]> {
    let q = this.db.selectFrom('staging.refunds').selectAll();
    if (tenant !== undefined) q = q.where('tenant', '=', tenant);
    if (page) {
      // A page: by id after the cursor, so a long ledger is read in bounded answers.
      if (page.after !== undefined) q = q.where('refund_id', '>', page.after);
      return (await q.orderBy('refund_id', 'asc').limit(page.limit).execute()).map(toRefund);
    }
    const rows = await q.orderBy('created_at', 'asc').orderBy('refund_id', 'asc').execute();
    return rows.map(toRefund);
  }

  /** Refunds recorded on an order, oldest first. */
  async listByOrder(orderId: string): Promise<Refund[]> {
    const rows = await this.db
      .selectFrom('staging.refunds')
      .selectAll()
      .where('order_id', '=', orderId)
      .orderBy('created_at', 'asc')
      .orderBy('refund_id', 'asc')
      .execute();
    return rows.map(toRefund);
  }
}
