import { UserError } from '@gatehouse/platform';
import { OperatorRefused, OpsUsageError } from '@gatehouse/operations';
import { DependencyUnavailable } from '@gatehouse/ledger';

/**
 * One `gatehouse` command as `--help` shows it. `name` is the command words (`release activate`);
 * `options` the flags it accepts besides the global ones (`--help`, `--json` where `json` is set,
 * `--token`, `--state-dir`); `ops` marks a command that needs an operator token and is audited.
 */
export interface CommandSpec {
  name: string;
  /** Arguments and flags after the command words, as typed. */
  synopsis: string;
  /** One line for the command list. */
  summary: string;
  /** More lines for `gatehouse <command> --help`. */
  details?: string[];
  options: string[];
  /**
   * The flags of `options` the command cannot run without, each with the value it names
   * (`reason: '<why>'`): missing or empty, {@link checkRequired} refuses the command as a usage
   * error (exit 2) before the token is checked.
   */
  required?: Record<string, string>;
  /**
   * The positional argument the command cannot run without, as its synopsis names it (`<id>`):
   * missing or blank, {@link checkRequired} refuses the command as a usage error (exit 2) before
   * the token is checked.
   */
  argument?: string;
  /** The command reads and reports: `--json` prints one JSON document instead of lines. */
  json?: boolean;
  ops?: boolean;
}

/**
 * The `gatehouse` exit codes (docs/product/public-contract.md#ops-cli). Scripts branch on them:
 * 0 done; 1 the command ran and its answer is no (a broken chain, a refused bundle, a failing
 * analysis or safety case, a refused remediation) or it failed; 2 a usage error (unknown command
 * or flag, a missing argument) — nothing ran; 3 not authorized (no operator token, an invalid one,
 * or not an operator's) — refused and audited, nothing ran; 4 a dependency (Postgres, Redis, a
 * service) is unreachable.
 */
export const EXIT = { ok: 0, failed: 1, usage: 2, unauthorized: 3, unavailable: 4 } as const;

/** A usage error: unknown command or flag, or a missing argument (exit 2; nothing ran). */
export class UsageError extends UserError {
  constructor(message: string) {
    super('usage', message);
  }
}

const STATE = '--state-dir <dir>';

