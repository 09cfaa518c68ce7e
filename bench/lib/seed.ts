import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import type { Db } from '@gatehouse/ledger';
import { catalogDigest, supportTools } from '@gatehouse/tools';

// Bulk seeding for the benchmarks: the rows the agent loop (proposals) or the gateway and a lead
// (approved actions) would have written, inserted in batches so set-up stays outside the timings.

/** Tenant, region and users the benchmarks act as (world.json: quillfeather/US). */
export const TENANT = 'quillfeather';
export const REQUESTER = 'rep-ana';
export const LEAD = 'lead-eli';
const RELEASE = 'rel-1';
const POLICY = 'support-p1';
const CATALOG = catalogDigest(supportTools);
const HOUR_MS = 3_600_000;

/** `count` order ids `<letter>-0000`… (the catalog accepts `^[A-Z]-\d{4}$`), starting at `start`. */
export function orderIds(letter: string, start: number, count: number): string[] {
  if (start + count > 10_000) throw new Error(`only 10 000 order ids per letter (${letter})`);
  return Array.from({ length: count }, (_, i) => `${letter}-${String(start + i).padStart(4, '0')}`);
}

/** Inserts shipped orders of `tenant` (default quillfeather) in region US paid `paidCents` (integer cents) into the order system. */
export async function createOrders(db: Db, ids: string[], paidCents = 50_000, tenant = TENANT): Promise<void> {
  for (const part of chunks(ids, 1000)) {
    await sql`INSERT INTO staging.orders (id, tenant, region, customer, paid_cents, status)
      SELECT unnest(${part}::text[]), ${tenant}, 'US', 'cust-2', ${paidCents}::int, 'shipped'
      ON CONFLICT (id) DO NOTHING`.execute(db);
  }
}

/** One proposal ready for the gateway: the ids its `proposals` job and its result carry. */
export interface SeededProposal {
  workflowId: string;
  proposalId: string;
  callId: string;
}

/** A function call as the model would have sent it (arguments as the raw JSON string). */
export interface CallSpec {
  tool: 'lookup_order' | 'issue_refund';
  arguments: Record<string, unknown>;
  mode: 'investigate' | 'act';
  /** Whose workflow (default rep-ana of quillfeather); the user must be in the services' world. */
  actor?: { tenant: string; user: string };
}

function workflowRow(
  id: string,
  mode: 'investigate' | 'act',
  state: string,
  createdAt = new Date(),
  actor: { tenant: string; user: string } = { tenant: TENANT, user: REQUESTER },
) {
  return {
    id,
    tenant: actor.tenant,
    ticket_id: `B-${id}`,
    user_id: actor.user,
    pack: 'support' as const,
    mode,
    text_sha256: sha256(id),
    state: state as 'investigating',
    release_id: RELEASE,
    policy_revision: POLICY,
    catalog_digest: CATALOG,
    round: 1,
    created_at: createdAt,
    updated_at: createdAt,
  };
}

function budgetRow(workflowId: string) {
  return {
    workflow_id: workflowId,
    max_rounds: 8,
    max_tool_calls: 6,
    deadline_at: new Date(Date.now() + 2 * HOUR_MS),
    max_spend_micro_usd: 100_000,
  };
}

/** The `proposals` row of a seeded function call (`argumentsSha256` of its raw arguments). */
function proposalRow(
  r: { proposalId: string; workflowId: string; callId: string },
  tool: string,
  argumentsSha256: string,
  status: 'received' | 'valid',
  createdAt?: Date,
) {
  return {
    id: r.proposalId,
    workflow_id: r.workflowId,
    round: 1,
    call_id: r.callId,
    tool,
    arguments_sha256: argumentsSha256,
    status,
    ...(createdAt ? { created_at: createdAt } : {}),
  };
}

/** The version-1 `actions` row of a seeded refund of `amountCents` on `orderId`. */
function refundActionRow(
  r: { actionId: string; workflowId: string; proposalId: string; callId: string; orderId: string; digest: string },
  args: Record<string, unknown>,
  decided: { decision: 'ALLOW' | 'REQUIRE_APPROVAL'; ruleId: string; status: 'approved' | 'pending_approval' | 'succeeded'; at?: Date },
) {
  return {
    id: r.actionId,
    workflow_id: r.workflowId,
    proposal_id: r.proposalId,
    call_id: r.callId,
    version: 1,
    tool: 'issue_refund',
    target: r.orderId,
    arguments: JSON.stringify(args),
    digest: r.digest,
    decision: decided.decision,
    rule_id: decided.ruleId,
    policy_revision: POLICY,
    status: decided.status,
    operation_key: `${r.workflowId}:action:1`,
    release_id: RELEASE,
    facts: JSON.stringify({}),
    ...(decided.at ? { created_at: decided.at, updated_at: decided.at } : {}),
  };
}

