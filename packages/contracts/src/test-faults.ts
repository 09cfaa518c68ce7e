/**
 * The test-only switches (`GATEHOUSE_TEST_*`) of every process, in one typed object read and
 * validated once (docs/decisions/0016-test-only-hooks.md, docs/decisions/0330-layout.md). Each
 * switch removes one control or injects one fault so a test can show the control is
 * load-bearing; none may be set unless `GATEHOUSE_ENV=test`. This module is the only reader of
 * the `GATEHOUSE_TEST_` variables in packages and services (test/repo/test-faults.test.ts).
 */

/** Points at which a test may make a process die: the executor's three and the agent loop's one. */
export type CrashPoint = 'before_dispatch' | 'after_dispatch' | 'after_record' | 'after_model_response';

const CRASH_POINTS: readonly CrashPoint[] = ['before_dispatch', 'after_dispatch', 'after_record', 'after_model_response'];

/** Every test-only switch, parsed. All off (`false`, `null`, 0) unless a test sets it. */
export interface TestFaults {
  // contracts
  /** `DISABLE_BODY_CAP`: downstream bodies are read whole (no `DOWNSTREAM_BODY_LIMIT_BYTES`). */
  disableBodyCap: boolean;
  // telemetry
  /** `DISABLE_FETCH_TRACING`: the undici (fetch) instrumentation is left out. */
  disableFetchTracing: boolean;
  // ledger
  /** `DISABLE_TRANSITION_TABLE`: any workflow/action move is written, no guard checked. */
  disableTransitionTable: boolean;
  /** `DISABLE_PG_ERROR_HANDLING`: Postgres client errors are not handled (a restart kills the process). */
  disablePgErrorHandling: boolean;
  /** `DISABLE_OUTAGE_CREDIT`: dependency outages count against a run's wall time. */
  disableOutageCredit: boolean;
  // policy
  /** `DISABLE_CUMULATIVE_BASIS`: each refund is judged alone, not with the refunds before it. */
  disableCumulativeBasis: boolean;
  /** `DISABLE_LIMIT_LOCKS`: limit sums are read without the limit locks. */
  disableLimitLocks: boolean;
  /** `SHARED_LIMIT_LOCK`: one lock shared by every refund decision instead of one per limit. */
  sharedLimitLock: boolean;
  /** `DISABLE_DECISION_RECHECK`: a decision written on unlocked refund sums is not checked again under the limit locks. */
  disableDecisionRecheck: boolean;
  /** `DISABLE_FOLLOW_UP_CHECK`: a proposal made before the requester's follow-up is routed as if none came. */
  disableFollowUpCheck: boolean;
  /** `DISABLE_PROPOSAL_DEDUPE`: a repeated proposal is not suppressed. */
  disableProposalDedupe: boolean;
  /** `DISABLE_STATE_GATE`: tools are eligible in every workflow state. */
  disableStateGate: boolean;
  // tools
  /** `DISABLE_STRICT_PARSING`: proposal arguments may carry unknown fields. */
  disableStrictParsing: boolean;
  // platform
  /** `OPERATOR_FROM_TOKEN`: the token's `roles` claim makes an operator, not the directory. */
  operatorFromToken: boolean;
  /** `DISABLE_TOKEN_CLAIM_CHECKS`: JWKS tokens are checked for their signature only. */
  disableTokenClaimChecks: boolean;
  /** `DISABLE_RATE_LIMITS`: nothing is counted by the abuse limits. */
  disableRateLimits: boolean;
  /** `DISABLE_PG_GATE`: workers do not hold jobs while Postgres is down. */
  disablePgGate: boolean;
  /** `DISABLE_DRAIN_GATE`: workers take jobs of a release the ledger marks draining (only Redis's pause holds them). */
  disableDrainGate: boolean;
  /** `DISABLE_TENANT_FAIRNESS`: jobs are published without a tenant-fair priority (one FIFO for every tenant). */
  disableTenantFairness: boolean;
  // reconciliation
  /** `CANCEL_WITHOUT_APPROVAL`: a scheduled change is cancelled without its owner's approval. */
  cancelWithoutApproval: boolean;
  // services: agent loop
  /** `CRASH_AT`: the crash point of the executor or (`after_model_response`) the agent loop. */
  crashAt: CrashPoint | null;
  /** `DISABLE_TOOL_FILTER`: every tool is offered regardless of state and mode. */
  disableToolFilter: boolean;
  /** `DROP_REASONING`: reasoning items are not kept for the next round (ADR 0145). */
  dropReasoning: boolean;
  /** `WEBHOOK_UNSIGNED`: webhook deliveries carry no signature. */
  webhookUnsigned: boolean;
  /** `WEBHOOK_NO_RETRY`: the first failed webhook attempt marks the delivery `failed`. */
  webhookNoRetry: boolean;
  /** `WEBHOOK_CONNECT_UNCHECKED`: a production webhook attempt connects to its host's addresses unchecked (ADR 0671). */
  webhookConnectUnchecked: boolean;
  /** `DISABLE_TENANT_SPEND_CAP`: a tenant's daily model spend is not capped. */
  disableTenantSpendCap: boolean;
  // services: ops
  /** `DISABLE_WEBHOOK_CAP_LOCK`: a tenant's active webhook endpoints are counted without the tenant's lock. */
  disableWebhookCapLock: boolean;
  // services: audit
  /** `KEY_CHECK_THEN_WRITE`: the audit key is written in place after an existence check (the race). */
  keyCheckThenWrite: boolean;
  /** `ANCHOR_ANY_KEY`: the audit writer anchors whatever key signed the newest anchor (no key guard, ADR 0717). */
  anchorAnyKey: boolean;
  // services: executor
  /** `CRASH_TOOL`: crash only for this tool (all tools when null). */
  crashTool: string | null;
  /** `BLOCK_BEFORE_DISPATCH_MS`: block the event loop this long before dispatch (a lost queue lock), ms. */
  blockBeforeDispatchMs: number;
  /** `DISABLE_WRITE_AHEAD`: no write-ahead dispatch mark. */
  disableWriteAhead: boolean;
  /** `DISABLE_REEVALUATION`: no policy re-evaluation at execution. */
  disableReevaluation: boolean;
  /** `DISABLE_DIGEST_BINDING`: an approval is consumed without checking it names this action. */
  disableDigestBinding: boolean;
  /** `DISABLE_OUTPUT_BOUNDARY`: raw adapter results reach the model; the model's final message is stored unbounded. */
  disableOutputBoundary: boolean;
  /** `DISABLE_WATCHDOG`: the watchdog does not start. */
  disableWatchdog: boolean;
  /** `DISABLE_IDEMPOTENCY_KEY`: a fresh `Idempotency-Key` per attempt instead of the operation key. */
  disableIdempotencyKey: boolean;
  /** `SWITCH_AT_ADMISSION_ONLY`: the tool switch is judged as it stood at admission. */
  switchAtAdmissionOnly: boolean;
  /** `DISABLE_LEASE`: an operation is claimed even under another worker's live lease. */
  disableLease: boolean;
  /** `DISABLE_RECORD_RETRY`: the fenced record of an effect's result is tried once; a connection fault loses the result. */
  disableRecordRetry: boolean;
  /** `EPOCH_FAIL_OPEN`: mint with epoch 0 when the revocation epoch cannot be read. */
  epochFailOpen: boolean;
  /** `DISABLE_REENABLE_COHORT`: a staged re-enable's cohort stage admits everyone. */
  disableReenableCohort: boolean;
  /** `DISABLE_SWITCH`: the tool switch is not checked at execution at all. */
  ignoreSwitch: boolean;
  /** `SWITCH_NOT_RECHECKED_BEFORE_RETRY`: an idempotent write's retry is sent without asking the tool's switch again (ADR 0700). */
  switchNotRecheckedBeforeRetry: boolean;
  /** `DISABLE_DELEGATION_TRUST_HOLD`: an executor whose delegation key the systems of record do not list still takes jobs (ADR 0767). */
  disableDelegationTrustHold: boolean;
  /** `AUDIT_NOT_RECHECKED_BEFORE_RETRY`: an idempotent write's retry is sent without asking audit health again (ADR 0706). */
  auditNotRecheckedBeforeRetry: boolean;
  // audit
  /** `DISABLE_MONITORS`: these invariant monitors (comma-separated ids) never fire. */
  disableMonitors: string | null;
  /** `EVERY_REPLICA_MONITORS`: each audit replica runs its own monitor pass, unclaimed (ADR 0400). */
  everyReplicaMonitors: boolean;
  // policy's rolling windows
  /** `SIM_CLOCK_FILE`: the incident drill's simulated clock (a JSON file of anchors) for R5, R6 and R10. */
  simClockFile: string | null;
  // operations
  /** `SKIP_TWO_PERSON`: a release change that needs a second person goes through without one. */
  skipTwoPerson: boolean;
  // synthetic systems of record (staging)
  /** `DISABLE_TOKEN_BINDING`: delegated tokens are not checked against the request they carry. */
  disableTokenBinding: boolean;
  /** `DISABLE_DOWNSTREAM_CEILING`: the payments ledger's own ceiling is not enforced. */
  disableDownstreamCeiling: boolean;
}

