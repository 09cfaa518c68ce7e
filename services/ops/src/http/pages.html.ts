import type { StuckRun } from '@gatehouse/ledger';
import { escapeHtml, pageFrame, signInForm, type ChooserUser } from '@gatehouse/platform';
import type { UnknownOperationRow, WorkflowOverview, Worklist } from '@gatehouse/contracts';
import type { QueueEntry } from '../domain/queue-catalog.ts';

const STYLE = `body{font:14px/1.4 system-ui,sans-serif;margin:1.5rem;color:#1b1f24}
h1{font-size:1.35rem}h2{font-size:1.1rem;margin-top:2rem}nav a{margin-right:1rem}
table{border-collapse:collapse;margin:.5rem 0;width:100%}th,td{border:1px solid #d0d7de;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f6f8fa}td.n{text-align:right;font-variant-numeric:tabular-nums}code{font-size:.85em;word-break:break-all}
.note{color:#9a6700}.empty{color:#57606a}.counts td a{font-weight:600}`;

/** A whole page in the dashboard's style (the shared frame); `body` must already be escaped. */
export function page(title: string, body: string): string {
  return pageFrame(title, body, STYLE);
}

/** Sign-in page: local mode lists the users of world.json; otherwise a bearer token is pasted. */
export function signInPage(users: ChooserUser[] | null, error?: string): string {
  return page(
    'Sign in — Gatehouse operations',
    `<h1>Gatehouse operations</h1><p>On-call operators only.</p>${error ? `<p class="note">${escapeHtml(error)}</p>` : ''}${signInForm('/session', users)}`,
  );
}

/** The 503 page of a dashboard page the ledger did not answer within `ms` milliseconds. */
export function unansweredPage(ms: number): string {
  return page(
    'Not answering — Gatehouse operations',
    `<h1>The ledger is not answering</h1><p>No answer within ${escapeHtml(Math.round(ms / 1000))} s: Postgres is not answering (stopped, hung or overloaded). <code>./run stack status</code> shows what each service waits for; reload this page once it answers.</p>`,
  );
}

/**
 * The 503 page of a dashboard page whose dependency refused or dropped the connection:
 * `what` names what is unreachable, `check` what to run to see it (the platform's dependencyCheckHint).
 */
export function unreachablePage(what: 'Postgres' | 'Redis', check: string): string {
  return page(
    `${what} unreachable — Gatehouse operations`,
    `<h1>${escapeHtml(what)} is unreachable</h1><p>This page needs ${escapeHtml(what)}, which did not accept the connection or dropped it, so it cannot be shown; nothing was changed.</p>` +
      `<p>What to check: <code>${escapeHtml(check)}</code>. <code>GET /readyz</code> of this service and <code>./run stack status</code> show each dependency's state; reload this page once it answers.</p>`,
  );
}

/** The page answered to a signed-in caller who is not an operator. */
export function refusedPage(user: string): string {
  return page(
    'Refused — Gatehouse operations',
    `<h1>Refused</h1><p>${escapeHtml(user)} is not an operator; the operations dashboard is for the on-call operator role only.</p><p><a href="/signout">Sign out</a></p>`,
  );
}

function table(headers: string[], rows: unknown[][], empty: string, numeric: number[] = []): string {
  if (!rows.length) return `<p class="empty">${escapeHtml(empty)}</p>`;
  const head = `<tr>${headers.map((h) => `<th>${escapeHtml(h)}</th>`).join('')}</tr>`;
  const body = rows
    .map(
      (r) =>
        `<tr>${r.map((v, i) => `<td${numeric.includes(i) ? ' class="n"' : ''}>${v === null || v === undefined ? '—' : escapeHtml(v)}</td>`).join('')}</tr>`,
    )
    .join('');
  return `<table>${head}${body}</table>`;
}

/** Money in integer cents as a decimal string (`12345` → `123.45`). */
function cents(value: number | null): string | null {
  return value === null
    ? null
    : `${value < 0 ? '-' : ''}${Math.trunc(Math.abs(value) / 100)}.${String(Math.abs(value) % 100).padStart(2, '0')}`;
}

/** Bounded, single-line JSON of a detail value, shown as text. */
function brief(value: unknown, max = 240): string {
  const s = value === null || value === undefined ? '' : typeof value === 'string' ? value : JSON.stringify(value);
  return s.length > max ? `${s.slice(0, max)}…` : s;
}

/** What the overview page shows. */
export interface OverviewView {
  operator: string;
  stateFilter: string | null;
  workflows: WorkflowOverview;
  /** Live runs past their no-progress bound (the ledger's `listStuckRuns`). */
  stuck: StuckRun[];
  unknown: UnknownOperationRow[];
  worklist: Worklist;
  queues: Array<QueueEntry & { counts: Record<string, number> | null }>;
}

/**
 * The operations overview: workflows by state (counts, each a filter link, and the recent list
 * with state, stop reason and next step), `failed_unknown` operations, the open reconciliation
 * worklist and the queues of every release with their job counts. Every value is escaped; no
 * model-written text is read for this page.
 */
