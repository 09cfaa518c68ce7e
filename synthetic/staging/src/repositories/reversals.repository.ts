import { randomBytes } from 'node:crypto';
import { ConflictError, NotFound } from '@gatehouse/platform';
import type { StagingDb } from '../db/staging.database.ts';
import type { FencedTrx } from '../db/revocation-epoch.ts';
import type { ListPage } from './list-page.ts';
import { observeFencingToken } from './fencing.repository.ts';

/** A reversal of a whole refund (the `reverse_refund` compensation); `createdAt` ISO 8601. */
export interface Reversal {
  reversalId: string;
  refundId: string;
  orderId: string;
  /** Integer cents: the refund's whole amount. */
  amountCents: number;
  idempotencyKey: string;
  reason: string;
  requester: string;
  createdAt: string;
}

/** What a caller asks the ledger to reverse. */
export interface ReversalRequest {
  refundId: string;
  idempotencyKey: string;
  reason: string;
  requester: string;
  actor: string;
  fencingToken: number | null;
}

/** Fencing namespace of reversals in `staging.fencing_tokens`. */
const FENCE_TARGET = 'payments-reversals';

type ReversalRow = {
  reversal_id: string;
  refund_id: string;
  order_id: string;
  amount_cents: number;
  idempotency_key: string;
  reason: string;
  requester: string;
  created_at: Date;
};

function toReversal(r: ReversalRow): Reversal {
  return {
    reversalId: r.reversal_id,
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
 * `staging.refund_reversals`: compensations of refunds. A refund is reversed at most once
 * (unique `refund_id`); the first request with a key reverses it, a repeat with the same key
 * replays the stored reversal, the same key for another refund is refused, and another key for
 * an already reversed refund is refused — all by unique constraints, not a read-then-write.
 */
export class ReversalsRepository {
  private readonly db: StagingDb;
  constructor(db: StagingDb) {
    this.db = db;
  }

  /**
   * Reverses the whole refund or replays the reversal stored under the key, in `trx` (the epoch
   * fence's transaction, ADR 0685).
   * @throws NotFound(`refund_not_found`, 404).
   * @throws ConflictError(`stale_fencing_token`) when the fencing token is below the highest seen.
   * @throws ConflictError(`idempotency_key_reuse`) when the key reversed another refund.
   * @throws ConflictError(`already_reversed`) when another key reversed this refund.
   */
  async reverse(trx: FencedTrx, req: ReversalRequest): Promise<{ reversal: Reversal; replayed: boolean }> {
    if (req.fencingToken !== null) await observeFencingToken(trx, FENCE_TARGET, req.idempotencyKey, req.fencingToken);
    const refund = await trx.selectFrom('staging.refunds').selectAll().where('refund_id', '=', req.refundId).executeTakeFirst();
    if (!refund) throw new NotFound('refund_not_found', `no refund ${req.refundId}`);
    const inserted = await trx
      .insertInto('staging.refund_reversals')
      .values({
        reversal_id: `rv_${randomBytes(12).toString('hex')}`,
        refund_id: refund.refund_id,
        idempotency_key: req.idempotencyKey,
        order_id: refund.order_id,
        tenant: refund.tenant,
        amount_cents: refund.amount_cents,
        reason: req.reason,
        requester: req.requester,
        actor: req.actor,
        fencing_token: req.fencingToken,
      })
      .onConflict((oc) => oc.doNothing())
      .returningAll()
      .executeTakeFirst();
    if (inserted) return { reversal: toReversal(inserted), replayed: false };
    const byKey = await trx
      .selectFrom('staging.refund_reversals')
      .selectAll()
      .where('idempotency_key', '=', req.idempotencyKey)
      .executeTakeFirst();
    if (byKey && byKey.refund_id !== req.refundId) {
      throw new ConflictError('idempotency_key_reuse', 'this idempotency key reversed another refund');
    }
    if (byKey) return { reversal: toReversal(byKey), replayed: true };
    throw new ConflictError('already_reversed', `refund ${req.refundId} was already reversed under another key`);
  }

  /** Reversals, oldest first; only one order's when `orderId` is given. */
  async list(orderId?: string, page?: ListPage): Promise<Reversal[]> {
    let q = this.db.selectFrom('staging.refund_reversals').selectAll();
    if (orderId !== undefined) q = q.where('order_id', '=', orderId);
    if (page) {
      if (page.after !== undefined) q = q.where('reversal_id', '>', page.after);
      return (await q.orderBy('reversal_id', 'asc').limit(page.limit).execute()).map(toReversal);
    }
    const rows = await q.orderBy('created_at', 'asc').orderBy('reversal_id', 'asc').execute();
    return rows.map(toReversal);
  }
}
