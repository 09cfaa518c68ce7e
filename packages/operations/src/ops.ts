import { sql } from 'kysely';
import { executionsQueue, Forbidden, Refused, UserError } from '@gatehouse/contracts';
import {
  actorHash,
  creditWait,
  endOpenReenableStage,
  heldByContainment,
  openReenableStages,
  enqueueInTransaction,
  inTransaction,
  lockContainment,
  lockCredentialEpochForBump,
  recordAudit,
  TERMINAL_STATES,
  transitionWorkflow,
  type Db,
  type OutboxRow,
  type Trx,
} from '@gatehouse/ledger';
import { allTools, findTool } from '@gatehouse/tools';
import { InvalidTokenError } from '@gatehouse/credentials';
import { isDirectoryOperator, verifyBearerToken, withRevocations, type BearerVerifier } from '@gatehouse/platform';

/** An ops command asked for something that cannot be meant (a typo): nothing ran. The CLI exits 2 (usage). */
export class OpsUsageError extends UserError {}

/** An ops command named a tool no pack has. */
export class UnknownTool extends OpsUsageError {
  constructor(tool: string) {
    super('unknown_tool', `unknown tool ${tool}: one of ${allTools.map((t) => t.name).join(', ')}`);
  }
}

/**
 * The one check that an ops command's tool exists (switches, staged re-enables).
 * @throws UnknownTool when no pack has a tool called `tool`.
 */
export function requireKnownTool(tool: string): void {
  if (!findTool(tool)) throw new UnknownTool(tool);
}

/** An ops command was refused: no token, an invalid one, or a caller without the operator role. */
export class OperatorRefused extends Forbidden {
  constructor(refusal: string, message: string) {
    super(refusal, message);
  }
}

/** The verified operator behind an ops command. */
export interface Operator {
  id: string;
  tenant: string;
}

/**
 * Verifies the bearer token of an ops command (a JWT checked like every HTTP service checks it:
 * HS256 with the local secret, or the JWKS in production) and requires the `operator` role in the
 * directory (world.json), not merely in the token.
 * Every accepted command is audited (`ops.command`) before it runs, and every refusal
 * (`ops.refused`, the caller's id hashed) before it is thrown. A revoked token is refused
 * (`token_revoked`, docs/decisions/0695-user-tokens-can-be-revoked.md).
 * @throws OperatorRefused when the token is missing, invalid, revoked or not an operator's.
 */
export async function authorizeOperator(
  db: Db,
  token: string | undefined,
  opts: { verifier: BearerVerifier; hmacKey: string; command: string },
): Promise<Operator> {
  let refusal: string;
  let caller: string | null = null;
  if (!token) refusal = 'missing_token';
  else {
    try {
      const claims = await verifyBearerToken(token, withRevocations(opts.verifier, db));
      caller = claims.sub;
      if (isDirectoryOperator(claims)) {
        await inTransaction(db, (trx) =>
          recordAudit(trx, {
            type: 'ops.command',
            service: 'cli',
            runId: null,
            actorHash: actorHash(opts.hmacKey, claims.sub),
            outcome: opts.command,
          }),
        );
        return { id: claims.sub, tenant: claims.tenant };
      }
      refusal = 'not_an_operator';
    } catch (err) {
      refusal = err instanceof InvalidTokenError ? err.reason : 'token_unverifiable'; // `invalid_token` or `token_revoked`
    }
  }
  await inTransaction(db, (trx) =>
    recordAudit(trx, {
      type: 'ops.refused',
      service: 'cli',
      runId: null,
      actorHash: caller ? actorHash(opts.hmacKey, caller) : null,
      outcome: `${opts.command}:${refusal}`,
    }),
  );
  throw new OperatorRefused(
    refusal,
    `${opts.command} refused (${refusal}): ops commands need an operator token — --token "$(gatehouse token --user ops-gus)" or GATEHOUSE_TOKEN`,
  );
}

/** `switch on` refused: the tool is coming back in stages (docs/decisions/0310-staged-reenable.md). */
export class StagedReenableOpen extends Refused {
  constructor(tool: string, stage: string) {
    super(
      'staged_reenable_open',
      `${tool} is being re-enabled in stages (stage ${stage}): advance it with "gatehouse reenable advance ${tool}${stage === 'read_only' ? ' --cohort <tenant:…|user:…>' : ''} --reason <why>" once its clean executions meet the bound, or ask another operator for "gatehouse reenable override ${tool}" (see gatehouse reenable status ${tool}); "gatehouse switch off ${tool}" ends the stages`,
    );
  }
}

/**
 * `gatehouse switch on|off TOOL`: read by the executor at the moment of execution
 * (docs/product/hard-cases.md#tool-switched-off-mid-run).
 * Switching on re-enqueues the held actions ({@link releaseHeld}). Switching off ends the tool's
 * open staged re-enable, if any (contained again: the stages start over).
 * Returns the rows to publish.
 * @throws StagedReenableOpen for `on` while a staged re-enable is open (it is `reenable advance`'s to finish).
 */