/**
 * Writes what the agent loop records for one model function call, per spec: a workflow of
 * the spec's actor, default rep-ana (state `investigating`, round 1), its budget (deadline in 2 h), the `function_call`
 * transcript item and the proposal in status `received` — everything the gateway reads.
 */
export async function seedProposals(db: Db, specs: CallSpec[]): Promise<SeededProposal[]> {
  const out: SeededProposal[] = [];
  for (const part of chunks(specs, 500)) {
    const rows = part.map((s) => ({
      s,
      workflowId: randomUUID(),
      proposalId: randomUUID(),
      callId: `call_${randomBytes(8).toString('hex')}`,
    }));
    await db.transaction().execute(async (trx) => {
      await trx
        .insertInto('workflows')
        .values(rows.map((r) => workflowRow(r.workflowId, r.s.mode, 'investigating', new Date(), r.s.actor)))
        .execute();
      await trx
        .insertInto('budgets')
        .values(rows.map((r) => budgetRow(r.workflowId)))
        .execute();
      await trx
        .insertInto('conversation_items')
        .values(
          rows.map((r) => ({
            workflow_id: r.workflowId,
            round: 1,
            kind: 'function_call' as const,
            call_id: r.callId,
            item: JSON.stringify({ type: 'function_call', call_id: r.callId, name: r.s.tool, arguments: JSON.stringify(r.s.arguments) }),
          })),
        )
        .execute();
      await trx
        .insertInto('proposals')
        .values(rows.map((r) => proposalRow(r, r.s.tool, sha256(JSON.stringify(r.s.arguments)), 'received')))
        .execute();
    });
    out.push(...rows.map((r) => ({ workflowId: r.workflowId, proposalId: r.proposalId, callId: r.callId })));
  }
  return out;
}

/** One refund action that required a lead's approval (rule R7), as seeded. */
export interface SeededApproval {
  workflowId: string;
  actionId: string;
  approvalId: string;
  callId: string;
  digest: string;
  operationKey: string;
  orderId: string;
}

/**
 * Writes refunds of `amountCents` (integer cents) on `orders` (round robin) that policy sent to a
 * lead (REQUIRE_APPROVAL, rule R7: the order already carries refunds at the auto limit, see
 * {@link seedPriorRefunds}). `approved: false` leaves action `pending_approval` with a `pending`
 * approval (a decision is still to come); `approved: true` is the state after lead-eli approved:
 * action `approved`, approval `approved`, ready for an `executions` job. Approvals expire in 1 h.
 */
export async function seedApprovals(
  db: Db,
  n: number,
  orders: string[],
  opts: { amountCents: number; approved: boolean },
): Promise<SeededApproval[]> {
  const out: SeededApproval[] = [];
  const now = new Date();
  for (const part of chunks(
    Array.from({ length: n }, (_, i) => orders[i % orders.length]!),
    500,
  )) {
    const rows = part.map((orderId) => {
      const workflowId = randomUUID();
      return {
        workflowId,
        orderId,
        actionId: randomUUID(),
        approvalId: randomUUID(),
        proposalId: randomUUID(),
        callId: `call_${randomBytes(8).toString('hex')}`,
        digest: randomBytes(32).toString('hex'),
        operationKey: `${workflowId}:action:1`,
        args: { orderId, amountCents: opts.amountCents, reason: 'damaged item' },
      };
    });
    await db.transaction().execute(async (trx) => {
      await trx
        .insertInto('workflows')
        .values(rows.map((r) => workflowRow(r.workflowId, 'act', opts.approved ? 'executing' : 'awaiting_approval')))
        .execute();
      await trx
        .insertInto('budgets')
        .values(rows.map((r) => budgetRow(r.workflowId)))
        .execute();
      await trx
        .insertInto('proposals')
        .values(rows.map((r) => proposalRow(r, 'issue_refund', sha256(JSON.stringify(r.args)), 'valid')))
        .execute();
      await trx
        .insertInto('actions')
        .values(
          rows.map((r) =>
            refundActionRow(r, r.args, {
              decision: 'REQUIRE_APPROVAL',
              ruleId: 'R7',
              status: opts.approved ? 'approved' : 'pending_approval',
            }),
          ),
        )
        .execute();
      await trx
        .insertInto('approvals')
        .values(
          rows.map((r) => ({
            id: r.approvalId,
            workflow_id: r.workflowId,
            action_id: r.actionId,
            action_version: 1,
            action_digest: r.digest,
            policy_revision: POLICY,
            tool: 'issue_refund',
            tenant: TENANT,
            region: 'US',
            amount_cents: opts.amountCents,
            requester: REQUESTER,
            rule_id: 'R7',
            status: opts.approved ? ('approved' as const) : ('pending' as const),
            approver: opts.approved ? LEAD : null,
            release_id: RELEASE,
            expires_at: new Date(now.getTime() + HOUR_MS),
            decided_at: opts.approved ? now : null,
          })),
        )
        .execute();
    });
    out.push(
      ...rows.map(({ workflowId, actionId, approvalId, callId, digest, operationKey, orderId }) => ({
        workflowId,
        actionId,
        approvalId,
        callId,
        digest,
        operationKey,
        orderId,
      })),
    );
  }
  return out;
}