/** Every command of the CLI, in the order the command list shows them. */
export const COMMANDS: CommandSpec[] = [
  {
    name: 'demo',
    synopsis: '[--keep-running]',
    summary: 'run ticket T-1 through every service (fresh demo database)',
    details: ['--keep-running leaves the stack up (supervised) after the report; stop it with: gatehouse stack down'],
    options: ['keep-running'],
  },
  {
    name: 'stack up',
    synopsis: '[--fresh] [--only svc,svc]',
    summary: 'start every service (or those) under a supervisor that restarts any that exits; wait until ready',
    details: [
      'Prints a line as each service becomes ready and, every 5 s, the services still awaited.',
      '--fresh empties the database first; --only starts the named services only.',
    ],
    options: ['fresh', 'only'],
  },
  { name: 'stack down', synopsis: '', summary: 'stop the supervisor and every service', options: [] },
  {
    name: 'stack status',
    synopsis: '[--json]',
    summary: "each service's state, restarts and last exit (crash loops); exit 1 unless every service is ready",
    options: [],
    json: true,
  },
  {
    name: 'token',
    synopsis: '--user <id>',
    summary: 'print a bearer token for a user of world.json (local secret)',
    options: ['user'],
    required: { user: '<id>' },
  },
  {
    name: 'audit verify',
    synopsis: '[--witness <file>] [--json]',
    summary: 'walk the audit chain, its anchors and their witness (exit 1 when broken)',
    details: [
      'The witness (--witness, else AUDIT_ANCHOR_WITNESS_PATH, else <state folder>/audit-anchors.jsonl when it',
      'exists) is the anchor log kept outside Postgres: an anchor of it beyond the head, differing from the chain',
      'or missing from audit_anchors fails. So does an event unanchored longer than AUDIT_ANCHOR_INTERVAL_MS',
      '+ AUDIT_ANCHOR_SLACK_MS (default 30 s + 60 s).',
    ],
    options: ['witness'],
    json: true,
  },
  {
    name: 'audit rotate-key',
    synopsis: '--old-key <pem> [--new-key <pem>] --reason <why>',
    summary: 'hand the audit anchors over from one signing key to another, recorded in the chain',
    details: [
      'Both private keys sign the handover (--new-key defaults to AUDIT_SIGNING_KEY_PATH, else <state folder>/audit-ed25519.pem).',
      'An audit replica whose key no rotation hands over to refuses to anchor; audit verify accepts anchors across a',
      'recorded rotation. A lost old key: gatehouse audit replace-lost-key.',
    ],
    options: ['old-key', 'new-key', 'reason'],
    required: { 'old-key': '<pem>', reason: '<why>' },
    ops: true,
  },
  {
    name: 'audit replace-lost-key',
    synopsis: '[--new-key <pem>] --reason <why>',
    summary: "hand the audit anchors over from a lost signing key, on a second person's approval",
    details: [
      "The newest anchor's key is the lost one; --new-key defaults to AUDIT_SIGNING_KEY_PATH, else <state folder>/audit-ed25519.pem.",
      'The first run asks for an override a policy owner or another operator approves (inbox or approval API);',
      'run it again once approved to record the rotation. Exits 1 while it waits. docs/decisions/0717-audit-key-rotation.md.',
    ],
    options: ['new-key', 'reason'],
    required: { reason: '<why>' },
    ops: true,
  },
  {
    name: 'audit acknowledge-loss',
    synopsis: '--reason <why>',
    summary: 'accept a lost audit tail (a witnessed anchor beyond the head) and release the steps it holds',
    details: [
      'While the audit chain is shorter than its witness (a lossy ledger promote), the audit monitor holds every',
      'consequential step: its run pauses, reads go on. Read the systems of record for the lost window first',
      '(ADR 0775); this clears the hold, re-enqueues the held steps and resumes their runs. Exit 1 when nothing',
      'is held. docs/decisions/0795-a-lost-audit-tail-holds-effects-until-acknowledged.md.',
    ],
    options: ['reason'],
    required: { reason: '<why>' },
    ops: true,
  },
  {
    name: 'switch on',
    argument: '<tool>',
    synopsis: '<tool>',
    summary: 'release a tool held at the moment of execution',
    options: [],
    ops: true,
  },
  { name: 'switch off', argument: '<tool>', synopsis: '<tool>', summary: 'hold a tool at the moment of execution', options: [], ops: true },
  { name: 'epoch bump', synopsis: '', summary: 'revoke every outstanding delegated credential', options: [], ops: true },
  {
    name: 'tokens revoke',
    synopsis: '--user <id> [--jti <id>] --reason <why>',
    summary: "revoke a user's bearer tokens: every one issued before now, or one by its jti",
    details: [
      'Every service refuses a revoked token within GATEHOUSE_AUTH_REVOCATION_CACHE_MS (1 s) and closes its event',
      'streams; an approval decision is refused at once. Running it again is harmless (docs/decisions/0695).',
    ],
    options: ['user', 'jti', 'reason'],
    required: { user: '<id>', reason: '<why>' },
    json: true,
    ops: true,
  },
  {
    name: 'reenable status',
    synopsis: '[<tool>] [--max-bound 0.05] [--json]',
    summary: "each contained tool's re-enable stage, cohort, since, clean executions n, 95 % bound and what the next stage needs",
    details: ['The bound is 1 − 0.05^(1/n) (n = 0: 1); --max-bound sets the bound "next" is judged against (default 0.05: 59 clean).'],
    options: ['max-bound'],
    json: true,
    ops: true,
  },
  {
    name: 'reenable advance',
    argument: '<tool>',
    synopsis: '<tool> [--cohort tenant:T,user:U] [--max-bound 0.05] --reason <why>',
    summary: 'move a switched-off tool to its next stage: read_only → cohort → everyone (switch on), on evidence',
    details: [
      'The first run starts read_only (the tool stays held). Advancing needs the open stage to have n clean executions',
      "and none failed with a bound ≤ --max-bound (exit 1 otherwise), or a second operator's approved reenable override.",
      'docs/runbooks/reenable.md, docs/decisions/0310-staged-reenable.md',
    ],
    options: ['cohort', 'max-bound', 'reason'],
    required: { reason: '<why>' },
    ops: true,
  },
  {
    name: 'reenable override',
    argument: '<tool>',
    synopsis: '<tool> [--cohort tenant:T,user:U] --reason <why>',
    summary:
      "ask a second person (another operator or a policy owner, in the approval inbox) to let a tool's open stage advance with the evidence it has",
    details: ['Bound to the open stage, the next one, the cohort and n; single use; expires after 15 minutes.'],
    options: ['cohort', 'reason'],
    required: { reason: '<why>' },
    ops: true,
  },
  {
    name: 'delegation keys',
    argument: '<dir>',
    synopsis: '<dir>',
    summary: 'create an Ed25519 delegation key pair in <dir>',
    details: ['With an existing delegation-ed25519.pem in <dir>, adds its key to delegation-jwks.json (rotation).'],
    options: [],
  },
  {
    name: 'reconcile',
    synopsis: '[--json]',
    summary: 'compare the ledger with the systems of record; print the worklist and stuck runs',
    details: ['Executes remediations a lead approved first (when this machine holds the delegation signing key).'],
    options: [],
    json: true,
    ops: true,
  },
  {
    name: 'reconcile resolve',
    argument: '<item>',
    synopsis: '<item> --ratify|--reverse|--cancel-shipment|--adopt|--replay [--outcome <operationKey>=<shipmentId|none> ...]',
    summary: 'ask a lead to approve a remediation; once approved, run it once',
    details: [
      'Exit 1 when it did nothing: its approval is still pending (run it again once a lead approved),',
      'another process is executing it, or it was refused or failed. Exit 4 when the system of record did not',
      'process the call (no answer, 408, 429, 5xx): nothing was done; run it again (same key).',
      'An item naming undecided reships is ratified with one --outcome per operation: the shipment it made, or none.',
    ],
    options: ['ratify', 'reverse', 'cancel-shipment', 'adopt', 'replay', 'outcome'],
    ops: true,
  },
  {
    name: 'change cancel',
    argument: '<operationKey|workflowId>',
    synopsis: '<operationKey|workflowId> --reason <why>',
    summary: 'cancel a scheduled change before its window: a change owner approves first; run again once approved (runs once)',
    details: [
      'The first run asks a change owner of the tenant (approval API / inbox); the run after approval sends the cancel once.',
      '--reason is needed by the run that asks (exit 2 without it, nothing requested); the runs after it take none.',
      'Exit 1 when refused (the change service’s reason and the next step), pending or busy; exit 4 when the change',
      'service did not process the cancel (no answer, 408, 429, 5xx): nothing was cancelled; run it again (same key).',
    ],
    options: ['reason'],
    ops: true,
  },
  {
    name: 'policy check',
    argument: '<bundle.json|revision>',
    synopsis: '<bundle.json|revision> [--json]',
    summary: 'run the boundary-case gate (exit 1 when the bundle is refused)',
    options: [],
    json: true,
  },
  {
    name: 'release digests',
    synopsis: '[--json]',
    summary: 'print the prompt, catalog, audit-schema digests and schema version of this code',
    options: [],
    json: true,
  },
  {
    name: 'release verify',
    argument: '<id>',
    synopsis: '<id> [--json]',
    summary: "check a release manifest's digests against this code and database",
    options: [],
    json: true,
  },
  {
    name: 'release activate',
    argument: '<id>',
    synopsis: '<id> [--cohort tenant:T,user:U] [--force]',
    summary: 'gate + safety subset, then active (or a candidate for the cohort, writes disabled)',
    details: [
      '--force bypasses failing boundary cases (audited); forcing, or loosening a limit of the active',
      'bundle, needs an override a policy owner or another operator approved (gatehouse release override).',
    ],
    options: ['cohort', 'force'],
    ops: true,
  },
  {
    name: 'release analyze',
    argument: '<candidate>',
    synopsis: '<candidate> [--baseline <id>] [--json]',
    summary: "compare the candidate's cohort with the baseline over the same window",
    details: ['Exit 0 only when the verdict is pass.'],
    options: ['baseline'],
    json: true,
    ops: true,
  },
  {
    name: 'release override',
    argument: '<id>',
    synopsis: '<id> --reason <why> [--for canary|force|raise-limits]',
    summary: 'ask to go past a failing analysis, to force past the gate, or to loosen a limit',
    details: [
      'Opens an approval: a policy owner or another operator decides it in the approval inbox or',
      'with POST /v1/approvals/<approval>/decision; the next activation (or enable-writes) uses it once (15 min).',
    ],
    options: ['reason', 'for'],
    required: { reason: '<why>' },
    ops: true,
  },
  {
    name: 'release enable-writes',
    argument: '<id>',
    synopsis: '<id>',
    summary: "run <id>'s safety cases (and a candidate's canary analysis), then let its consequential tools run",
    options: [],
    ops: true,
  },
  {
    name: 'release rollback',
    synopsis: '--to <id> --reason <why>',
    summary: 'writes off, drain, expire approvals, inventory, restore <id> with writes OFF, run its safety cases',
    details: ['The runbook: docs/runbooks/rollback.md.'],
    options: ['to', 'reason'],
    required: { to: '<id>', reason: '<why>' },
    ops: true,
  },
  {
    name: 'release retire',
    argument: '<candidate>',
    synopsis: '<candidate> --reason <why>',
    summary: 'end one canary alone: writes off, drain, expire its approvals, inventory; its cohort back on the active release',
    details: [
      'The active release and its writes are not touched. Its queued jobs are counted, never moved:',
      'gatehouse queues requeue --from <candidate> --to <active> or gatehouse queues quarantine --release <candidate>.',
      'Exit 1 when <candidate> is not an open candidate (nothing changed); 4 when its queues could not be paused in Redis',
      '(the retirement stands; the ledger holds its jobs).',
    ],
    options: ['reason'],
    required: { reason: '<why>' },
    ops: true,
  },
  {
    name: 'queues drain',
    synopsis: '--release <id>',
    summary: "stop claiming the release's jobs; in-flight work finishes",
    options: ['release'],
    required: { release: '<id>' },
    ops: true,
  },
  {
    name: 'queues resume',
    synopsis: '--release <id>',
    summary: "undo a drain: clear the release's draining mark and resume its queues",
    options: ['release'],
    required: { release: '<id>' },
    ops: true,
  },
  {
    name: 'queues quarantine',
    synopsis: '--release <id>',
    summary: "set the release's queued jobs aside in the ledger, stop every live run of it",
    options: ['release'],
    required: { release: '<id>' },
    ops: true,
  },
  {
    name: 'queues requeue',
    synopsis: '--from <id> --to <id>',
    summary: "move one release's queued jobs and live runs to another (same payload version only)",
    options: ['from', 'to'],
    required: { from: '<id>', to: '<id>' },
    ops: true,
  },
  {
    name: 'ledger replication',
    synopsis: '[--json]',
    summary: "the ledger's standbys and whether a promote can lose acknowledged commits (exit 1 unless synchronous or none)",
    details: [
      'A standby must be synchronous (synchronous_standby_names naming it, synchronous_commit on or remote_apply):',
      'promoting one that may lag loses runs whose effects already reached the systems of record.',
      'Exit 0 when synchronous or when no standby streams; 1 when asynchronous, when commits wait for a missing',
      "synchronous standby, on a standby's URL, or when this role may not see the standbys (grant pg_monitor).",
      'docs/decisions/0775-an-unclean-ledger-promote-is-data-loss.md.',
    ],
    options: [],
    json: true,
  },
  { name: 'migrate', synopsis: '[up]', summary: 'apply every pending migration', options: [] },
  { name: 'migrate up', synopsis: '', summary: 'apply every pending migration', options: [] },
  {
    name: 'migrate down',
    synopsis: '[--all --confirm <database>]',
    summary: 'revert the latest migration only (audited); --all drops all ledger and audit data',
    options: ['all', 'confirm'],
    ops: true,
  },
];

