import type { Response } from 'express';

/**
 * HTML of the server-rendered pages (the approval inbox, the ops dashboard): escaping, the page
 * frame and the headers every such page carries (docs/decisions/0290-one-error-tree-and-browser-session.md).
 */

/** Escapes text for HTML element content and attribute values (`& < > " ' \``). Everything shown goes through it. */
export function escapeHtml(value: unknown): string {
  return String(value).replace(/[&<>"'`]/g, (c) => `&#${c.charCodeAt(0)};`);
}

/** The Content-Security-Policy of every server-rendered page: no script at all, inline styles, forms to this origin only, never framed. */
export const PAGE_CSP = "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'";

/** Sets the headers of a server-rendered page: the CSP above, `nosniff`, no referrer. */
export function setPageHeaders(res: Response): void {
  res.setHeader('content-security-policy', PAGE_CSP);
  res.setHeader('x-content-type-options', 'nosniff');
  res.setHeader('referrer-policy', 'no-referrer');
}

/**
 * A whole page: `<!doctype html>`, UTF-8, the escaped `title`, the surface's `style` sheet and
 * `body`, which must already be escaped (build it with {@link escapeHtml}). No script.
 */
export function pageFrame(title: string, body: string, style: string): string {
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>${escapeHtml(title)}</title><style>${style}</style></head><body>${body}</body></html>`;
}

/** A user offered by the local sign-in chooser. */
export interface ChooserUser {
  id: string;
  role: string;
  region?: string;
}

/**
 * The sign-in form posted to `action`: local mode lists the users of world.json (a chooser,
 * `userId`); otherwise a bearer token is pasted (`token`, a password field). Escaped.
 */
export function signInForm(action: string, users: ChooserUser[] | null): string {
  const chooser = users
    ? `<label>User <select name="userId">${users.map((u) => `<option value="${escapeHtml(u.id)}">${escapeHtml(`${u.id} (${u.role}${u.region ? `, ${u.region}` : ''})`)}</option>`).join('')}</select></label>`
    : `<label>Bearer token <input name="token" type="password" size="60"></label>`;
  return `<form method="post" action="${escapeHtml(action)}">${chooser} <button type="submit">Sign in</button></form>`;
}
