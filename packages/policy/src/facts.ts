import { sql, type RawBuilder } from 'kysely';
import { advisoryLockId, advisoryLockOrder, takeAdvisoryLocks, type Db, type Trx } from '@gatehouse/ledger';
import { loadWorld, testFaults } from '@gatehouse/contracts';
import { eligibleTools } from './eligibility.ts';
import { supportTools, type ParsedProposal } from '@gatehouse/tools';
import type { SupportFacts } from './support.rules.ts';
import { windowStart } from './window-clock.ts';
import { orderRecord, readRecordJson } from './records.ts';

/**
 * Action states whose refund counts toward the cumulative basis (R4, R7) and the rolling caps
 * (R5, R6): done (`succeeded`), started (`running`) or unknown (`failed_unknown`) — docs/product/policy-rules.md#support-rules.
 */
export const COUNTED_REFUND_STATES = ['running', 'succeeded', 'failed_unknown'] as const;

/**
 * At proposal time refunds already decided to run but not yet started (`approved`: allowed, or
 * approved by a lead, and queued) count too, so parallel calls in one response cannot each see
 * an empty basis. At execution the re-evaluation counts only {@link COUNTED_REFUND_STATES}: a
 * queued refund that has not run is not money out, and counting it would let a later proposal
 * flip an earlier, already allowed one.
 */
export const QUEUED_REFUND_STATES = ['approved'] as const;

/**
 * The limits one refund decision reads and then adds to, each named by what competes for it: the
 * order's cumulative basis (R4, R7), the user's rolling 24 h (R5), the tenant's agent hour (R6)
 * and, when the bundle runs R10, the tenant's rolling day. Two decisions wait on each other only
 * when they share one of these — never across tenants; within a tenant, on its hour and day
 * (docs/decisions/0130-refund-limit-locks.md, 0191-limit-contention-between-competitors.md).
 */
export function refundLimitKeys(tenant: string, userId: string, orderId: string, opts: { tenantDay?: boolean } = {}): string[] {
  const keys = [`refund-basis:${tenant}:${orderId}`, `refund-user-24h:${tenant}:${userId}`, `refund-agent-1h:${tenant}`];
  return opts.tenantDay ? [...keys, `refund-tenant-24h:${tenant}`] : keys;
}

/** The lock id of a limit key (the ledger's {@link advisoryLockId}; re-exported for the isolation tests). */
export { advisoryLockId };

/** The tenant's own daily refund cap in the directory (world.json `refundCap24hCents`), or null (R10). */
export function lookupTenantRefundCap(tenant: string): number | null {
  return loadWorld().tenants.find((t) => t.id === tenant)?.refundCap24hCents ?? null;
}

/** The user as the identity directory (world.json) knows them, or null (docs/product/policy-rules.md#r0). */
export function lookupUser(userId: string, tenant: string): SupportFacts['user'] {
  const u = loadWorld().users.find((x) => x.id === userId && x.tenant === tenant);
  return u ? { id: u.id, tenant: u.tenant, region: u.region ?? null, scopes: u.scopes ?? [] } : null;
}

/**
 * Reads an order from the order system (`GET /orders/:id` of the staging systems): the
 * authoritative read for policy, not a tool effect — no delegated credential is minted and the
 * caller checks tenant and region (R2) before anything else sees the order. Null when the order
 * system has no such order. The record is validated and its strings bounded and redacted
 * ({@link orderRecord}).
 * @throws DependencyUnavailable(`system_of_record`) when the order system does not answer or
 *   answers 408/429/5xx (the step is held, {@link readRecordJson}); MalformedRecord, or Error for
 *   another bad answer (the job is retried).
 */
export async function fetchOrder(stagingUrl: string, orderId: string): Promise<SupportFacts['order']> {
  const body = await readRecordJson(`${stagingUrl}/orders/${encodeURIComponent(orderId)}`, 'order system');
  return body === null ? null : orderRecord(body);
}

/**
 * Which refunds a refund sum counts: a tenant, an order, a user, a window (`sinceMs`, ms ending
 * now), one action left out (the one re-evaluated), the queued states too (`includeQueued`), and
 * only what the agent's own steps moved (`agentOnly`, R6).
 */
