import { escapeHtml, pageFrame, signInForm, type ChooserUser } from '@gatehouse/platform';
import { RELEASE_OVERRIDE_TOOL, type ApprovalView } from '@gatehouse/contracts';

const STYLE = `body{font:15px/1.4 system-ui,sans-serif;margin:2rem;max-width:60rem;color:#1b1f24}
h1{font-size:1.4rem}.card{border:1px solid #d0d7de;border-radius:8px;padding:1rem;margin:1rem 0}
dl{display:grid;grid-template-columns:12rem 1fr;gap:.25rem 1rem;margin:0}dt{color:#57606a}
code{font-size:.85em;word-break:break-all}.note{color:#9a6700}.flash{background:#dafbe1;padding:.5rem;border-radius:6px}
button{font-size:1rem;padding:.4rem 1rem;margin-right:.5rem}`;

/** A whole page in the inbox's style (the shared frame); `body` must already be escaped. */
export function page(title: string, body: string): string {
  return pageFrame(title, body, STYLE);
}

/**
 * The 503 page of an inbox request the ledger did not answer within `ms` milliseconds. A decision
 * sent then may still be recorded once the ledger answers: the approver is told to look, not told
 * it failed.
 */
export function inboxUnanswered(ms: number): string {
  return page(
    'Not answering',
    `<h1>The approval service is not answering</h1><p>No answer within ${escapeHtml(Math.round(ms / 1000))} s: the ledger is not answering. A decision you just sent may still be recorded — open <a href="/inbox/approvals">the inbox</a> again in a moment to see whether it is still pending.</p>`,
  );
}

/** Sign-in page: local mode lists users of world.json; otherwise a bearer token is pasted. */
export function signInPage(users: ChooserUser[] | null, error?: string): string {
  return page(
    'Sign in — Gatehouse approvals',
    `<h1>Gatehouse approvals</h1>${error ? `<p class="note">${escapeHtml(error)}</p>` : ''}${signInForm('/inbox/session', users)}`,
  );
}

type Rows = Array<[string, unknown]>;

/** A change schedule (docs/product/users-and-tools.md#change-pack): action, plan, window, environment, effect and rollback. */
function scheduleRows(v: ApprovalView): Rows {
  const f = v.orderFacts;
  return [
    ['Action', v.tool],
    ['Plan', v.target],
    ['Change', f.changeId ?? '—'],
    ['Service', f.service ?? '—'],
    ['Window', v.arguments.window],
    ['Note (model text)', v.arguments.note ?? '—'],
    ['Environment', f.environment ?? '—'],
    ['Effect', f.effect ?? '—'],
    ['Rollback', f.rollback ?? '—'],
  ];
}

/**
 * A release override (docs/decisions/0230-two-person-release-changes.md): the kind, exactly what
 * it covers, the requester's reason, and the release as its manifest names it — or, for a staged
 * re-enable's override (docs/decisions/0310-staged-reenable.md), the tool, its stages and evidence;
 * for a lost audit key's (docs/decisions/0717-audit-key-rotation.md), both fingerprints.
 */
function overrideRows(v: ApprovalView): Rows {
  const f = v.orderFacts;
  const covers = Array.isArray(v.arguments.covers) ? (v.arguments.covers as unknown[]).map(String) : [];
  const kind = v.arguments.kind;
  const [label, subject] =
    kind === 'reenable' ? ['staged re-enable', 'Tool'] : kind === 'audit_key' ? ['audit key', 'Subject'] : ['release', 'Release'];
  const head: Rows = [
    ['Action', `${label} override: ${String(kind)}`],
    [subject, kind === 'audit_key' ? 'the audit anchoring key: the lost key hands over to the new one without its signature' : v.target],
    ...covers.map((c, i): [string, unknown] => [i === 0 ? 'Covers' : '', c]),
    ['Reason (requester text)', v.arguments.reason],
  ];
  if (kind === 'reenable') return [...head, ['Active release now', f.activeRelease ?? '—']];
  if (kind === 'audit_key') return [...head, ['Newest anchor (seq)', f.newestAnchorSeq ?? '—']];
  return [
    ...head,
    ['Model', f.model ?? '—'],
    ['Policy bundles', f.policy ?? '—'],
    ['Schema version', f.schemaVersion ?? '—'],
    ['Manifest sha256', f.manifestSha256 ?? '—'],
    ['Active release now', f.activeRelease ?? '—'],
  ];
}

