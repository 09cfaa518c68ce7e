#!/usr/bin/env node
import { parseArgs } from 'node:util';
import { existsSync, rmSync } from 'node:fs';
import { resolve as resolvePath } from 'node:path';
import { repoRoot, type TokenRevocationResult } from '@gatehouse/contracts';
import { parseEnv, OutboxRelay, createLogger, hostOf, userTokenVerifier, type BaseEnv } from '@gatehouse/platform';
import { migrate, migrateOneDown, type Db } from '@gatehouse/ledger';
import { withCliDb } from './cli-db.ts';
import { tokenFor } from './api-client.ts';
import { auditPublicKey } from './audit-key.ts';
import { auditVerifyCommand, localWitnessPath, witnessToRead } from './audit-verify-command.ts';
import { auditReplaceLostKeyCommand, auditRotateKeyCommand } from './audit-rotate-command.ts';
import { ledgerReplicationCommand } from './replication-command.ts';
import { prepareDatabase } from './db-admin.ts';
import { ensureDelegationKeyPair } from '@gatehouse/credentials';
import { cliSigningKey, delegationKeyDir, delegationKeyPaths } from './delegation-keys.ts';
import { runDemo, printReport } from './demo.ts';
import {
  acknowledgeAuditLoss,
  authorizeOperator,
  bumpEpoch,
  revokeUserTokens,
  LEFT_IN_OUTBOX,
  publishFromCli,
  dropKeysUnder,
  requireKnownTool,
  setSwitch,
  type Operator,
  withQueues,
  withRedis,
} from '@gatehouse/operations';
import { asSystemOfRecordFault, parseOutcomes, reconcileCommand, resolveCommand, REMEDIATION_FLAGS } from './reconcile-commands.ts';
import { releaseCommand } from './release-commands.ts';
import { changeCancelCommand } from './change-commands.ts';
import { reenableCommand } from './reenable-commands.ts';
import { loadBundle, loadBundleFile, runBoundaryGate, loadGateCases } from '@gatehouse/policy';
import { portOf, SERVICES, stagingUrlOf, startStack, stateDir, stateRoot, type RunningStack } from './stack.ts';
import { formatStackStatus, launchStackDaemon, probeStackStatus, progressPrinter, stackIsUp, stopStack } from './stack-control.ts';
import {
  checkArgumentCount,
  checkOptions,
  checkRequired,
  type CommandSpec,
  commandHelp,
  exitCodeFor,
  findCommand,
  groupHelp,
  usage,
  UsageError,
  EXIT,
} from './commands.ts';

const out = (line: string): void => {
  process.stdout.write(`${line}\n`);
};

/** The parsed flags of the command line ({@link OPTIONS}). */
type CliValues = ReturnType<typeof parseCommandLine>['values'];

/**
 * One command as its handler gets it: the flags and positionals of the command line (`sub` and
 * `arg` are its second and third words), its catalog entry (already checked: flags, required
 * values) and the environment with the stack's staging URL.
 */
interface Invocation {
  values: CliValues;
  positionals: string[];
  sub: string | undefined;
  arg: string | undefined;
  spec: CommandSpec;
  env: BaseEnv;
}

/** A command group's handler: the command (`"<cmd> <sub>"`, trimmed) → its exit code. */
type GroupHandler = (command: string, inv: Invocation) => Promise<number>;

async function main(argv: string[]): Promise<number> {
  const { values, positionals } = parseCommandLine(argv);
  // Before anything reads it: the state folder of this command and of the processes it starts.
  if (values['state-dir']) process.env.GATEHOUSE_STATE_DIR = resolvePath(values['state-dir']);
  const [cmd, sub, arg] = positionals;
  const spec = findCommand(positionals);
  // A group's first word alone (`gatehouse queues`, `gatehouse stack --help`) lists its commands.
  const group = cmd && !spec && positionals.length === 1 ? groupHelp(cmd) : null;
  if (group) {
    out(group);
    return values.help ? EXIT.ok : EXIT.usage;
  }
  if (!cmd || (values.help && !spec)) {
    if (cmd && !spec) throw unknownCommand(positionals);
    out(usage());
    return values.help ? EXIT.ok : EXIT.usage;
  }
  if (!spec) throw unknownCommand(positionals);
  if (values.help) {
    out(commandHelp(spec));
    return EXIT.ok;
  }
  checkOptions(spec, values);
  checkRequired(spec, values, positionals);
  checkArgumentCount(spec, positionals);
  // The staging URL as the stack's services have it (STAGING_PORT alone moves it too).
  const env = parseEnv({}, { ...process.env, STAGING_URL: stagingUrlOf(process.env) });
  const handler = GROUPS.get(cmd);
  if (!handler) throw unknownCommand(positionals);
  return handler(`${cmd} ${sub ?? ''}`.trim(), { values, positionals, sub, arg, spec, env });
}