export interface RefundFilter {
  tenant?: string;
  orderId?: string;
  userId?: string;
  sinceMs?: number;
  excludeActionId?: string;
  includeQueued?: boolean;
  agentOnly?: boolean;
}

/**
 * Sum of refunds recorded in the ledger's actions ({@link COUNTED_REFUND_STATES}, plus
 * {@link QUEUED_REFUND_STATES} with `includeQueued`), integer cents, optionally restricted to a
 * tenant, an order, a user and a window (ms, ending now: {@link windowStart}), excluding one action
 * (the one re-evaluated). In a window a refund is placed at the later of its decision and its
 * first claim (its operation's reservation): one decided long ago and held that ran now is money
 * out now (docs/decisions/0682-a-held-refund-counts-from-its-claim.md). Plus the money
 * reconciliation found out of the payments ledger that those actions do not carry
 * ({@link refundsOutsideStepsCents}, ADR 0686); `agentOnly` (R6, the agent's hour) keeps only the
 * part of it that the agent's own steps moved.
 */
export async function recordedRefundsCents(db: Db | Trx, opts: RefundFilter): Promise<number> {
  let q = db
    .selectFrom('actions as a')
    .leftJoin('operations as o', 'o.key', 'a.operation_key')
    .select(sql<string>`coalesce(sum((a.arguments->>'amountCents')::bigint), 0)`.as('total'))
    .where('a.tool', '=', 'issue_refund')
    .where('a.status', 'in', opts.includeQueued ? [...COUNTED_REFUND_STATES, ...QUEUED_REFUND_STATES] : [...COUNTED_REFUND_STATES]);
  if (opts.tenant) q = q.where('a.tenant', '=', opts.tenant);
  if (opts.orderId) q = q.where('a.target', '=', opts.orderId);
  if (opts.userId) q = q.where('a.user_id', '=', opts.userId);
  if (opts.sinceMs !== undefined)
    q = q.where(sql<Date>`greatest(a.created_at, coalesce(o.created_at, a.created_at))`, '>=', windowStart(opts.sinceMs));
  if (opts.excludeActionId) q = q.where('a.id', '!=', opts.excludeActionId);
  const row = await q.executeTakeFirstOrThrow();
  return Number(row.total) + (await refundsOutsideStepsCents(db, opts));
}

/**
 * The part of {@link recordedRefundsCents} that no counted action carries: refunds a
 * reconciliation item holds as money out — found without a step (live, or adopted) or moved
 * beyond the agent's amount (live, or ratified) — read through the database's one definition,
 * `refunds_outside_steps` (migration 20261206000686-RefundsOutsideSteps, ADR 0686). A row whose
 * tenant is unknown counts for its order only, in no window. Integer cents.
 */
async function refundsOutsideStepsCents(db: Db | Trx, opts: RefundFilter): Promise<number> {
  const statuses = opts.includeQueued ? [...COUNTED_REFUND_STATES, ...QUEUED_REFUND_STATES] : [...COUNTED_REFUND_STATES];
  const where = [sql`true`];
  if (opts.tenant)
    where.push(
      opts.orderId
        ? sql`(x.tenant = ${opts.tenant} OR (x.tenant IS NULL AND x.order_id = ${opts.orderId}))`
        : sql`x.tenant = ${opts.tenant}`,
    );
  if (opts.orderId) where.push(sql`x.order_id = ${opts.orderId}`);
  if (opts.userId) where.push(sql`x.user_id = ${opts.userId}`);
  if (opts.sinceMs !== undefined) where.push(sql`x.tenant IS NOT NULL AND x.at >= ${windowStart(opts.sinceMs)}::timestamptz`);
  if (opts.agentOnly) where.push(sql`x.by_agent`);
  const { rows } = await sql<{ total: string }>`
    SELECT coalesce(sum(x.cents), 0) AS total
      FROM refunds_outside_steps(${statuses}::text[], ${opts.excludeActionId ?? null}::uuid) x
     WHERE ${sql.join(where, sql` AND `)}`.execute(db);
  return Number(rows[0]!.total);
}

const HOUR_MS = 3_600_000;

