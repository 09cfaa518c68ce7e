import { createLogger, type BaseEnv } from '@gatehouse/platform';
import type { Db } from '@gatehouse/ledger';
import { UsageError } from './commands.ts';
import { parseCohort } from './release-commands.ts';
import {
  advanceReenable,
  DEFAULT_MAX_BOUND,
  formatCohort,
  reenableStatus,
  requestReenableOverride,
  requireKnownTool,
  LEFT_IN_OUTBOX,
  publishFromCli,
  type Operator,
  type ReenableStatus,
} from '@gatehouse/operations';

/** Runs `fn` as a verified operator (see `opsCommand` in main.ts). */
type AsOperator = (command: string, fn: (db: Db, op: Operator) => Promise<number>) => Promise<number>;

/** The flags the `reenable` commands read. */
export interface ReenableFlags {
  cohort?: string;
  'max-bound'?: string;
  reason?: string;
  approve?: string;
  json?: boolean;
}

/**
 * Parses `--max-bound` (default {@link DEFAULT_MAX_BOUND}).
 * @throws UsageError unless it is a number in (0, 1].
 */
function maxBoundOf(text: string | undefined): number {
  if (text === undefined) return DEFAULT_MAX_BOUND;
  const v = Number(text);
  if (!(v > 0 && v <= 1)) throw new UsageError(`--max-bound must be a number in (0, 1], got ${text}`);
  return v;
}

/** One tool's status as lines. */
function statusLines(s: ReenableStatus): string[] {
  const cohort = s.cohort ? ` cohort ${formatCohort(s.cohort)}` : '';
  const lines = [`${s.tool}: ${s.stage}${cohort} since ${s.since.toISOString()} by ${s.by}${s.reason ? ` — ${s.reason}` : ''}`];
  if (s.evidence)
    lines.push(
      `  evidence: n=${s.evidence.n} clean, ${s.evidence.failures} not clean, 95 % bound on the failure rate ${s.evidence.bound.toFixed(4)} (${s.evidence.tools.join(', ') || 'no read tool'})`,
    );
  lines.push(`  next: ${s.next} — needs ${s.needs}`);
  return lines;
}

/**
 * `gatehouse reenable status|advance|override` (docs/decisions/0310-staged-reenable.md,
 * docs/runbooks/reenable.md): every command needs an operator token and is audited.
 * Exit codes: 0 done; 1 refused (not contained, no cohort, not enough evidence).
 * @throws UsageError for a missing tool or a malformed flag (exit 2).
 * @throws UnknownTool (exit 2) for a tool no pack has, `status` included, before the token is read.
 */
export async function reenableCommand(
  command: string,
  tool: string | undefined,
  values: ReenableFlags,
  env: BaseEnv,
  asOperator: AsOperator,
  out: (line: string) => void,
): Promise<number> {
  const maxBound = maxBoundOf(values['max-bound']);
  const cohort = values.cohort ? parseCohort(values.cohort) : undefined;
  const actor = (op: Operator) => ({ operator: op.id, hmacKey: env.GATEHOUSE_AUDIT_HMAC_KEY });
  // Before the token: a typo is a usage error, never "not contained" (status). Advance and override
  // always have their tool (checkRequired, commands.ts); status without one lists every tool.
  if (tool !== undefined) requireKnownTool(tool);
  if (command === 'reenable status')
    return asOperator(command, async (db) => {
      const all = await reenableStatus(db, tool, maxBound);
      if (values.json) out(JSON.stringify({ maxBound, tools: all }, null, 2));
      else if (!all.length) out(tool ? `${tool} is not contained` : 'no tool is contained');
      else for (const s of all) for (const line of statusLines(s)) out(line);
      return 0;
    });
  if (command === 'reenable override')
    return asOperator(command, async (db, op) => {
      const o = await requestReenableOverride(db, { tool: tool!, cohort, reason: values.reason!, ...actor(op) });
      out(
        `override ${o.id} requested for ${tool} (${o.items.join('; ')}); another operator or a policy owner approves it in the approval inbox (or POST /v1/approvals/${o.id}/decision)`,
      );
      return 0;
    });
  return asOperator(command, async (db, op) => {
    const r = await advanceReenable(db, { tool: tool!, cohort, maxBound, reason: values.reason!, ...actor(op) });
    const published = await publishFromCli(env, db, r.rows, createLogger('cli'));
    const ev = r.evidence ? ` on n=${r.evidence.n} clean (bound ${r.evidence.bound.toFixed(4)})` : '';
    out(
      `${tool}: stage ${r.stage}${ev}${r.overrideId ? ` with override ${r.overrideId}` : ''}${r.rows.length ? `; ${r.rows.length} held action(s) released` : ''}`,
    );
    if (published === 'left_in_outbox') out(LEFT_IN_OUTBOX);
    return 0;
  });
}