/** The usage error (exit 2) of a command line that names no command. */
function unknownCommand(positionals: readonly string[]): UsageError {
  return new UsageError(`unknown command: ${positionals.join(' ')} (see: gatehouse --help)`);
}

/**
 * `delegation keys`, `token` and `demo`: local set-up, no operator token.
 * @throws UsageError for a command of no group here.
 */
async function setupCommand(command: string, { values, positionals, arg, env }: Invocation): Promise<number> {
  switch (command) {
    case 'delegation keys': {
      const paths = delegationKeyPaths({}, delegationKeyDir(arg!));
      const kid = await ensureDelegationKeyPair(paths.signing, paths.jwks);
      out(`signing key ${paths.signing} (kid ${kid}) — the executor's only; JWKS ${paths.jwks} — the systems of record's`);
      return 0;
    }
    case 'token': {
      out(await tokenFor(values.user!, env.GATEHOUSE_AUTH_SECRET));
      return 0;
    }
    case 'demo':
      return demo(Boolean(values['keep-running']));
    default:
      throw unknownCommand(positionals);
  }
}

/**
 * `stack up|status|down`: the local stack, supervised in the background (state in `stateDir('stack')`).
 * Exit 0, or 1 from `stack status` when the stack is not up.
 * @throws UsageError for a bad `--only` (before anything stops or starts) or an unknown command.
 */
async function stackCommand(command: string, { values, positionals, env }: Invocation): Promise<number> {
  switch (command) {
    case 'stack up': {
      // Checked before anything stops or starts: a typo would stop the running stack and start nothing.
      const only = parseOnly(values.only);
      out('preparing the database (migrations)…');
      await prepareDatabase(env.DATABASE_URL, { fresh: values.fresh });
      // A fresh database starts a fresh chain: the local witness of the old one goes with it.
      if (values.fresh && !process.env.AUDIT_ANCHOR_WITNESS_PATH) rmSync(localWitnessPath(), { force: true });
      const dir = stateDir('stack');
      const restarted = await stopStack(dir, 5000);
      if (restarted.length) out(`restarting the running stack (${restarted.join(', ')})`);
      const ports = await launchStackDaemon({ env: stackEnv({}), dir, only, out });
      for (const [name, port] of Object.entries(ports)) out(`  ${name.padEnd(15)} http://127.0.0.1:${port}`);
      out(`stack up, supervised; logs in ${dir}`);
      return 0;
    }
    case 'stack status': {
      const report = await probeStackStatus(stateDir('stack'));
      if (values.json) out(JSON.stringify(report, null, 2));
      else for (const line of formatStackStatus(report)) out(line);
      return stackIsUp(report) ? 0 : 1;
    }
    case 'stack down': {
      const stopped = [...(await stopStack(stateDir('stack'))), ...(await stopStack(stateDir('demo')))];
      out(stopped.length ? `stopped ${stopped.join(', ')}` : 'nothing was running');
      return 0;
    }
    default:
      throw unknownCommand(positionals);
  }
}

/**
 * `audit verify` (no token: a read of the chain) and the operator's `audit replace-lost-key`,
 * `audit rotate-key` and `audit acknowledge-loss` (through {@link opsCommand}; the last exits 1
 * when nothing is held, ADR 0795).
 * @throws UsageError for a witness that is a directory (before the database), or an unknown command.
 */