/**
 * The four refund sums one refund decision reads, integer cents: the order's cumulative basis
 * (R4, R7), the user's rolling 24 h (R5), the tenant's agent hour (R6) and the tenant's rolling
 * day (R10) — each the same sum {@link recordedRefundsCents} gives for that filter (the hour with
 * `agentOnly`). Each includes the money out that reconciliation found beside the agent's refunds
 * (adopted or unexplained ledger entries, a ratified larger amount; ADR 0686), except the hour,
 * which counts only what the agent's own steps moved.
 */
export interface RefundSums {
  orderCents: number;
  user24hCents: number;
  tenant1hCents: number;
  tenant24hCents: number;
}

const NO_REFUNDS: RefundSums = { orderCents: 0, user24hCents: 0, tenant1hCents: 0, tenant24hCents: 0 };

/**
 * What {@link refundSums} reads: the four sums' filter (a tenant, an order, a user; counting
 * {@link COUNTED_REFUND_STATES}, plus {@link QUEUED_REFUND_STATES} with `includeQueued`;
 * `excludeActionId` leaves out the action being re-evaluated) and, with `lockKeys`, the limits
 * whose advisory locks are taken first.
 */
export interface RefundSumsRead {
  tenant: string;
  orderId: string;
  userId: string;
  excludeActionId?: string;
  includeQueued: boolean;
  /** Take these limits' advisory locks first, in the same statement (it must run in a transaction). */
  lockKeys?: readonly string[];
}

/**
 * The database call that reads a {@link RefundSumsRead}, as a set-returning expression of one
 * row (`order_cents`, `user_24h_cents`, `tenant_1h_cents`, `tenant_24h_cents`, bigint cents). The
 * database owns the aggregate (migrations 20261203000100-LockedRefundSums and
 * 20261206000682-RefundWindowsFromTheClaim); with lock keys it takes the locks in
 * {@link advisoryLockOrder}, then sums on a snapshot taken after they were granted (ADR 0470).
 * Windows are rolling, measured from now (ms, {@link windowStart}); a refund that ran is in them
 * from its claim (ADR 0682).
 */
function refundSumsCall(read: RefundSumsRead): RawBuilder<unknown> {
  const statuses = read.includeQueued ? [...COUNTED_REFUND_STATES, ...QUEUED_REFUND_STATES] : [...COUNTED_REFUND_STATES];
  const args = sql.join([
    sql`${read.tenant}`,
    sql`${read.orderId}`,
    sql`${read.userId}`,
    sql`${windowStart(24 * HOUR_MS)}::timestamptz`,
    sql`${windowStart(HOUR_MS)}::timestamptz`,
    sql`${statuses}::text[]`,
    sql`${read.excludeActionId ?? null}::uuid`,
  ]);
  return read.lockKeys
    ? sql`refund_limit_sums_locked(${advisoryLockOrder(read.lockKeys)}::bigint[], ${args})`
    : sql`refund_limit_sums(${args})`;
}

/** The row of {@link refundSumsCall} (bigints as the driver or `to_jsonb` gives them) as {@link RefundSums}. */
function toRefundSums(row: Record<string, unknown>): RefundSums {
  return {
    orderCents: Number(row.order_cents),
    user24hCents: Number(row.user_24h_cents),
    tenant1hCents: Number(row.tenant_1h_cents),
    tenant24hCents: Number(row.tenant_24h_cents),
  };
}

/**
 * Reads every {@link RefundSums} of one refund decision in one statement (one aggregate with a
 * FILTER per limit over the tenant's refunds that are on the order or inside the day), instead
 * of one statement per limit ({@link refundSumsCall}). With `lockKeys`, lock and read in one
 * round trip (docs/decisions/0470-locked-refund-sums-in-one-statement.md).
 * @throws Error from the database (e.g. a lock wait cancelled by `lock_timeout`).
 */
export async function refundSums(db: Db | Trx, read: RefundSumsRead): Promise<RefundSums> {
  const { rows } = await sql<Record<string, unknown>>`SELECT * FROM ${refundSumsCall(read)}`.execute(db);
  return toRefundSums(rows[0]!);
}

/**
 * A read of {@link RefundSums} that rides on another statement of the caller's transaction as
 * one scalar jsonb expression (`expression`), turned back into sums by `parse`: the claim's
 * limit locks and sums, taken by the statement that grants the lease
 * (docs/decisions/0620-the-claim-in-two-statements.md).
 */