type Kind = 'flag' | 'crash' | 'text' | 'ms';

/** Each field's variable (after `GATEHOUSE_TEST_`) and how its value is read. */
const SWITCHES: { [K in keyof TestFaults]: [name: string, kind: Kind] } = {
  disableBodyCap: ['DISABLE_BODY_CAP', 'flag'],
  disableFetchTracing: ['DISABLE_FETCH_TRACING', 'flag'],
  disableTransitionTable: ['DISABLE_TRANSITION_TABLE', 'flag'],
  disablePgErrorHandling: ['DISABLE_PG_ERROR_HANDLING', 'flag'],
  disableOutageCredit: ['DISABLE_OUTAGE_CREDIT', 'flag'],
  disableCumulativeBasis: ['DISABLE_CUMULATIVE_BASIS', 'flag'],
  disableLimitLocks: ['DISABLE_LIMIT_LOCKS', 'flag'],
  sharedLimitLock: ['SHARED_LIMIT_LOCK', 'flag'],
  disableDecisionRecheck: ['DISABLE_DECISION_RECHECK', 'flag'],
  disableFollowUpCheck: ['DISABLE_FOLLOW_UP_CHECK', 'flag'],
  disableProposalDedupe: ['DISABLE_PROPOSAL_DEDUPE', 'flag'],
  disableStateGate: ['DISABLE_STATE_GATE', 'flag'],
  disableStrictParsing: ['DISABLE_STRICT_PARSING', 'flag'],
  operatorFromToken: ['OPERATOR_FROM_TOKEN', 'flag'],
  disableTokenClaimChecks: ['DISABLE_TOKEN_CLAIM_CHECKS', 'flag'],
  disableRateLimits: ['DISABLE_RATE_LIMITS', 'flag'],
  disablePgGate: ['DISABLE_PG_GATE', 'flag'],
  disableDrainGate: ['DISABLE_DRAIN_GATE', 'flag'],
  disableTenantFairness: ['DISABLE_TENANT_FAIRNESS', 'flag'],
  cancelWithoutApproval: ['CANCEL_WITHOUT_APPROVAL', 'flag'],
  crashAt: ['CRASH_AT', 'crash'],
  disableToolFilter: ['DISABLE_TOOL_FILTER', 'flag'],
  dropReasoning: ['DROP_REASONING', 'flag'],
  webhookUnsigned: ['WEBHOOK_UNSIGNED', 'flag'],
  webhookNoRetry: ['WEBHOOK_NO_RETRY', 'flag'],
  webhookConnectUnchecked: ['WEBHOOK_CONNECT_UNCHECKED', 'flag'],
  disableTenantSpendCap: ['DISABLE_TENANT_SPEND_CAP', 'flag'],
  disableWebhookCapLock: ['DISABLE_WEBHOOK_CAP_LOCK', 'flag'],
  keyCheckThenWrite: ['KEY_CHECK_THEN_WRITE', 'flag'],
  anchorAnyKey: ['ANCHOR_ANY_KEY', 'flag'],
  crashTool: ['CRASH_TOOL', 'text'],
  blockBeforeDispatchMs: ['BLOCK_BEFORE_DISPATCH_MS', 'ms'],
  disableWriteAhead: ['DISABLE_WRITE_AHEAD', 'flag'],
  disableReevaluation: ['DISABLE_REEVALUATION', 'flag'],
  disableDigestBinding: ['DISABLE_DIGEST_BINDING', 'flag'],
  disableOutputBoundary: ['DISABLE_OUTPUT_BOUNDARY', 'flag'],
  disableWatchdog: ['DISABLE_WATCHDOG', 'flag'],
  disableIdempotencyKey: ['DISABLE_IDEMPOTENCY_KEY', 'flag'],
  switchAtAdmissionOnly: ['SWITCH_AT_ADMISSION_ONLY', 'flag'],
  disableLease: ['DISABLE_LEASE', 'flag'],
  disableRecordRetry: ['DISABLE_RECORD_RETRY', 'flag'],
  epochFailOpen: ['EPOCH_FAIL_OPEN', 'flag'],
  disableReenableCohort: ['DISABLE_REENABLE_COHORT', 'flag'],
  ignoreSwitch: ['DISABLE_SWITCH', 'flag'],
  switchNotRecheckedBeforeRetry: ['SWITCH_NOT_RECHECKED_BEFORE_RETRY', 'flag'],
  disableDelegationTrustHold: ['DISABLE_DELEGATION_TRUST_HOLD', 'flag'],
  auditNotRecheckedBeforeRetry: ['AUDIT_NOT_RECHECKED_BEFORE_RETRY', 'flag'],
  disableMonitors: ['DISABLE_MONITORS', 'text'],
  everyReplicaMonitors: ['EVERY_REPLICA_MONITORS', 'flag'],
  simClockFile: ['SIM_CLOCK_FILE', 'text'],
  skipTwoPerson: ['SKIP_TWO_PERSON', 'flag'],
  disableTokenBinding: ['DISABLE_TOKEN_BINDING', 'flag'],
  disableDownstreamCeiling: ['DISABLE_DOWNSTREAM_CEILING', 'flag'],
};