/** Flags every command accepts. */
const GLOBAL_OPTIONS = ['help', 'token', 'state-dir'];

/**
 * The command `positionals` name (two words when the first two form one, else one), or
 * undefined when they name none.
 */
export function findCommand(positionals: string[]): CommandSpec | undefined {
  const [cmd, sub] = positionals;
  return COMMANDS.find((c) => c.name === `${cmd} ${sub ?? ''}`.trim()) ?? COMMANDS.find((c) => c.name === cmd);
}

/**
 * Checks the flags given to `spec`.
 * @throws UsageError naming a flag the command does not take (`--json` included, on a command that does not read).
 */
export function checkOptions(spec: CommandSpec, given: Record<string, unknown>): void {
  for (const [flag, value] of Object.entries(given)) {
    if (value === undefined || GLOBAL_OPTIONS.includes(flag) || spec.options.includes(flag)) continue;
    if (flag === 'json' && spec.json) continue;
    throw new UsageError(`gatehouse ${spec.name} does not take --${flag} (see: gatehouse ${spec.name} --help)`);
  }
}

/** Whether a flag's or argument's value names nothing: absent, or only whitespace (`--reason '   '`). */
function isBlank(value: unknown): boolean {
  return value === undefined || (typeof value === 'string' && value.trim() === '');
}