/** A support action: the order, its arguments in human units, and what the order paid and refunded. */
function supportRows(v: ApprovalView): Rows {
  const f = v.orderFacts;
  const cents = (x: unknown) => (typeof x === 'number' ? (x / 100).toFixed(2) : '—');
  return [
    ['Tool', v.tool],
    ['Order', v.target],
    ...Object.entries(v.arguments)
      .filter(([k]) => k !== 'amountCents' && k !== 'orderId')
      .map(([k, val]) => [k === 'amount' ? 'Amount' : k === 'reason' ? 'Reason (model text)' : k, val] as [string, unknown]),
    ['Order paid', cents(f.orderPaidCents)],
    ['Refunds already recorded', cents(f.priorRefundsOnOrderCents)],
  ];
}

function fields(v: ApprovalView): string {
  const common: Rows = [
    ['Requested by (actor)', v.requester],
    ['Tenant', v.tenant],
    ['Rule', v.ruleId],
    ['Policy revision', v.policyRevision],
    ['Action version', v.actionVersion],
    ['Approval id', v.approvalId],
    ['Expires', v.expiresAt],
    ['Single use', v.singleUse ? 'yes' : 'no'],
  ];
  const own = v.tool === 'schedule_change' ? scheduleRows(v) : v.tool === RELEASE_OVERRIDE_TOOL ? overrideRows(v) : supportRows(v);
  const rows = [...own, ...common];
  return `<dl>${rows.map(([k, val]) => `<dt>${escapeHtml(k)}</dt><dd>${escapeHtml(val)}</dd>`).join('')}<dt>Digest</dt><dd><code>${escapeHtml(v.actionDigest)}</code></dd></dl>`;
}

/**
 * The approver's list, one page of it: decidable approvals get approve/deny forms bound to version
 * and digest; `next`, when more are waiting, is the cursor its "next page" link carries (ADR 0723).
 */
export function inboxPage(user: string, views: ApprovalView[], csrf: string, flash?: string, next: string | null = null): string {
  const cards = views.map((v) => {
    const form = v.canDecide
      ? `<form method="post" action="/inbox/approvals/${escapeHtml(v.approvalId)}/decision">
<input type="hidden" name="csrf" value="${escapeHtml(csrf)}"><input type="hidden" name="actionVersion" value="${escapeHtml(v.actionVersion)}"><input type="hidden" name="actionDigest" value="${escapeHtml(v.actionDigest)}">
<label>Reason <input name="reason" maxlength="500"></label>
<button type="submit" name="decision" value="approve">Approve version ${escapeHtml(v.actionVersion)}</button><button type="submit" name="decision" value="deny">Deny</button></form>`
      : `<p class="note">You cannot decide this approval: ${escapeHtml(v.refusal ?? v.status)}.</p>`;
    return `<section class="card" data-approval="${escapeHtml(v.approvalId)}"><h2>${escapeHtml(v.tool)} on ${escapeHtml(v.target)}</h2>${fields(v)}${form}</section>`;
  });
  return page(
    'Pending approvals — Gatehouse',
    `<h1>Pending approvals</h1><p>Signed in as <strong>${escapeHtml(user)}</strong> · <a href="/inbox/signout">sign out</a></p>${flash ? `<p class="flash">${escapeHtml(flash)}</p>` : ''}${cards.join('') || '<p>Nothing is waiting for a decision.</p>'}${next ? `<p class="next"><a href="/inbox/approvals?after=${escapeHtml(next)}">More are waiting: the next page →</a></p>` : ''}`,
  );
}