const PREFIX = 'GATEHOUSE_TEST_';

/** Every switch off: what production and any process without a `GATEHOUSE_TEST_*` variable get. */
export const NO_TEST_FAULTS: Readonly<TestFaults> = Object.freeze(
  Object.fromEntries(
    Object.entries(SWITCHES).map(([field, [, kind]]) => [field, kind === 'flag' ? false : kind === 'ms' ? 0 : null]),
  ) as unknown as TestFaults,
);

/** Reads one value of `kind`; a string is a problem with it. */
function readValue(kind: Kind, raw: string): boolean | number | string | { problem: string } {
  switch (kind) {
    case 'flag':
      return raw === '1' ? true : raw === '0' ? false : { problem: 'must be 1 (on) or 0 (off)' };
    case 'crash':
      return (CRASH_POINTS as readonly string[]).includes(raw)
        ? raw
        : { problem: `unknown crash point ${raw} (one of ${CRASH_POINTS.join(', ')})` };
    case 'ms': {
      const n = Number(raw);
      return Number.isInteger(n) && n >= 0 ? n : { problem: 'must be a whole number of milliseconds' };
    }
    case 'text':
      return raw;
  }
}

/** The switches of `env` and every problem with them (empty: none); see {@link parseTestFaults}. */
function readTestFaults(env: Record<string, string | undefined>): { faults: TestFaults; problems: string[] } {
  const problems: string[] = [];
  const faults: Record<string, unknown> = { ...NO_TEST_FAULTS };
  const known = new Set<string>();
  for (const [field, [name, kind]] of Object.entries(SWITCHES)) {
    const variable = PREFIX + name;
    known.add(variable);
    const raw = env[variable];
    if (raw === undefined || raw === '') continue;
    if (env.GATEHOUSE_ENV !== 'test') {
      problems.push(`${variable} may only be set with GATEHOUSE_ENV=test`);
      continue;
    }
    const value = readValue(kind, raw);
    if (typeof value === 'object') problems.push(`${variable}: ${value.problem}`);
    else faults[field] = value;
  }
  for (const variable of Object.keys(env)) {
    if (variable.startsWith(PREFIX) && !known.has(variable) && env[variable]) problems.push(`${variable}: no such test switch`);
  }
  return { faults: faults as unknown as TestFaults, problems };
}