async function auditCommand(command: string, { values, positionals, env }: Invocation): Promise<number> {
  switch (command) {
    case 'audit verify': {
      const witness = witnessToRead(values.witness); // A witness that is a directory is a usage error, before the database.
      return withCliDb(env.DATABASE_URL, 2, (db) => {
        const key = auditPublicKey();
        return auditVerifyCommand(db, { witness, json: values.json, out, ...(key ? { trustedPublicKey: key } : {}) });
      });
    }
    case 'audit replace-lost-key':
      return opsCommand(env, values.token, 'audit replace-lost-key', (db, op) =>
        auditReplaceLostKeyCommand(db, {
          newKey: values['new-key'],
          reason: values.reason!,
          operator: op.id,
          hmacKey: env.GATEHOUSE_AUDIT_HMAC_KEY,
          out,
        }),
      );
    case 'audit acknowledge-loss':
      // A ledger write, then the re-enqueued steps published (left in the outbox while Redis is down).
      return opsCommand(env, values.token, 'audit acknowledge-loss', async (db, op) => {
        const ack = await acknowledgeAuditLoss(db, { operator: op.id, reason: values.reason!, hmacKey: env.GATEHOUSE_AUDIT_HMAC_KEY });
        const published = await publishFromCli(env, db, ack.rows, createLogger('cli'));
        out(`audit loss at witnessed seq ${ack.witnessedSeq} acknowledged (${ack.reason}); ${ack.rows.length} held action(s) re-enqueued`);
        if (published === 'left_in_outbox') out(LEFT_IN_OUTBOX);
        return 0;
      });
    case 'audit rotate-key':
      return opsCommand(env, values.token, 'audit rotate-key', (db, op) =>
        auditRotateKeyCommand(db, {
          oldKey: values['old-key']!,
          newKey: values['new-key'],
          reason: values.reason!,
          operator: op.id,
          hmacKey: env.GATEHOUSE_AUDIT_HMAC_KEY,
          out,
        }),
      );
    default:
      throw unknownCommand(positionals);
  }
}

/**
 * Containment, all ledger writes by an operator ({@link opsCommand}): `switch on|off <tool>`,
 * `epoch bump`, `tokens revoke`. Exit 0 once written.
 * @throws UsageError for an unknown tool (before the token check), or an unknown command.
 */
async function containmentCommand(command: string, { values, positionals, sub, arg, env }: Invocation): Promise<number> {
  switch (command) {
    case 'switch on':
    case 'switch off': {
      const tool = arg!;
      requireKnownTool(tool); // a typo is a usage error (exit 2): nothing ran, not even the token check
      // A ledger write: containment works while Redis is down (ADR 0650).
      return opsCommand(env, values.token, `switch ${sub}`, async (db, op) => {
        const rows = await setSwitch(db, tool, sub === 'on', op.id, env.GATEHOUSE_AUDIT_HMAC_KEY);
        const published = await publishFromCli(env, db, rows, createLogger('cli'));
        out(`${tool} switched ${sub}${rows.length ? `; ${rows.length} held action(s) re-enqueued` : ''}`);
        if (published === 'left_in_outbox') out(LEFT_IN_OUTBOX);
        return 0;
      });
    }
    case 'epoch bump':
      return opsCommand(env, values.token, 'epoch bump', async (db, op) => {
        out(`revocation epoch is now ${await bumpEpoch(db, op.id, env.GATEHOUSE_AUDIT_HMAC_KEY)}`);
        return 0;
      });
    case 'tokens revoke':
      return opsCommand(env, values.token, 'tokens revoke', async (db, op) => {
        const input = { subject: values.user!, reason: values.reason!, ...(values.jti === undefined ? {} : { jti: values.jti }) };
        const r = await revokeUserTokens(db, input, { operator: op.id, service: 'cli' }, env.GATEHOUSE_AUDIT_HMAC_KEY);
        if (values.json) out(JSON.stringify(r));
        else for (const line of revocationLines(r)) out(line);
        return 0;
      });
    default:
      throw unknownCommand(positionals);
  }
}

/**
 * `policy check <revision|file.json>`: runs the bundle's boundary cases. Exit 0 when every case
 * passes, 1 when one fails (the bundle is refused).
 * @throws UsageError when the bundle file does not exist, or for an unknown command.
 */
async function policyCommand(command: string, { values, positionals, arg }: Invocation): Promise<number> {
  switch (command) {
    case 'policy check': {
      const ref = arg!;
      const file = ref.endsWith('.json') ? resolvePath(ref) : resolvePath(repoRoot, 'policy', `${ref}.json`);
      if (!existsSync(file)) throw new UsageError(`no policy bundle ${ref} (looked for ${file})`);
      const bundle = ref.endsWith('.json') ? loadBundleFile(file) : loadBundle(ref);
      const cases = loadGateCases(bundle);
      const failures = runBoundaryGate(bundle, cases);
      if (values.json) {
        out(JSON.stringify({ revision: bundle.revision, cases: cases.length, passed: cases.length - failures.length, failures }, null, 2));
        return failures.length ? 1 : 0;
      }
      for (const f of failures)
        out(`  FAIL ${f.name}: expected ${f.expected.decision} ${f.expected.ruleId}, got ${f.got.decision} ${f.got.ruleId}`);
      out(
        `${bundle.revision}: ${cases.length - failures.length} of ${cases.length} boundary cases pass${failures.length ? ' — bundle REFUSED' : ''}`,
      );
      return failures.length ? 1 : 0;
    }
    default:
      throw unknownCommand(positionals);
  }
}