export function overviewPage(v: OverviewView): string {
  const counts = countsTable(v.workflows.counts);
  const recent = table(
    ['workflow', 'tenant', 'ticket', 'pack', 'state', 'stop reason', 'next step', 'release', 'updated'],
    v.workflows.recent.map((w) => [w.id, w.tenant, w.ticketId, w.pack, w.state, w.stopReason, w.nextStep, w.release, w.updatedAt]),
    'No workflows.',
  );
  const stuck = stuckTable(v.stuck);
  const unknown = table(
    ['operation key', 'tool', 'workflow', 'workflow state', 'release', 'attempts', 'error', 'since'],
    v.unknown.map((o) => [o.key, o.tool, o.workflowId, o.workflowState, o.release, o.attempts, o.error, o.since]),
    'No failed_unknown operations.',
    [5],
  );
  const worklist = worklistTable(v.worklist);
  const queues = queuesTable(v.queues);
  const filter = v.stateFilter ? ` in state ${escapeHtml(v.stateFilter)} (<a href="/ops">all</a>)` : '';
  return page(
    'Gatehouse operations',
    `<h1>Gatehouse operations</h1>
<nav><a href="/ops">Overview</a><a href="/queues">Queues (bull-board)</a><a href="/api/overview">JSON</a><a href="/signout">Sign out</a> <span class="empty">signed in as ${escapeHtml(v.operator)}</span></nav>
<section id="workflows"><h2>Workflows by state</h2>${counts}<h3>Recent workflows${filter}</h3>${recent}</section>
<section id="stuck"><h2>Stuck runs (${escapeHtml(v.stuck.length)})</h2><p>Live runs with no progress past their state's bound; the executor's watchdog re-drives the jobs they wait for.</p>${stuck}</section>
<section id="failed-unknown"><h2>failed_unknown operations (${escapeHtml(v.unknown.length)})</h2><p>Effects whose outcome is unknown: never retried automatically; resolve with <code>gatehouse reconcile</code>.</p>${unknown}</section>
<section id="worklist"><h2>Reconciliation worklist (${escapeHtml(v.worklist.items.length)} open)</h2>${worklist}</section>
<section id="queues"><h2>Queues of every release</h2>${queues}</section>`,
  );
}

/** The workflow counts by state: one row of headers, one of counts, each a link filtering the overview by that state. */
function countsTable(counts: WorkflowOverview['counts']): string {
  return `<table class="counts"><tr>${Object.keys(counts)
    .map((s) => `<th>${escapeHtml(s)}</th>`)
    .join('')}</tr><tr>${Object.entries(counts)
    .map(([s, n]) => `<td class="n"><a href="/ops?state=${encodeURIComponent(s)}">${escapeHtml(n)}</a></td>`)
    .join('')}</tr></table>`;
}

/** The stuck runs' table: age and bound in seconds, what each waits for and the watchdog's last re-drive. */
function stuckTable(stuck: StuckRun[]): string {
  return table(
    ['workflow', 'state', 'age s', 'bound s', 'waiting for', 'watchdog'],
    stuck.map((r) => [
      r.workflowId,
      r.state,
      Math.round(r.ageMs / 1000),
      Math.round(r.boundMs / 1000),
      r.waitingFor.join(', ') || 'nothing can drive it',
      r.watchdog ? `${r.watchdog.count} re-drive(s), last ${r.watchdog.outcome} at ${new Date(r.watchdog.atMs).toISOString()}` : 'none yet',
    ]),
    'No stuck runs: every live run progressed within its bound or waits on a person.',
    [2, 3],
  );
}

/** The open reconciliation worklist's table, or the reason it could not be read (a note). */
function worklistTable(worklist: Worklist): string {
  return worklist.available
    ? table(
        [
          'class',
          'owner',
          'status',
          'subject',
          'tenant',
          'operation key',
          'workflow',
          'tool',
          'order',
          'amount',
          'ledger ref',
          'remediation',
          'detail',
          'since',
          'last seen',
          'item',
        ],
        worklist.items.map((i) => [
          i.class,
          i.owner,
          i.status,
          i.subject,
          i.tenant,
          i.operationKey,
          i.workflowId,
          i.tool,
          i.orderId,
          cents(i.amountCents),
          i.ledgerRef,
          i.remediation,
          brief(i.detail),
          i.createdAt,
          i.lastSeenAt,
          i.id,
        ]),
        'The worklist is empty: no unresolved differences.',
        [9],
      )
    : `<p class="note">${escapeHtml(worklist.reason)}</p>`;
}

/** The queues of every release with their job counts (— where Redis did not answer), each linked to its bull-board page. */
function queuesTable(queues: OverviewView['queues']): string {
  const queueRows = queues.map((q) => [
    q.name,
    q.release,
    q.sources.join(', '),
    q.counts?.waiting,
    q.counts?.active,
    q.counts?.delayed,
    q.counts?.failed,
    q.counts?.completed,
  ]);
  return queues.length
    ? `<table><tr>${['queue', 'release', 'known from', 'waiting', 'active', 'delayed', 'failed', 'completed'].map((h) => `<th>${h}</th>`).join('')}</tr>${queueRows
        .map(
          (r, i) =>
            `<tr><td><a href="/queues/queue/${encodeURIComponent(queues[i]!.name)}">${escapeHtml(r[0])}</a></td>${r
              .slice(1)
              .map((c, j) => `<td${j >= 2 ? ' class="n"' : ''}>${c === undefined || c === null ? '—' : escapeHtml(c)}</td>`)
              .join('')}</tr>`,
        )
        .join('')}</table>`
    : '<p class="empty">No queues known.</p>';
}