/**
 * Checks that `spec` is given what it cannot run without: its positional argument
 * ({@link CommandSpec.argument}) and its required flags ({@link CommandSpec.required}), each
 * present and not blank; and that no other flag of its `options` is given a blank value (a blank
 * `--reason` or `--jti` names nothing). The one owner of the rule for every command (ADR 0703,
 * 0713): `change cancel --reason`, needed only by the run that asks, is required where that run
 * is known (change-commands.ts), but given blank it is refused here like any other.
 * @param positionals the command line's positionals, command words first.
 * @throws UsageError naming each missing or blank argument and flag with its value (exit 2,
 *   before the token is checked: nothing ran, nothing audited).
 */
export function checkRequired(spec: CommandSpec, given: Record<string, unknown>, positionals: readonly string[] = []): void {
  const argument = positionals[spec.name.split(' ').length];
  const missing = [
    ...(spec.argument && isBlank(argument) ? [spec.argument] : []),
    ...Object.entries(spec.required ?? {})
      .filter(([flag]) => isBlank(given[flag]))
      .map(([flag, value]) => `--${flag} ${value}`),
  ];
  if (missing.length) throw new UsageError(`${spec.name} needs ${missing.join(' and ')} (see: gatehouse ${spec.name} --help); nothing ran`);
  const blank = spec.options.filter((flag) => typeof given[flag] === 'string' && isBlank(given[flag]));
  if (blank.length)
    throw new UsageError(
      `${spec.name}: ${blank.map((flag) => `--${flag}`).join(' and ')} is blank: give it a value or leave it out (see: gatehouse ${spec.name} --help); nothing ran`,
    );
}

