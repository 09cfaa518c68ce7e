import type { ApprovalView } from '@gatehouse/contracts';

/** Escapes text for HTML element content and attribute values. Everything shown goes through it. */
export function escapeHtml(value: unknown): string {
  return String(value).replace(/[&<>"'`]/g, (c) => `&#${c.charCodeAt(0)};`);
}

const STYLE = `body{font:15px/1.4 system-ui,sans-serif;margin:2rem;max-width:60rem;color:#1b1f24}
h1{font-size:1.4rem}.card{border:1px solid #d0d7de;border-radius:8px;padding:1rem;margin:1rem 0}
dl{display:grid;grid-template-columns:12rem 1fr;gap:.25rem 1rem;margin:0}dt{color:#57606a}
code{font-size:.85em;word-break:break-all}.note{color:#9a6700}.flash{background:#dafbe1;padding:.5rem;border-radius:6px}
button{font-size:1rem;padding:.4rem 1rem;margin-right:.5rem}`;

/** A whole page; `body` must already be escaped. CSP forbids scripts and inline handlers. */
export function page(title: string, body: string): string {
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${escapeHtml(title)}</title><style>${STYLE}</style></head><body>${body}</body></html>`;
}

/** Sign-in page: local mode lists users of world.json; otherwise a bearer token is pasted. */
export function signInPage(users: Array<{ id: string; role: string; region?: string }> | null, error?: string): string {
  const chooser = users
    ? `<label>User <select name="userId">${users.map((u) => `<option value="${escapeHtml(u.id)}">${escapeHtml(`${u.id} (${u.role}${u.region ? `, ${u.region}` : ''})`)}</option>`).join('')}</select></label>`
    : `<label>Bearer token <input name="token" type="password" size="60"></label>`;
  return page(
    'Sign in — Gatehouse approvals',
    `<h1>Gatehouse approvals</h1>${error ? `<p class="note">${escapeHtml(error)}</p>` : ''}<form method="post" action="/inbox/session">${chooser} <button type="submit">Sign in</button></form>`,
  );
}

function fields(v: ApprovalView): string {
  const f = v.orderFacts;
  const cents = (x: unknown) => (typeof x === 'number' ? (x / 100).toFixed(2) : '—');
  const common: Array<[string, unknown]> = [
    ['Requested by (actor)', v.requester],
    ['Tenant', v.tenant],
    ['Rule', v.ruleId],
    ['Policy revision', v.policyRevision],
    ['Action version', v.actionVersion],
    ['Approval id', v.approvalId],
    ['Expires', v.expiresAt],
    ['Single use', v.singleUse ? 'yes' : 'no'],
  ];
  // A change schedule (docs/product/users-and-tools.md#change-pack): action, plan, window, environment, effect and rollback.
  const rows: Array<[string, unknown]> =
    v.tool === 'schedule_change'
      ? [
          ['Action', v.tool],
          ['Plan', v.target],
          ['Change', f.changeId ?? '—'],
          ['Service', f.service ?? '—'],
          ['Window', v.arguments.window],
          ['Note (model text)', v.arguments.note ?? '—'],
          ['Environment', f.environment ?? '—'],
          ['Effect', f.effect ?? '—'],
          ['Rollback', f.rollback ?? '—'],
          ...common,
        ]
      : [
          ['Tool', v.tool],
          ['Order', v.target],
          ...Object.entries(v.arguments)
            .filter(([k]) => k !== 'amountCents' && k !== 'orderId')
            .map(([k, val]) => [k === 'amount' ? 'Amount' : k === 'reason' ? 'Reason (model text)' : k, val] as [string, unknown]),
          ['Order paid', cents(f.orderPaidCents)],
          ['Refunds already recorded', cents(f.priorRefundsOnOrderCents)],
          ...common,
        ];
  return `<dl>${rows.map(([k, val]) => `<dt>${escapeHtml(k)}</dt><dd>${escapeHtml(val)}</dd>`).join('')}<dt>Digest</dt><dd><code>${escapeHtml(v.actionDigest)}</code></dd></dl>`;
}

/** The approver's list: decidable approvals get approve/deny forms bound to version and digest. */
export function inboxPage(user: string, views: ApprovalView[], csrf: string, flash?: string): string {
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
    `<h1>Pending approvals</h1><p>Signed in as <strong>${escapeHtml(user)}</strong> · <a href="/inbox/signout">sign out</a></p>${flash ? `<p class="flash">${escapeHtml(flash)}</p>` : ''}${cards.join('') || '<p>Nothing is waiting for a decision.</p>'}`,
  );
}