export async function setSwitch(db: Db, tool: string, enabled: boolean, operator: string, hmacKey: string): Promise<OutboxRow[]> {
  requireKnownTool(tool);
  return inTransaction(db, async (trx) => {
    // First, as every change of the tool's containment (ADR 0683): a concurrent `reenable advance`
    // cannot open a stage between this check and the write, nor deadlock with it.
    await lockContainment(trx, tool, 'exclusive');
    const [open] = await openReenableStages(trx, tool);
    if (enabled && open) throw new StagedReenableOpen(tool, open.stage);
    const ended = enabled ? null : await endOpenReenableStage(trx, tool);
    await writeSwitch(trx, tool, enabled, operator, hmacKey, ended ? `off;reenable_ended:${ended}` : undefined);
    return enabled ? releaseHeld(trx, tool) : [];
  });
}

/**
 * Writes `tool`'s switch and its `switch.changed` audit event (outcome `on`/`off`, or `outcome`), in `trx`.
 */
export async function writeSwitch(
  trx: Trx,
  tool: string,
  enabled: boolean,
  operator: string,
  hmacKey: string,
  outcome?: string,
): Promise<void> {
  // After every claim under way (ADR 0683): its time is then after theirs, and none claims after it unseen.
  await lockContainment(trx, tool, 'exclusive');
  await trx
    .insertInto('tool_switches')
    .values({ tool, enabled, changed_by: operator, changed_at: new Date() })
    .onConflict((oc) => oc.column('tool').doUpdateSet({ enabled, changed_by: operator, changed_at: new Date() }))
    .execute();
  await recordAudit(trx, {
    type: 'switch.changed',
    service: 'cli',
    runId: null,
    actorHash: actorHash(hmacKey, operator),
    tool,
    outcome: outcome ?? (enabled ? 'on' : 'off'),
  });
}

/**
 * Releases, in `trx`, the steps of `tool` that containment no longer holds (the switch on, or an
 * open cohort stage admitting their workflow — {@link heldByContainment}): every approved action
 * of that tool not yet claimed in a live workflow is re-enqueued through the outbox with a fresh
 * job id, on the workflow's current release (after a rollback and requeue, the restored one, whose
 * executor re-evaluates it), and its paused workflow resumes when nothing else holds it. The job
 * names the action's approval, approved or already `used` — a claim consumed it and its effect
 * was then held before a retry (ADR 0700); the claim takes a used approval of this same action as
 * its own earlier consumption. Returns the rows to publish.
 */
export async function releaseHeld(trx: Trx, tool: string): Promise<OutboxRow[]> {
  return releaseUnheld(trx, { tool }, { tool, outcome: 'tool_enabled' });
}

/** Which held steps {@link releaseUnheld} looks at: a tool's, or those of paused runs. */
type ReleaseScope = { tool: string } | { pausedRuns: true };

/** The `run.resumed` event of a run {@link releaseUnheld} resumes: the tool released (or null) and why. */
export interface ResumeReason {
  tool: string | null;
  outcome: string;
}

/**
 * The steps in `scope` that containment does not hold, re-enqueued in `trx` as {@link releaseHeld}
 * describes (their runs resumed when nothing else holds them, audited `run.resumed` with
 * `resumed`). Also the release of `gatehouse audit acknowledge-loss` (`pausedRuns`: the approved,
 * unclaimed steps of every paused run; ADR 0795). Returns the rows to publish.
 */
export async function releaseUnheld(trx: Trx, scope: ReleaseScope, resumed: ResumeReason): Promise<OutboxRow[]> {
  const unheld = trx
    .selectFrom('actions as a')
    .innerJoin('workflows as w', 'w.id', 'a.workflow_id')
    .leftJoin('approvals as p', (j) => j.onRef('p.action_id', '=', 'a.id').on('p.status', 'in', ['approved', 'used']))
    .select(['a.id', 'a.version', 'a.workflow_id', 'w.release_id', 'p.id as approval_id'])
    .leftJoin('operations as o', 'o.action_id', 'a.id');
  const held = await ('tool' in scope ? unheld.where('a.tool', '=', scope.tool) : unheld.where('w.state', '=', 'paused'))
    .where('a.status', '=', 'approved')
    .where('w.state', 'not in', TERMINAL_STATES)
    .where((eb) => eb.or([eb('o.key', 'is', null), eb('o.status', '=', 'pending')]))
    .where((eb) => eb.not(heldByContainment(sql.ref('a.tool'), sql.ref('w.tenant'), sql.ref('w.user_id'))))
    .execute();
  const rows: OutboxRow[] = [];
  for (const workflowId of new Set(held.map((a) => a.workflow_id))) await resumeIfNothingHeld(trx, workflowId, resumed);
  for (const a of held) {
    rows.push(
      await enqueueInTransaction(trx, executionsQueue, {
        release: a.release_id,
        workflowId: a.workflow_id,
        actionId: a.id,
        actionVersion: a.version,
        approvalId: a.approval_id,
        resumeSeq: Date.now(),
      }),
    );
  }
  return rows;
}