/**
 * How many positional arguments `spec` takes after its command words: one when it names one
 * ({@link CommandSpec.argument}, or an optional `[<tool>]` leading its synopsis), else none.
 */
export function positionalLimit(spec: CommandSpec): number {
  return spec.argument || /^\[<[^>]+>\]/.test(spec.synopsis) ? 1 : 0;
}

/**
 * Checks that `positionals` name nothing past `spec`'s words and the arguments it takes
 * ({@link positionalLimit}), for every command: `switch off A B` must not contain A alone and
 * exit 0, and `audit verify witness.jsonl` (a forgotten `--witness`) must not verify the default
 * witness and exit 0 (docs/decisions/0783-every-command-refuses-an-extra-argument.md).
 * @throws UsageError naming the unexpected arguments (exit 2, before anything runs).
 */
export function checkArgumentCount(spec: CommandSpec, positionals: readonly string[]): void {
  const max = positionalLimit(spec);
  const extra = positionals.slice(spec.name.split(' ').length + max);
  if (extra.length)
    throw new UsageError(
      `gatehouse ${spec.name} takes ${max ? `one ${spec.synopsis.match(/<[^>]+>/)?.[0] ?? 'argument'}` : 'no argument'}: unexpected argument ${extra.join(' ')} (see: gatehouse ${spec.name} --help); nothing ran`,
    );
}

