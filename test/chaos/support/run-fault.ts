import { isTerminal } from '@gatehouse/ledger';
import type { ChaosStack } from './chaos-stack.ts';
import type { Fault } from './faults.ts';
import {
  approvalsOf,
  checkAuditChain,
  checkEffects,
  checkReconciliation,
  runStates,
  settleForChecks,
  type RunState,
} from './invariants.ts';
import { planRuns, startApprover, submitRuns, type Run } from './load.ts';

/** Outcome of one fault: the report's row and the reasons it failed. */
export interface FaultResult {
  fault: string;
  runs: number;
  /** Accepted runs not yet terminal when the fault hit. */
  inFlightAtFault: number;
  /** Runs neither terminal nor parked with a next step when the recovery bound passed. */
  stuck: number;
  /** Services whose process ended unasked during the fault (`kill -9` by the harness excluded). */
  crashed: string[];
  /** Effects beyond one per action (see `checkEffects`). */
  duplicates: number;
  /** Runs whose shipments, emails or refunds differ from their succeeded actions. */
  mismatches: number;
  chainIntact: boolean;
  reconUnexplained: number;
  /** How the runs ended: state or `state/stop_reason`, counted. */
  endings: Record<string, number>;
  recoveryBoundMs: number;
  notes: string[];
  /** Every broken invariant, in words; empty when the fault passed. */
  failures: string[];
}

/** Settings of {@link runFault}. */
export interface FaultRunOptions {
  /** Label for ticket ids, unique per stack. */
  tag: string;
  /** After the recovery point, how long the runs get to settle, ms. */
  recoveryBoundMs: number;
  /** How long dead services get to come back by themselves (a supervisor) before the harness restarts them, ms (default 15 000). */
  restartGraceMs?: number;
}

const sleep = (ms: number): Promise<void> => new Promise((done) => setTimeout(done, ms));

const inFlight = async (s: ChaosStack, runs: Run[]): Promise<number> =>
  (await runStates(s, runs)).filter((r) => r.workflowId && !isTerminal(r.state)).length;

/** Waits until `want` runs are in flight or `deadlineMs` passes (the load is best effort; the count is reported). */
async function waitInFlight(s: ChaosStack, runs: Run[], want: number, deadlineMs: number): Promise<void> {
  while (Date.now() < deadlineMs && (await inFlight(s, runs)) < want) await sleep(250);
}

/** Services still dead after `graceMs` are restarted by the harness; returns their names. */
async function reviveDead(s: ChaosStack, graceMs: number): Promise<string[]> {
  for (const until = Date.now() + graceMs; s.dead().length > 0 && Date.now() < until;) await sleep(500);
  const dead = s.dead();
  for (const name of dead) await s.restart(name).catch(() => undefined); // still dead: the liveness check says so
  return dead;
}

function endings(states: RunState[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of states) {
    const key = r.stopReason && r.state !== 'completed' ? `${r.state}/${r.stopReason.slice(0, 40)}` : r.state;
    out[key] = (out[key] ?? 0) + 1;
  }
  return out;
}

/**
 * One fault under load: plans and submits `fault.runs` tickets (a lead approving as they come),
 * waits until runs are in flight, injects the fault, then, within `recoveryBoundMs` of the
 * recovery point, lets the runs settle, stops the lead and lets them settle again (a run the lead
 * approved while the checks read it was read mid-execution; `settleForChecks`), then checks:
 * every service alive (dead ones are restarted by the harness after a grace and reported), every
 * run terminal or parked and none dead-lettered (`stopped(step_failed)`),
 * effects at the staging systems equal to succeeded actions with no duplicate, a clean
 * reconciliation pass and an intact audit chain.
 * Never throws for a broken invariant: it is listed in `failures`.
 */