/**
 * `reconcile`, `reconcile resolve <id>` and `change cancel <id>`: an operator's remediation of
 * actions whose outcome at the system of record is open ({@link opsCommand}).
 * @throws UsageError for two remediation flags or a bad `--outcome` (before the token check), or an unknown command.
 */
async function remediationCommand(command: string, { values, positionals, sub, arg, env }: Invocation): Promise<number> {
  switch (command) {
    case 'reconcile':
    case 'reconcile resolve': {
      const flags = Object.keys(REMEDIATION_FLAGS).filter((f) => (values as Record<string, unknown>)[f]);
      // Usage errors (exit 2) before the token check, as for every other command: nothing runs.
      if (flags.length > 1) throw new UsageError(`choose one remediation, not ${flags.join(' and ')}`);
      const outcomes = parseOutcomes(values.outcome);
      return opsCommand(env, values.token, sub ? 'reconcile resolve' : 'reconcile', async (db, op) => {
        const signingKey = await cliSigningKey(process.env, stateRoot());
        return withQueues(env, (queues) => {
          const relay = new OutboxRelay(db, queues, createLogger('cli'));
          const ctx = {
            db,
            databaseUrl: env.DATABASE_URL,
            stagingUrl: env.STAGING_URL,
            hmacKey: env.GATEHOUSE_AUDIT_HMAC_KEY,
            signingKey,
            release: env.GATEHOUSE_RELEASE,
            operator: op.id,
            json: values.json,
            out,
            publish: (rows: Parameters<OutboxRelay['publish']>[0]) => relay.publishAndMark(rows),
          };
          return sub ? resolveCommand(ctx, arg!, flags[0] ? REMEDIATION_FLAGS[flags[0]] : undefined, outcomes) : reconcileCommand(ctx);
        }).catch((err: unknown) => {
          throw asSystemOfRecordFault(err, env.STAGING_URL);
        });
      });
    }
    case 'change cancel':
      return opsCommand(env, values.token, 'change cancel', async (db, op) => {
        const signingKey = await cliSigningKey(process.env, stateRoot());
        if (!signingKey) throw new Error('change cancel needs the delegation signing key (GATEHOUSE_DELEGATION_SIGNING_KEY_PATH)');
        const ctx = {
          db,
          databaseUrl: env.DATABASE_URL,
          stagingUrl: env.STAGING_URL,
          hmacKey: env.GATEHOUSE_AUDIT_HMAC_KEY,
          signingKey,
          release: env.GATEHOUSE_RELEASE,
          operator: op.id,
          out,
          publish: async () => {},
        };
        return changeCancelCommand(ctx, arg!, values.reason);
      });
    default:
      throw unknownCommand(positionals);
  }
}

/**
 * The rollout commands, handed to their modules with {@link opsCommand}: `release *` and
 * `queues *` ({@link releaseCommand}), `reenable *` ({@link reenableCommand}).
 * @throws UsageError for an unknown command.
 */
async function rolloutCommand(command: string, { values, positionals, arg, env }: Invocation): Promise<number> {
  const ops = (name: string, fn: (db: Db, op: Operator) => Promise<number>) => opsCommand(env, values.token, name, fn);
  switch (command) {
    case 'release digests':
    case 'release verify':
    case 'release activate':
    case 'release enable-writes':
    case 'release analyze':
    case 'release override':
    case 'release rollback':
    case 'release retire':
    case 'queues drain':
    case 'queues resume':
    case 'queues quarantine':
    case 'queues requeue':
      return releaseCommand(command, arg, values, env, ops, out);
    case 'reenable status':
    case 'reenable advance':
    case 'reenable override':
      return reenableCommand(command, arg, values, env, ops, out);
    default:
      throw unknownCommand(positionals);
  }
}