/**
 * Every problem with the test-only switches of `env`, one line each (empty: none): what a boot
 * check lists beside its own (`parseEnv` in the platform).
 */
export function testFaultProblems(env: Record<string, string | undefined>): string[] {
  return readTestFaults(env).problems;
}

/**
 * Parses the test-only switches of `env` (an empty value is unset). Pure: services and tests
 * that hold their own environment object use it; everything else reads {@link testFaults}.
 * @throws Error listing every problem, one per line: a switch set unless `GATEHOUSE_ENV=test`
 * ("… may only be set with GATEHOUSE_ENV=test"), a value of the wrong form, an unknown
 * `GATEHOUSE_TEST_*` name.
 */
export function parseTestFaults(env: Record<string, string | undefined>): TestFaults {
  const { faults, problems } = readTestFaults(env);
  if (problems.length) throw new Error(`test switches refused:\n  ${problems.join('\n  ')}`);
  return faults;
}

let current: TestFaults | undefined;

/**
 * The switches of this process, read from `process.env` once, at first use (a service's
 * `main.ts` calls it at boot so a refused switch stops the boot), then kept: flipping a
 * variable later changes nothing (tests call {@link resetTestFaultsForTests}). With an explicit
 * `env` other than `process.env`, that object is parsed instead and nothing is kept.
 * @throws Error as {@link parseTestFaults}; a refused environment is not kept, so every use throws.
 */
export function testFaults(env?: Record<string, string | undefined>): TestFaults {
  if (env && env !== process.env) return parseTestFaults(env);
  current ??= parseTestFaults(process.env);
  return current;
}

/**
 * Forgets the switches read by {@link testFaults}, so the next use reads `process.env` again.
 * Only for in-process tests that flip a switch between cases; never called by product code
 * (test/repo/test-faults.test.ts).
 */
export function resetTestFaultsForTests(): void {
  current = undefined;
}