export async function runFault(s: ChaosStack, fault: Fault, opts: FaultRunOptions): Promise<FaultResult> {
  const runs = await planRuns(s, opts.tag, fault.runs);
  const crashesBefore = s.crashes.length;
  const approver = startApprover(s, runs);
  const failures: string[] = [];
  let inFlightAtFault = 0;
  try {
    await fault.prepare?.(s);
    const submitted = submitRuns(s, runs, Date.now() + 180_000);
    await waitInFlight(s, runs, fault.startAtInFlight ?? fault.minInFlight ?? Math.ceil(fault.runs / 2), Date.now() + 60_000);
    const ctx = {
      atFault: async (): Promise<void> => {
        inFlightAtFault = await inFlight(s, runs);
      },
      inFlight: () => inFlight(s, runs),
    };
    const notes = await fault.inject(s, ctx).catch((err: unknown) => {
      failures.push(`fault not injected as planned: ${String(err)}`);
      return [] as string[];
    });
    const recoveredAt = Date.now();
    if (fault.minInFlight && inFlightAtFault < fault.minInFlight)
      failures.push(`precondition: ${inFlightAtFault} runs in flight at the fault, wanted ≥ ${fault.minInFlight}`);
    const revived = await reviveDead(s, opts.restartGraceMs ?? 15_000);
    if (revived.length) failures.push(`not alive after the fault (restarted by the harness): ${revived.join(', ')}`);
    await submitted;
    // The approver stops before the checks: a run it approves after they began would be read mid-execution (ADR 0672).
    const stuck = await settleForChecks(s, runs, [approver], recoveredAt + opts.recoveryBoundMs);
    const crashed = s.crashes.slice(crashesBefore).map((c) => `${c.service}(${c.signal ?? `exit ${c.code}`})`);
    const effects = await checkEffects(s, runs);
    const killedRuns = fault.killsExecutor ? runs.flatMap((r) => (r.workflowId ? [r.workflowId] : [])) : [];
    const recon = await checkReconciliation(s, killedRuns);
    if (recon.killedInDispatch)
      notes.push(`${recon.killedInDispatch} effect(s) killed in their dispatch window: failed_unknown, for reconciliation (by design)`);
    const chain = await checkAuditChain(s, Date.now() + 30_000);
    const ended = await runStates(s, runs);
    // The dead letter of a step (ADR 0070) is the backstop for a poison input or a bug; the load
    // has neither, so a run ending there means a step treated the outage as a failure.
    const deadLettered = ended.filter((r) => r.state === 'stopped' && r.stopReason === 'step_failed');
    if (deadLettered.length)
      failures.push(
        `${deadLettered.length} run(s) stopped step_failed (a step's dead letter, not held as an outage): ${deadLettered
          .slice(0, 5)
          .map((r) => r.ticketId)
          .join(', ')}`,
      );
    if (crashed.length) failures.push(`crashed during the fault: ${crashed.join(', ')}`);
    if (stuck.length)
      failures.push(
        `${stuck.length} run(s) stuck ${opts.recoveryBoundMs / 1000} s after recovery: ${stuck
          .slice(0, 5)
          .map((r) => `${r.ticketId} ${r.state} next=${r.nextStep ?? '-'} ${r.stopReason ?? ''}`)
          .join('; ')}`,
      );
    if (effects.duplicates.length) failures.push(`duplicate effects: ${effects.duplicates.slice(0, 5).join('; ')}`);
    if (effects.mismatches.length) failures.push(`effects ≠ succeeded actions: ${effects.mismatches.slice(0, 5).join('; ')}`);
    if (recon.unexplained)
      failures.push(`reconciliation: ${recon.unexplained} unexplained ${JSON.stringify(recon.classes)}: ${recon.open.join('; ')}`);
    if (!chain.intact) failures.push(`audit chain broken: ${chain.reason}`);
    if (chain.backlog) failures.push(`audit outbox still holds ${chain.backlog} event(s)`);
    return {
      fault: fault.name,
      runs: runs.length,
      inFlightAtFault,
      stuck: stuck.length,
      crashed,
      duplicates: effects.duplicates.length,
      mismatches: effects.mismatches.length,
      chainIntact: chain.intact,
      reconUnexplained: recon.unexplained,
      endings: endings(ended),
      recoveryBoundMs: opts.recoveryBoundMs,
      notes: [...notes, `lead approved ${approver.approved()}`, `approvals: ${await approvalsOf(s, runs)}`],
      failures,
    };
  } finally {
    await approver.stop();
  }
}