export interface RidingRefundSums {
  expression: RawBuilder<unknown>;
  parse(raw: unknown): RefundSums;
}

/** {@link refundSumsCall} as a {@link RidingRefundSums}. */
function ridingRefundSums(read: RefundSumsRead): RidingRefundSums {
  return {
    expression: sql`(select to_jsonb(s) from ${refundSumsCall(read)} s)`,
    parse: (raw) => toRefundSums(raw as Record<string, unknown>),
  };
}

/**
 * Whether the test-only switch `GATEHOUSE_TEST_<name>=1` is set. The switches remove one control
 * each, for the tests that show the control is load-bearing: `DISABLE_CUMULATIVE_BASIS` judges each
 * refund alone (four 4900 refunds then run without approval), `DISABLE_LIMIT_LOCKS` reads the sums
 * without the limit locks (concurrent refunds then dodge the auto limit), `SHARED_LIMIT_LOCK` takes
 * one lock shared by every refund decision instead of one per limit (the former global lock:
 * refunds of different tenants then wait on each other).
 * @throws Error when set outside `GATEHOUSE_ENV=test`.
 */
function testSwitch(name: 'disableCumulativeBasis' | 'disableLimitLocks' | 'sharedLimitLock'): boolean {
  return testFaults()[name];
}

/** Whether a decision on `toolName` reads and adds to the refund limits (R4–R7, R10): only `issue_refund`. */
export function readsRefundLimits(toolName: string): boolean {
  return toolName === 'issue_refund';
}

/**
 * The refund sums of one proposal read without the limit locks, outside any transaction, beside
 * the order system's read (docs/decisions/0450-limit-locks-last-in-the-decision.md): the
 * gateway decides and writes on them, then confirms the decision under the locks. Same filter
 * and counting as the decision's own read ({@link refundSums} with queued refunds); undefined for
 * a tool that reads no refund limit.
 */
export async function unlockedRefundSums(
  db: Db,
  wf: { tenant: string; user_id: string },
  parsed: Pick<ParsedProposal, 'tool' | 'args'>,
): Promise<RefundSums | undefined> {
  if (!readsRefundLimits(parsed.tool.name)) return undefined;
  return refundSums(db, { tenant: wf.tenant, orderId: String(parsed.args.orderId), userId: wf.user_id, includeQueued: true });
}

/** How a support decision reads its limits (see {@link loadSupportFacts}). */
export interface SupportLimitOptions {
  /** The action being re-evaluated, left out of the sums. */
  excludeActionId?: string;
  /** The executor's re-evaluation: queued refunds do not count ({@link QUEUED_REFUND_STATES}). */
  atExecution?: boolean;
  /** The bundle runs R10: the tenant's day is locked and summed. */
  tenantCap?: boolean;
}

/**
 * What one support decision locks and sums, the one place that says so: for a refund the limits
 * it competes for ({@link refundLimitKeys}) — their sums read under their locks in one statement
 * when the order is in the requester's tenant (`sums`), else the locks alone (`lockOnly`, a
 * refund R2 denies); nothing for other tools. The test-only switches apply here:
 * `SHARED_LIMIT_LOCK` (one lock for every refund decision), `DISABLE_LIMIT_LOCKS` (sums unlocked).
 */
function supportLimitRead(
  wf: { tenant: string; user_id: string },
  parsed: Pick<ParsedProposal, 'tool' | 'args'>,
  order: SupportFacts['order'],
  opts: SupportLimitOptions,
): { sums: RefundSumsRead | null; lockOnly?: readonly string[] } {
  if (!readsRefundLimits(parsed.tool.name)) return { sums: null };
  const orderId = String(parsed.args.orderId);
  const user = lookupUser(wf.user_id, wf.tenant);
  const inTenant = Boolean(order && user && order.tenant === user.tenant);
  // Control-removed tests only: SHARED_LIMIT_LOCK puts every refund decision behind one lock.
  const keys = testSwitch('sharedLimitLock')
    ? ['refund-decision']
    : refundLimitKeys(wf.tenant, wf.user_id, orderId, { tenantDay: opts.tenantCap === true });
  const lockKeys = testSwitch('disableLimitLocks') ? undefined : keys;
  // Only R4–R7 and R10 read the sums: in the statement that takes the locks (ADR 0470); a refund
  // on another tenant's order (R2) takes the locks and reads none.
  if (!inTenant) return { sums: null, lockOnly: lockKeys };
  const sums = { tenant: wf.tenant, orderId, userId: wf.user_id, excludeActionId: opts.excludeActionId, includeQueued: !opts.atExecution };
  return { sums: { ...sums, lockKeys } };
}

