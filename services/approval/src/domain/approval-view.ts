import { z } from 'zod';
import { sql } from 'kysely';
import type { Db } from '@gatehouse/ledger';
import type { ApprovalPage, ApprovalView } from '@gatehouse/contracts';
import { authorityRefusal, lateRefusal } from './authority.ts';

/** Selects approvals joined with their action, scoped to a tenant. */
export function selectApprovals(db: Db, tenant: string) {
  return db
    .selectFrom('approvals as p')
    .innerJoin('actions as a', 'a.id', 'p.action_id')
    .innerJoin('workflows as w', 'w.id', 'p.workflow_id')
    .select([
      'w.state as workflow_state',
      'p.id',
      'p.workflow_id',
      'p.tool',
      'a.target',
      'a.arguments',
      'a.facts',
      'p.requester',
      'p.rule_id',
      'p.action_version',
      'p.action_digest',
      'p.policy_revision',
      'p.amount_cents',
      'p.status',
      'p.expires_at',
      'p.tenant',
      'p.region',
      'p.approver_role',
      'p.same_region',
    ])
    .where('p.tenant', '=', tenant);
}

type Row = Awaited<ReturnType<ReturnType<typeof selectApprovals>['execute']>>[number];

/**
 * Turns a row into the trusted view for `viewerId` (amounts also shown in currency units); the
 * view's shape is `ApprovalViewSchema` of packages/contracts/src/api/approval.ts. A pending
 * approval is decidable when the viewer has the authority and it is not late (its run ended, or
 * it expired: `lateRefusal`, what the decision answers 410 with).
 */
export function toView(r: Row, viewerId: string): ApprovalView {
  const args: Record<string, unknown> = { ...r.arguments };
  if (typeof args.amountCents === 'number') args.amount = (args.amountCents / 100).toFixed(2);
  const authority = authorityRefusal(viewerId, r.tenant, {
    tenant: r.tenant,
    region: r.region,
    requester: r.requester,
    amountCents: r.amount_cents,
    approverRole: r.approver_role,
    sameRegion: r.same_region,
  });
  const refusal =
    authority ?? (r.status === 'pending' ? (lateRefusal({ expiresAt: r.expires_at }, r.workflow_state)?.reason ?? null) : null);
  return {
    approvalId: r.id,
    workflowId: r.workflow_id,
    tool: r.tool,
    target: r.target,
    arguments: args,
    orderFacts: r.facts,
    requester: r.requester,
    tenant: r.tenant,
    approverRole: r.approver_role,
    singleUse: true,
    ruleId: r.rule_id,
    actionVersion: r.action_version,
    actionDigest: r.action_digest,
    policyRevision: r.policy_revision,
    amountCents: r.amount_cents,
    status: r.status,
    expiresAt: new Date(r.expires_at).toISOString(),
    canDecide: refusal === null && r.status === 'pending',
    refusal,
  };
}

const CURSOR_PREFIX = 'a1:';
const UUID = z.uuid();

/** The opaque cursor resuming after approval `id` (base64url; clients must not read it). */
export function encodeCursor(id: string): string {
  return Buffer.from(`${CURSOR_PREFIX}${id}`).toString('base64url');
}

/** The approval id a cursor resumes after, or undefined when it is not one {@link encodeCursor} made. */
export function decodeCursor(cursor: string): string | undefined {
  if (!/^[A-Za-z0-9_-]+$/.test(cursor)) return undefined;
  const text = Buffer.from(cursor, 'base64url').toString('utf8');
  if (!text.startsWith(CURSOR_PREFIX)) return undefined;
  const id = text.slice(CURSOR_PREFIX.length);
  return UUID.safeParse(id).success ? id : undefined;
}

/**
 * The approvals of `tenant` with `status` in page order — (created_at, id) — after the approval
 * `after` (all when null): the keyset every page of approvals reads (the API's and the inbox's).
 * The caller adds its `limit`.
 */
export function approvalsAfter(db: Db, tenant: string, status: ApprovalView['status'], after: string | null) {
  let query = selectApprovals(db, tenant).where('p.status', '=', status);
  if (after) query = query.where(sql<boolean>`(p.created_at, p.id) > (SELECT created_at, id FROM approvals WHERE id = ${after})`);
  return query.orderBy('p.created_at').orderBy('p.id');
}

/**
 * Whether `id` names an approval of `tenant`: the check every page cursor passes before it places
 * a page (the API refuses another tenant's cursor, ADR 0182; the inbox shows its first page, ADR 0758).
 * Another tenant's id would place the page by that approval's creation time and tell whether it exists.
 */
export async function isApprovalOfTenant(db: Db, id: string, tenant: string): Promise<boolean> {
  const row = await db.selectFrom('approvals').select('id').where('id', '=', id).where('tenant', '=', tenant).executeTakeFirst();
  return row !== undefined;
}

/** Rows one query of a page reads, whatever the page's limit (the largest page, so one query fills any page of a status shown whole). */
const SCAN_BATCH = 100;

/**
 * Rows one page request examines at most (docs/decisions/0722-a-page-request-examines-a-bounded-number-of-rows.md):
 * past it the page ends, short or empty, with a `nextCursor` after the last row examined.
 */
export const DEFAULT_SCAN_BOUND = 1000;

/**
 * A page of the approvals of the viewer's tenant with `status`, in (created_at, id) order after
 * the approval `after` (keyset pagination: no duplicates or gaps while rows are added). Pending
 * approvals are filtered to what the viewer may decide; the page is filled past filtered rows,
 * reading {@link SCAN_BATCH} rows a query and examining at most `scanBound` rows (default
 * {@link DEFAULT_SCAN_BOUND}): a page that reaches the bound ends there with a `nextCursor`, so
 * approvals the viewer may not decide cost a request a bounded number of reads (ADR 0722).
 * Resolves null when `after` is not an approval of the viewer's tenant.
 */
export async function listApprovalPage(
  db: Db,
  viewer: { sub: string; tenant: string },
  q: { status: ApprovalView['status']; limit: number; after: string | null; scanBound?: number },
): Promise<ApprovalPage | null> {
  if (q.after && !(await isApprovalOfTenant(db, q.after, viewer.tenant))) return null;
  const batch = (after: string | null) => approvalsAfter(db, viewer.tenant, q.status, after).limit(SCAN_BATCH).execute();
  const bound = q.scanBound ?? DEFAULT_SCAN_BOUND;
  const approvals: ApprovalView[] = [];
  let position = q.after;
  for (let examined = 0; ;) {
    const rows = await batch(position);
    for (const r of rows) {
      const view = toView(r, viewer.sub);
      if (q.status !== 'pending' || view.canDecide) {
        // One more visible row exists: the next page starts after the last row examined.
        if (approvals.length === q.limit) return { approvals, nextCursor: encodeCursor(position!) };
        approvals.push(view);
      }
      position = r.id;
      // The request has read its share: the rest waits for the next page (ADR 0722).
      if (++examined >= bound) return { approvals, nextCursor: encodeCursor(position) };
    }
    if (rows.length < SCAN_BATCH) return { approvals, nextCursor: null };
  }
}