/**
 * `migrate [up]` (prepares the database, no token) and `migrate down [--all --confirm <db>]`: an
 * operator's command, audited before it runs ({@link opsCommand}).
 * @throws UsageError for `--all` without `--confirm <the database's name>` (before the token check), or an unknown command.
 */
async function migrateCommand(command: string, { values, positionals, sub, env }: Invocation): Promise<number> {
  switch (command) {
    case 'migrate':
    case 'migrate up':
    case 'migrate down': {
      if (sub !== 'down') {
        await prepareDatabase(env.DATABASE_URL);
        out('migrated up');
        return 0;
      }
      // Destructive: an operator's command, audited before it runs, one step unless told otherwise.
      const database = new URL(env.DATABASE_URL).pathname.slice(1);
      if (values.all && values.confirm !== database)
        throw new UsageError(`migrate down --all drops every table of ${database}: repeat with --confirm ${database}`);
      return opsCommand(env, values.token, values.all ? 'migrate down --all' : 'migrate down', async (db) => {
        if (values.all) {
          await migrate(db as never, 'down');
          out(`reverted every migration of ${database}`);
          return 0;
        }
        const reverted = await migrateOneDown(db as never);
        out(reverted ? `reverted ${reverted} (run "gatehouse migrate up" to apply it again)` : 'no migration is applied');
        return 0;
      });
    }
    default:
      throw unknownCommand(positionals);
  }
}

/**
 * `ledger replication` (no token: a read of Postgres's settings and standbys, docs/decisions/0775).
 * Exit 0 when the standby is synchronous or none streams, else 1.
 * @throws UsageError for an unknown command.
 */
async function ledgerCommand(command: string, { values, positionals, env }: Invocation): Promise<number> {
  switch (command) {
    case 'ledger replication':
      return withCliDb(env.DATABASE_URL, 1, (db) => ledgerReplicationCommand(db, { json: values.json, out }));
    default:
      throw unknownCommand(positionals);
  }
}

/** Each command group's handler, by the command's first word. */
const GROUPS: ReadonlyMap<string, GroupHandler> = new Map([
  ['delegation', setupCommand],
  ['token', setupCommand],
  ['demo', setupCommand],
  ['stack', stackCommand],
  ['audit', auditCommand],
  ['switch', containmentCommand],
  ['epoch', containmentCommand],
  ['tokens', containmentCommand],
  ['policy', policyCommand],
  ['reconcile', remediationCommand],
  ['change', remediationCommand],
  ['release', rolloutCommand],
  ['queues', rolloutCommand],
  ['reenable', rolloutCommand],
  ['migrate', migrateCommand],
  ['ledger', ledgerCommand],
]);

/**
 * What `gatehouse tokens revoke` says it did (docs/decisions/0715). A subject's revocation is of
 * tokens the issuer gave before a time: true whatever was issued. A `jti` revocation is a refusal
 * of that identifier: user tokens are stateless and nothing records which were issued (the local
 * secret's `gatehouse token` and an identity provider alike), so the command cannot tell a real
 * token from a mistyped or never-issued `jti`, and says so instead of "revoked"; the refusal holds
 * for any token bearing it, whichever user it names (`revokedBecause`, packages/ledger).
 */
function revocationLines(r: TokenRevocationResult): string[] {
  if (r.kind === 'subject') return [`every token of ${r.subject} issued before ${r.notBefore} is revoked${r.changed ? '' : ' (already)'}`];
  return [
    r.changed
      ? `jti ${r.jti} is refused from now on: any token bearing it is refused by every service within GATEHOUSE_AUTH_REVOCATION_CACHE_MS (1 s), approvals at once, whichever user it names`
      : `jti ${r.jti} was already refused (an earlier revocation); nothing changed`,
    `  no record says a token with jti ${r.jti} was issued: user tokens are stateless (the ledger keeps revocations, not issued tokens), so this cannot tell a real token from a mistyped jti`,
    `  to refuse every token of ${r.subject} issued before now instead: gatehouse tokens revoke --user ${r.subject} --reason "<why>"`,
  ];
}