/**
 * Gives each order one executed refund of `cents` (default 5000, the auto limit) two days old:
 * any further refund on it needs approval (R7: the cumulative basis has no window), while the
 * rolling caps (R5 24 h, R6 1 h) do not see it.
 */
export async function seedPriorRefunds(db: Db, orders: string[], cents = 5000): Promise<void> {
  const at = new Date(Date.now() - 48 * HOUR_MS);
  for (const part of chunks(orders, 500)) {
    const rows = part.map((orderId) => ({
      orderId,
      workflowId: randomUUID(),
      actionId: randomUUID(),
      proposalId: randomUUID(),
      callId: `call_${randomBytes(8).toString('hex')}`,
      digest: randomBytes(32).toString('hex'),
    }));
    await db.transaction().execute(async (trx) => {
      await trx
        .insertInto('workflows')
        .values(rows.map((r) => workflowRow(r.workflowId, 'act', 'completed', at)))
        .execute();
      await trx
        .insertInto('proposals')
        .values(rows.map((r) => proposalRow(r, 'issue_refund', '0'.repeat(64), 'valid', at)))
        .execute();
      await trx
        .insertInto('actions')
        .values(
          rows.map((r) =>
            refundActionRow(
              r,
              { orderId: r.orderId, amountCents: cents, reason: 'earlier refund' },
              { decision: 'ALLOW', ruleId: 'ALL', status: 'succeeded', at },
            ),
          ),
        )
        .execute();
    });
  }
}

/**
 * Moves every refund recorded in the last day two days back, its decision and its claim (a refund
 * that ran is in the windows from its claim, ADR 0682), so the next section starts with empty
 * rolling windows (R5 user 24 h, R6 agent 1 h). Per-order sums (R4, R7) are unaffected.
 */
export async function ageRefunds(db: Db): Promise<void> {
  await sql`UPDATE actions SET created_at = created_at - interval '2 days'
    WHERE tool = 'issue_refund' AND created_at > now() - interval '1 day'`.execute(db);
  await sql`UPDATE operations SET created_at = created_at - interval '2 days'
    WHERE tool = 'issue_refund' AND created_at > now() - interval '1 day'`.execute(db);
}

/** States a seeded run is left in once the stand-in agent loop took its result. */
const OPEN_SEEDED_STATES = ['received', 'investigating', 'awaiting_approval', 'executing'] as const;

/**
 * Ends seeded runs the benchmark is done with (`workflowIds`): state `completed`, as the agent
 * loop would after its next turn. Two kinds: runs whose result the stand-in agent loop took, and
 * runs seeded for a time-boxed loop that ended before firing them. Left open, either is what the
 * executor's watchdog exists to find — a run whose result job finished without progress, or a
 * proposal that was never enqueued — and past the state's liveness bound (120 s) every pass
 * re-drives it: later sections then paid for re-driven results and for unfired proposals run
 * in bulk, which disturbed every figure measured after the first two minutes. A run another
 * writer already ended is left alone. One statement per call (ids are bind parameters: up to
 * Postgres's 65,535; the benchmark's largest list is about 1,500). A call that failed on the
 * benchmark's side (a result that never came) leaves its run live: `meta.liveRuns` counts them.
 */
export async function endSeededRuns(db: Db, workflowIds: string[]): Promise<void> {
  if (!workflowIds.length) return;
  await db
    .updateTable('workflows')
    .set({ state: 'completed', updated_at: new Date(), next_step: 'Benchmark run: ended by the benchmark.' })
    .where('id', 'in', workflowIds)
    .where('state', 'in', [...OPEN_SEEDED_STATES])
    .execute();
}

const sha256 = (text: string): string => createHash('sha256').update(text).digest('hex');

/** Splits `xs` into arrays of at most `size`. */
export function chunks<T>(xs: T[], size: number): T[][] {
  const out: T[][] = [];
  for (let i = 0; i < xs.length; i += size) out.push(xs.slice(i, i + size));
  return out;
}
