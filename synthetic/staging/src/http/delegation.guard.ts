import type { Request } from 'express';
import { bearerTokenOf, Forbidden, NotFound, Unauthorized, UserError } from '@gatehouse/platform';
import { verifyDelegatedToken, type DelegatedClaims } from '@gatehouse/credentials';
import { readRevocationEpoch } from '../db/revocation-epoch.ts';
import type { DelegationVerifier } from './token-binding.ts';
import type { OrdersRepository } from '../repositories/orders.repository.ts';
import type { StagingDb } from '../db/staging.database.ts';

export { bindDelegation, type DelegationVerifier } from './token-binding.ts';
export { withEpochFence } from '../db/revocation-epoch.ts';

/**
 * Verifies the request's `Authorization: Bearer <delegated token>` for one downstream
 * (`audience`) and one operation (`scope`): EdDSA signature by a key of the JWKS, expiry,
 * and an epoch not below the current one (docs/product/policy-rules.md "Delegated credentials":
 * downstream services verify the delegation themselves). The request binding is checked next,
 * once the body is parsed ({@link bindDelegation}); the epoch is checked again, locked, where the
 * effect commits (`withEpochFence`, ADR 0685): a bump committing after this read still refuses it.
 * @returns the token's claims (sub = user, act.sub = agent, tenant, ceiling in cents, op, fence, …).
 * @throws Unauthorized(`missing_token`, 401) when there is no Authorization header;
 *   Unauthorized(`malformed_authorization`, 401) when it is not `Bearer <token>` ({@link bearerTokenOf},
 *   docs/decisions/0747-a-malformed-authorization-header-has-its-own-reason.md).
 * @throws SystemError(`epoch_unavailable`, 503) when the epoch cannot be read.
 * @throws DelegationRejected (`invalid_token…` → 401; `wrong_audience`, `wrong_scope`,
 *   `revoked_epoch` → 403; mapped by the effect route).
 */
export async function requireDelegation(
  req: Request,
  verifier: DelegationVerifier,
  opts: { audience: string; scope: string },
): Promise<DelegatedClaims> {
  const token = bearerTokenOf(req.get('authorization'));
  if (!token) throw new Unauthorized('missing_token', 'a delegated bearer token is required');
  const minEpoch = await readRevocationEpoch(verifier.epochDb);
  return verifyDelegatedToken(token, { keys: verifier.keys, audience: opts.audience, scope: opts.scope, minEpoch });
}

/**
 * The token was delegated within one tenant; the record it acts on must be in that tenant.
 * @throws Forbidden(`tenant_mismatch`, 403).
 */
export function assertSameTenant(claims: DelegatedClaims, recordTenant: string): void {
  if (claims.tenant !== recordTenant) {
    throw new Forbidden('tenant_mismatch', 'the record is outside the tenant of the delegation');
  }
}

/**
 * The order `id` a delegated effect acts on: it must exist and be in the delegation's tenant.
 * Read through `trx`, the effect's transaction: a read through the pool while that transaction
 * holds a connection needs a second one, and as many concurrent effects as the pool has
 * connections would each wait for one that never frees (ADR 0786).
 * @throws NotFound(`order_not_found`, 404); Forbidden(`tenant_mismatch`, 403) ({@link assertSameTenant}).
 */
export async function orderOfTenant(
  orders: Pick<OrdersRepository, 'find'>,
  claims: DelegatedClaims,
  id: string,
  trx: StagingDb,
): Promise<NonNullable<Awaited<ReturnType<OrdersRepository['find']>>>> {
  const order = await orders.find(id, trx);
  if (!order) throw new NotFound('order_not_found', `no order ${id}`);
  assertSameTenant(claims, order.tenant);
  return order;
}

/**
 * `Idempotency-Key` header (1–255 printable characters).
 * @throws UserError(`missing_idempotency_key` | `invalid_idempotency_key`, 400).
 */
export function requireIdempotencyKey(req: Request): string {
  const key = req.get('idempotency-key');
  if (key === undefined || key === '') throw new UserError('missing_idempotency_key', 'the Idempotency-Key header is required');
  if (key.length > 255 || !/^[\x21-\x7e]+$/.test(key)) {
    throw new UserError('invalid_idempotency_key', 'Idempotency-Key must be 1–255 printable ASCII characters');
  }
  return key;
}

/**
 * Optional `X-Fencing-Token` header: a non-negative safe integer, or null when absent.
 * @throws UserError(`invalid_fencing_token`, 400) when present but not such an integer.
 */
export function readFencingToken(req: Request): number | null {
  const raw = req.get('x-fencing-token');
  if (raw === undefined || raw === '') return null;
  const n = /^\d{1,16}$/.test(raw.trim()) ? Number(raw.trim()) : NaN;
  if (!Number.isSafeInteger(n)) throw new UserError('invalid_fencing_token', 'X-Fencing-Token must be a non-negative integer');
  return n;
}