/** Every flag of every command; {@link checkOptions} then refuses those the command does not take. */
const OPTIONS = {
  user: { type: 'string' },
  jti: { type: 'string' },
  token: { type: 'string' },
  ratify: { type: 'boolean' },
  reverse: { type: 'boolean' },
  'cancel-shipment': { type: 'boolean' },
  adopt: { type: 'boolean' },
  replay: { type: 'boolean' },
  outcome: { type: 'string', multiple: true },
  cohort: { type: 'string' },
  force: { type: 'boolean' },
  to: { type: 'string' },
  reason: { type: 'string' },
  'max-bound': { type: 'string' },
  baseline: { type: 'string' },
  json: { type: 'boolean' },
  for: { type: 'string' },
  from: { type: 'string' },
  release: { type: 'string' },
  all: { type: 'boolean' },
  confirm: { type: 'string' },
  fresh: { type: 'boolean' },
  only: { type: 'string' },
  'state-dir': { type: 'string' },
  'keep-running': { type: 'boolean' },
  witness: { type: 'string' },
  'old-key': { type: 'string' },
  'new-key': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

/**
 * Parses the command line (node:util parseArgs, strict).
 * @throws UsageError for an unknown flag or a flag without its value.
 */
function parseCommandLine(argv: string[]) {
  try {
    return parseArgs({ args: argv, allowPositionals: true, options: OPTIONS });
  } catch (err) {
    throw new UsageError(`${err instanceof Error ? err.message : String(err)} (see: gatehouse --help)`);
  }
}

/**
 * Runs one ops command: opens the ledger (bounded waits, {@link withCliDb}), verifies the operator
 * token (`--token` or `GATEHOUSE_TOKEN`; a refusal is audited and exits 3), then `fn` with the operator.
 * @throws DependencyUnavailable when Postgres (or, inside `fn`, Redis) does not answer (exit 4).
 */
async function opsCommand(
  env: BaseEnv,
  token: string | undefined,
  command: string,
  fn: (db: Db, op: Operator) => Promise<number>,
): Promise<number> {
  // `migrate down` runs migrations: its statements are not bounded, only the connection.
  return withCliDb(
    env.DATABASE_URL,
    2,
    async (db) => {
      const op = await authorizeOperator(db, token ?? process.env.GATEHOUSE_TOKEN, {
        verifier: userTokenVerifier(env),
        hmacKey: env.GATEHOUSE_AUDIT_HMAC_KEY,
        command,
      });
      return fn(db, op);
    },
    { migration: command.startsWith('migrate ') },
  );
}

/**
 * The services `stack up --only a,b` names (undefined without the flag: every service).
 * @throws UsageError when it names no service, or one the stack does not have (listing the names).
 */
function parseOnly(value: string | undefined): string[] | undefined {
  if (value === undefined) return undefined;
  const names = value
    .split(',')
    .map((n) => n.trim())
    .filter(Boolean);
  const known = SERVICES.map((s) => s.name);
  const unknown = names.filter((n) => !known.includes(n));
  if (!names.length || unknown.length)
    throw new UsageError(
      `stack up --only ${unknown.length ? `names no service of the stack: ${unknown.join(', ')}` : 'names no service'} (services: ${known.join(', ')}); nothing was stopped or started`,
    );
  return names;
}

/**
 * The environment of a local stack: this process's, the model-stub as model and the staging
 * systems on their configured ports unless a URL is set (a second stack on other ports must not
 * reach the first one's systems of record), the audit key in the state folder unless set, then
 * `overrides`.
 */
function stackEnv(overrides: Record<string, string | undefined>): Record<string, string | undefined> {
  return {
    ...process.env,
    // Local unless the caller says otherwise: production refuses the local secrets and the test doubles.
    GATEHOUSE_ENV: process.env.GATEHOUSE_ENV ?? 'local',
    MODEL_BASE_URL: process.env.MODEL_BASE_URL ?? stubUrl(process.env),
    STAGING_URL: stagingUrlOf(process.env),
    AUDIT_SIGNING_KEY_PATH: process.env.AUDIT_SIGNING_KEY_PATH ?? resolvePath(stateRoot(), 'audit-ed25519.pem'),
    // The anchor witness, outside Postgres (ADR 0570): where `audit verify` looks for it.
    AUDIT_ANCHOR_WITNESS_PATH: localWitnessPath(process.env),
    // The delegation key pair beside it (created by startStack when absent, outside production).
    GATEHOUSE_DELEGATION_SIGNING_KEY_PATH: delegationKeyPaths(process.env, stateRoot()).signing,
    GATEHOUSE_DELEGATION_JWKS_PATH: delegationKeyPaths(process.env, stateRoot()).jwks,
    ...overrides,
  };
}

/** The model-stub's Responses API URL on its configured port. */
function stubUrl(env: Record<string, string | undefined>): string {
  return `http://127.0.0.1:${portOf(
    SERVICES.find((s) => s.name === 'model-stub')!,
    env,
  )}/v1`;
}

/**
 * `gatehouse demo`: a fresh demo database and queue prefix, the whole stack, ticket T-1. The
 * database (`DEMO_DATABASE`, default `gatehouse_demo`, on `DATABASE_URL`'s server) and the queue
 * prefix (`DEMO_QUEUE_PREFIX`, default `gh-demo`) are emptied first.
 */
async function demo(keepRunning: boolean): Promise<number> {
  const base = parseEnv({});
  const name = process.env.DEMO_DATABASE ?? 'gatehouse_demo';
  if (!/^[a-z_][a-z0-9_]{0,62}$/.test(name))
    throw new Error(`DEMO_DATABASE must be a plain lower-case database name, got ${JSON.stringify(name)}`);
  const databaseUrl = base.DATABASE_URL.replace(/\/[^/]+$/, `/${name}`);
  const prefix = process.env.DEMO_QUEUE_PREFIX ?? 'gh-demo';
  // Bounded: an unreachable Redis or Postgres ends the demo with exit 4, naming it, instead of a silent wait.
  out(`emptying the demo queues (${prefix}:* on Redis ${hostOf(base.REDIS_URL)})…`);
  await withRedis(base.REDIS_URL, (redis) => dropKeysUnder(redis, prefix));
  out(`preparing a fresh demo database (${name} on Postgres ${hostOf(databaseUrl)}) and starting every service…`);
  await prepareDatabase(databaseUrl, { fresh: true });
  const demoWitness = resolvePath(stateDir('demo'), 'audit-anchors.jsonl');
  rmSync(demoWitness, { force: true });
  const env = stackEnv({
    DATABASE_URL: databaseUrl,
    QUEUE_PREFIX: prefix,
    LOG_LEVEL: process.env.LOG_LEVEL ?? 'warn',
    AUDIT_ANCHOR_INTERVAL_MS: '500',
    // The demo's fresh database gets a fresh witness of its own (ADR 0570).
    AUDIT_ANCHOR_WITNESS_PATH: demoWitness,
    // The demo always runs on the model-stub, whatever OPENAI_API_KEY the shell holds.
    MODEL_BASE_URL: stubUrl(process.env),
  });
  const dir = keepRunning ? stateDir('stack') : stateDir('demo');
  const stopped = [...(await stopStack(stateDir('stack'), 5000)), ...(await stopStack(stateDir('demo'), 5000))];
  if (stopped.length) out(`stopped the running stack first (the demo needs its ports): ${stopped.join(', ')}`);
  const stack = keepRunning ? undefined : await startForeground(env, dir);
  if (keepRunning) await launchStackDaemon({ env, dir, out });
  const url = (name: string): string =>
    `http://127.0.0.1:${portOf(
      SERVICES.find((s) => s.name === name)!,
      env,
    )}`;
  try {
    const report = await runDemo(
      {
        intakeUrl: url('agent-loop'),
        approvalUrl: url('approval'),
        stagingUrl: url('staging'),
        databaseUrl,
        redisUrl: base.REDIS_URL,
        queuePrefix: prefix,
        release: base.GATEHOUSE_RELEASE,
        authSecret: base.GATEHOUSE_AUTH_SECRET,
        auditKeyPath: env.AUDIT_SIGNING_KEY_PATH,
        witnessPath: demoWitness,
      },
      out,
    );
    printReport(report, out);
    return report.ok ? 0 : 1;
  } finally {
    if (stack) await stack.stop();
    else out(`stack left running (logs in ${dir}); stop it with: ./run stack down`);
  }
}

/** The demo's own stack, in this process (supervised; stopped with it), printing start-up progress. */
async function startForeground(env: Record<string, string | undefined>, dir: string): Promise<RunningStack> {
  const progress = progressPrinter(
    SERVICES.map((s) => s.name),
    out,
  );
  try {
    // Its services end with the demo even when it is killed (GATEHOUSE_EXIT_WITH_PARENT).
    return await startStack({ env: { ...env, GATEHOUSE_EXIT_WITH_PARENT: '1' }, dir, stopOnSignals: true, onEvent: progress.onEvent });
  } finally {
    progress.done();
  }
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (err: unknown) => {
    process.stderr.write(`gatehouse: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(exitCodeFor(err));
  },
);