/** The command list of `gatehouse --help`. */
export function usage(): string {
  const lines = COMMANDS.filter((c) => c.name !== 'migrate up').map((c) => {
    const head = `  gatehouse ${c.name} ${c.synopsis}`.trimEnd();
    return head.length < 40 ? `${head.padEnd(40)}${c.summary}` : `${head}\n${' '.repeat(40)}${c.summary}`;
  });
  return [
    'gatehouse — operate a Gatehouse stack',
    '',
    ...lines,
    '',
    '  gatehouse <command> --help shows one command. Commands that read take --json.',
    '  Ops commands (marked "operator" in their help) need an operator\'s bearer token: --token <jwt> or',
    '  GATEHOUSE_TOKEN (locally: gatehouse token --user ops-gus). Each is audited.',
    `  ${STATE} or GATEHOUSE_STATE_DIR: where stacks keep logs, pid files and the local audit key`,
    '  (default .gatehouse/). Two stacks side by side need two state folders, and their own ports',
    '  (<SERVICE>_PORT), database (DATABASE_URL) and queue prefix (QUEUE_PREFIX).',
    '',
    EXIT_CODES_HELP,
  ].join('\n');
}

const EXIT_CODES_HELP = [
  '  exit codes: 0 done · 1 the answer is no, or the command failed · 2 usage error (nothing ran)',
  '              3 not authorized (refused, audited) · 4 a dependency is unreachable',
].join('\n');

/**
 * The help of a command group (`gatehouse queues --help`): the commands whose first word is
 * `group`, one line each; null when no command starts with it.
 */
export function groupHelp(group: string): string | null {
  const members = COMMANDS.filter((c) => c.name.startsWith(`${group} `) && c.name !== 'migrate up');
  if (!members.length) return null;
  return [
    `gatehouse ${group} — ${members.length} commands:`,
    '',
    ...members.map((c) => `  gatehouse ${c.name} ${c.synopsis}`.trimEnd() + `\n      ${c.summary}`),
    '',
    `  gatehouse ${group} <command> --help shows one.`,
  ].join('\n');
}

/** The help of one command (`gatehouse release activate --help`). */
export function commandHelp(spec: CommandSpec): string {
  return [
    `gatehouse ${spec.name} ${spec.synopsis}`.trimEnd(),
    '',
    `  ${spec.summary}`,
    ...(spec.details ?? []).map((d) => `  ${d}`),
    '',
    ...(spec.ops ? ['  operator: needs --token <jwt> or GATEHOUSE_TOKEN of an operator; audited.'] : []),
    ...(spec.json ? ['  --json prints one JSON document instead of lines.'] : []),
    `  ${STATE} (or GATEHOUSE_STATE_DIR) selects the state folder.`,
    '',
    EXIT_CODES_HELP,
  ].join('\n');
}

const UNREACHABLE = new Set(['ECONNREFUSED', 'ECONNRESET', 'ENOTFOUND', 'EHOSTUNREACH', 'ETIMEDOUT', 'EAI_AGAIN', '57P01', '57P03']);

/** Whether `err` (or an error it wraps: `cause`, `errors` of an AggregateError) is a connection fault. */
function isUnreachable(err: unknown, depth = 0): boolean {
  if (!(err instanceof Error) || depth > 4) return false;
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string' && UNREACHABLE.has(code)) return true;
  const inner = [(err as { cause?: unknown }).cause, ...((err as { errors?: unknown[] }).errors ?? [])];
  return inner.some((e) => isUnreachable(e, depth + 1));
}

/** The exit code of a command that threw `err` ({@link EXIT}). */
export function exitCodeFor(err: unknown): number {
  if (err instanceof UsageError || err instanceof OpsUsageError) return EXIT.usage;
  if (err instanceof OperatorRefused) return EXIT.unauthorized;
  if (isUnreachable(err) || err instanceof DependencyUnavailable) return EXIT.unavailable;
  return EXIT.failed;
}