/**
 * The limit locks and sums {@link loadSupportFacts} would take for this decision, as a read that
 * rides on another statement of the caller's transaction ({@link RidingRefundSums}); its parsed
 * result is then passed back as `lockedSums`. Null when the decision reads no sums (not a
 * refund, or an order outside the tenant): the facts then read what they need themselves.
 */
export function ridingSupportSums(
  wf: { tenant: string; user_id: string },
  parsed: Pick<ParsedProposal, 'tool' | 'args'>,
  order: SupportFacts['order'],
  opts: SupportLimitOptions,
): RidingRefundSums | null {
  const { sums } = supportLimitRead(wf, parsed, order, opts);
  return sums ? ridingRefundSums(sums) : null;
}

/**
 * Loads every fact R0–R10 need for one parsed proposal, tenant-scoped, inside `trx`. For refunds
 * it first takes the advisory locks of the limits the refund competes for
 * ({@link refundLimitKeys}), so decisions that read and then add to the same sum are serialized
 * (two refunds in one model response cannot both see zero) while refunds of other orders, users
 * and tenants go on in parallel. Every limit is tenant-scoped: the agent's hour (R6) counts the
 * refunds it made for this tenant only, the tenant's day (R10) every refund of the tenant.
 * `opts.tenantCap`: the bundle runs R10, so the tenant's day is locked and summed (else its sum
 * is 0 and unused). `opts.unlockedSums`: sums read beforehand without the locks
 * ({@link unlockedRefundSums}); neither locks nor sums are taken here, and the caller must confirm
 * the decision under the locks before it commits (ADR 0450). `opts.lockedSums`: sums the caller
 * read under the locks in `trx` ({@link ridingSupportSums}, ADR 0620); nothing is taken here.
 * `order` is read beforehand from the order system (outside the transaction).
 */
export async function loadSupportFacts(
  trx: Trx,
  wf: { tenant: string; user_id: string; mode: 'investigate' | 'act'; state: string; writesEnabled?: boolean },
  parsed: Pick<ParsedProposal, 'tool' | 'args'>,
  order: SupportFacts['order'],
  opts: SupportLimitOptions & { unlockedSums?: RefundSums; lockedSums?: RefundSums } = {},
): Promise<SupportFacts> {
  const world = loadWorld();
  const user = lookupUser(wf.user_id, wf.tenant);
  const refund = readsRefundLimits(parsed.tool.name);
  const tenantDay = refund && opts.tenantCap === true;
  const limits = supportLimitRead(wf, parsed, order, opts);
  // Control-removed test only (refused outside GATEHOUSE_ENV=test): judge each refund alone.
  const noBasis = testSwitch('disableCumulativeBasis');
  const preset = opts.unlockedSums ?? opts.lockedSums;
  let sums = NO_REFUNDS;
  if (preset && limits.sums) sums = preset;
  else if (limits.sums) sums = await refundSums(trx, limits.sums);
  // Only sums read without the locks skip them (ADR 0450); `lockedSums` never stands for a lock-only read.
  else if (limits.lockOnly && !opts.unlockedSums) await takeAdvisoryLocks(trx, limits.lockOnly);
  return {
    user,
    agentGrantedTools: world.agent.grantedTools,
    eligibleTools: eligibleTools(supportTools, wf, world.agent.grantedTools).map((t) => t.name),
    tool: { name: parsed.tool.name, scope: parsed.tool.scope },
    args: parsed.args,
    // Facts about other tenants never feed the rules: R2 denies on the tenant check first.
    order,
    priorRefundsOnOrderCents: noBasis ? 0 : sums.orderCents,
    userRefunds24hCents: noBasis ? 0 : sums.user24hCents,
    agentRefunds1hCents: sums.tenant1hCents,
    tenantRefunds24hCents: tenantDay ? sums.tenant24hCents : 0,
    tenantRefundCap24hCents: lookupTenantRefundCap(wf.tenant),
  };
}