/**
 * After steps are released (`resumed`: `tool` switched on, or a lost audit tail acknowledged): a paused run whose held steps are all of tools now on (or admitted by
 * a cohort stage) resumes
 * (`executing`, audited `run.resumed`), and the time it was paused is credited to its deadline —
 * on-call's pause is not the run's working time (docs/product/invariants.md#bounds), counted once with approval waits
 * (`wait_credited_until`). A run with a step of another tool still held stays `paused`,
 * its next step naming those tools (docs/product/states.md), and its pause so far is credited too,
 * so the released step's claim is not charged on-call's wait (ADR 0756).
 */
async function resumeIfNothingHeld(trx: Trx, workflowId: string, resumed: ResumeReason): Promise<void> {
  const wf = await trx
    .selectFrom('workflows')
    .select(['id', 'state', 'release_id'])
    .where('id', '=', workflowId)
    .forUpdate()
    .executeTakeFirst();
  if (!wf || wf.state !== 'paused') return;
  const stillOff = await trx
    .selectFrom('actions as a')
    .innerJoin('workflows as w', 'w.id', 'a.workflow_id')
    .leftJoin('operations as o', 'o.action_id', 'a.id')
    .select('a.tool')
    .distinct()
    .where('a.workflow_id', '=', workflowId)
    .where('a.status', '=', 'approved')
    .where(heldByContainment(sql.ref('a.tool'), sql.ref('w.tenant'), sql.ref('w.user_id')))
    .where((eb) => eb.or([eb('o.key', 'is', null), eb('o.status', '=', 'pending')]))
    .execute();
  if (stillOff.length) {
    const tools = stillOff.map((r) => r.tool).join(', ');
    await trx
      .updateTable('workflows')
      .set({ next_step: `Tool ${tools} is switched off; the workflow resumes when on-call switches it on.`, updated_at: new Date() })
      .where('id', '=', workflowId)
      .execute();
    // Still paused, but a released step is claimed now: the pause so far is credited first, or that
    // claim finds the deadline passed by on-call's wait (ADR 0756). The mark stays: the resume
    // credits the rest, each instant once.
    await creditPauseSoFar(trx, workflowId, { clear: false });
    return;
  }
  await transitionWorkflow(trx, workflowId, {
    to: 'executing',
    nextStep: null,
    audit: { type: 'run.resumed', service: 'cli', tool: resumed.tool, outcome: resumed.outcome, revisions: { release: wf.release_id } },
  });
  await creditPauseSoFar(trx, workflowId, { clear: true });
}

/**
 * Credits run `workflowId`'s pause (since `budgets.paused_at`, the part not already credited) to
 * its deadline, and with `clear` ends the pause's mark (the run resumed). Nothing without a mark.
 * The caller holds the run's row lock (lock order workflows → budgets).
 */
async function creditPauseSoFar(trx: Trx, workflowId: string, { clear }: { clear: boolean }): Promise<void> {
  const budget = await trx.selectFrom('budgets').select('paused_at').where('workflow_id', '=', workflowId).forUpdate().executeTakeFirst();
  if (!budget?.paused_at) return;
  await creditWait(trx, workflowId, new Date(budget.paused_at));
  if (clear) await trx.updateTable('budgets').set({ paused_at: null }).where('workflow_id', '=', workflowId).execute();
}

/**
 * `gatehouse epoch bump`: raises the revocation epoch; every outstanding delegated token dies. It
 * takes the bump's lock first ({@link lockCredentialEpochForBump}): effects of the systems of
 * record in flight commit before it, and none of an old-epoch token commits after it.
 * @returns the new epoch.
 */
export async function bumpEpoch(db: Db, operator: string, hmacKey: string): Promise<number> {
  return inTransaction(db, async (trx) => {
    await lockCredentialEpochForBump(trx); // waits for effects in flight, and new ones wait for it (ADR 0685)
    const row = await trx
      .updateTable('credential_epochs')
      .set({ epoch: sql`epoch + 1`, changed_by: operator, changed_at: new Date() })
      .where('id', '=', 1)
      .returning('epoch')
      .executeTakeFirstOrThrow();
    await recordAudit(trx, {
      type: 'epoch.bumped',
      service: 'cli',
      runId: null,
      actorHash: actorHash(hmacKey, operator),
      outcome: String(row.epoch),
    });
    return row.epoch;
  });
}
