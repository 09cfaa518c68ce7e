import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { repoRoot } from '@gatehouse/contracts';
import { createTestDatabase, TEST_REDIS_URL, type TestDatabase } from '@gatehouse/test-harness';
import { tokenFor } from '../src/api-client.ts';
import { COMMANDS, EXIT } from '../src/commands.ts';
import { runGatehouse } from './support/gatehouse-process.ts';

// The CLI's exit codes (docs/product/public-contract.md#ops-cli): a missing required flag is a
// usage error — exit 2, nothing ran. `release override` without --reason exited 1 (the
// override's own check, after the token), and `queues drain|resume|quarantine|requeue` without
// their flags were refused only after the token was checked and the command audited as run
// (exit 3 without a token). Every required flag is now checked by one owner (commands.ts,
// checkRequired) before the token: exit 2 naming the flag, not one audit event written.
// A missing positional argument (`release activate` without its id) was checked by each command
// after the token (exit 3 without one) or not at all; and a blank `--reason '   '` counted as
// given (exit 1 after the token and an audit event, or accepted). Both are now the same owner's
// (ADR 0713).

const SECRET = 'local-auth-secret-change-me';
let t: TestDatabase;
let stateDir: string;
beforeAll(async () => {
  t = await createTestDatabase();
  stateDir = mkdtempSync(resolve(tmpdir(), 'gh-cli-required-'));
});
afterAll(async () => {
  await t?.drop();
  rmSync(stateDir, { recursive: true, force: true });
  // Where `delegation keys '   '` would have written a key pair had its blank argument been taken.
  rmSync(resolve(repoRoot, '   '), { recursive: true, force: true });
});

/** Each command without a flag it needs, and the flag the refusal must name. */
const CASES: Array<[string[], RegExp]> = [
  [['release', 'override', 'rel-2'], /release override needs --reason <why>/],
  [['release', 'override', 'rel-2', '--reason', ''], /release override needs --reason <why>/],
  [['token'], /token needs --user <id>/],
  [['tokens', 'revoke', '--user', 'rep-ana'], /tokens revoke needs --reason <why>/],
  [['reenable', 'advance', 'issue_refund'], /reenable advance needs --reason <why>/],
  [['reenable', 'override', 'issue_refund'], /reenable override needs --reason <why>/],
  [['release', 'rollback', '--reason', 'bad canary'], /release rollback needs --to <id>/],
  [['release', 'retire', 'rel-2'], /release retire needs --reason <why>/],
  [['queues', 'drain'], /queues drain needs --release <id>/],
  [['queues', 'resume'], /queues resume needs --release <id>/],
  [['queues', 'quarantine'], /queues quarantine needs --release <id>/],
  [['queues', 'requeue', '--from', 'rel-2'], /queues requeue needs --to <id>/],
];

describe('a missing required flag', () => {
  it('exits 2 naming the flag, before the token is checked: nothing audited, nothing changed', { timeout: 300_000 }, async () => {
    const token = await tokenFor('ops-gus', SECRET);
    const env = {
      DATABASE_URL: t.url,
      REDIS_URL: TEST_REDIS_URL,
      GATEHOUSE_STATE_DIR: stateDir,
      GATEHOUSE_TOKEN: token,
      STAGING_URL: 'http://127.0.0.1:9',
      LOG_LEVEL: 'warn',
    };
    const events = async () => (await t.db.selectFrom('audit_outbox').select('id').execute()).length;
    const before = await events();
    const releases = await t.db.selectFrom('releases').selectAll().orderBy('id').execute();
    for (const [args, named] of CASES) {
      const r = await runGatehouse(args, env, 60_000);
      expect(r.code, `${args.join(' ')}: ${r.stdout}${r.stderr}`).toBe(EXIT.usage);
      expect(r.stderr, args.join(' ')).toMatch(named);
    }
    expect(await events()).toBe(before);
    expect(await t.db.selectFrom('releases').selectAll().orderBy('id').execute()).toEqual(releases);
  });
});

/** Realistic values for each command's flags (the refusal must not depend on them). */
const FLAG_VALUES: Record<string, string> = { user: 'rep-ana', to: 'rel-1', release: 'rel-2', from: 'rel-2', reason: 'on-call check' };
/** A realistic positional for each command that takes one. */
const ARGUMENTS: Record<string, string> = {
  '<tool>': 'issue_refund',
  '<id>': 'rel-2',
  '<candidate>': 'rel-2',
  '<item>': 'recon-1',
  '<dir>': 'keys',
  '<operationKey|workflowId>': 'op-1',
  '<bundle.json|revision>': 'support-v1',
};

/** The positional argument `spec`'s synopsis starts with (`<id>`), as `--help` shows it. */
function argumentOf(spec: (typeof COMMANDS)[number]): string | undefined {
  return spec.synopsis.match(/^<[^>]+>/)?.[0];
}

/** `spec`'s command words, then `positional` when given, then each of its required flags with a value. */
function commandLine(spec: Pick<(typeof COMMANDS)[number], 'name' | 'required'>, positional?: string): string[] {
  const required = Object.keys(spec.required ?? {}).flatMap((f) => [`--${f}`, FLAG_VALUES[f] ?? 'x']);
  return [...spec.name.split(' '), ...(positional === undefined ? [] : [positional]), ...required];
}

describe('a missing positional argument (ADR 0713)', () => {
  // From the synopsis, which `--help` shows: a command added with an argument is in the table.
  const takesOne = COMMANDS.flatMap((c) => {
    const argument = argumentOf(c);
    return argument ? [{ ...c, argument }] : [];
  });

  it('every command whose synopsis starts with an argument declares it', () => {
    const declared = COMMANDS.filter((c) => c.argument).map((c) => [c.name, c.argument]);
    expect(declared).toEqual(takesOne.map((c) => [c.name, c.argument]));
    expect(takesOne.map((c) => c.name)).toEqual(expect.arrayContaining(['release activate', 'release override', 'switch off']));
  });

  it(
    'exits 2 naming it, before the token: absent without a token (not 3), blank with one (nothing audited)',
    { timeout: 600_000 },
    async () => {
      const base = {
        DATABASE_URL: t.url,
        REDIS_URL: TEST_REDIS_URL,
        GATEHOUSE_STATE_DIR: stateDir,
        STAGING_URL: 'http://127.0.0.1:9',
        LOG_LEVEL: 'warn',
      };
      const token = await tokenFor('ops-gus', SECRET);
      const events = async () => (await t.db.selectFrom('audit_outbox').select('id').execute()).length;
      const before = await events();
      const wrong: string[] = [];
      for (const spec of takesOne)
        for (const [env, positional] of [
          [{ ...base, GATEHOUSE_TOKEN: '' }, undefined],
          [{ ...base, GATEHOUSE_TOKEN: token }, '   '],
        ] as const) {
          const args = commandLine(spec, positional);
          const r = await runGatehouse(args, env, 60_000);
          if (r.code !== EXIT.usage || !r.stderr.includes(`${spec.name} needs ${spec.argument}`))
            wrong.push(`${args.join(' ')} (${env.GATEHOUSE_TOKEN ? 'token' : 'no token'}): exit ${r.code} ${r.stderr.trim()}`);
        }
      expect(wrong).toEqual([]);
      expect(await events()).toBe(before);
    },
  );
});

describe('a blank --reason (ADR 0713)', () => {
  it(
    'exits 2 naming --reason for every command taking it, before the token: nothing audited, nothing changed',
    { timeout: 300_000 },
    async () => {
      const token = await tokenFor('ops-gus', SECRET);
      const env = {
        DATABASE_URL: t.url,
        REDIS_URL: TEST_REDIS_URL,
        GATEHOUSE_STATE_DIR: stateDir,
        GATEHOUSE_TOKEN: token,
        STAGING_URL: 'http://127.0.0.1:9',
        LOG_LEVEL: 'warn',
      };
      const taking = COMMANDS.filter((c) => c.options.includes('reason'));
      expect(taking.map((c) => c.name)).toEqual(
        expect.arrayContaining([
          'release override',
          'release rollback',
          'release retire',
          'tokens revoke',
          'reenable advance',
          'reenable override',
          'change cancel',
        ]),
      );
      const events = async () => (await t.db.selectFrom('audit_outbox').select('id').execute()).length;
      const rows = async () => ({
        approvals: (await t.db.selectFrom('approvals').select('id').execute()).length,
        revocations: (await t.db.selectFrom('user_token_not_before').selectAll().execute()).length,
        stages: (await t.db.selectFrom('tool_reenable_stages').select('id').execute()).length,
        releases: await t.db.selectFrom('releases').selectAll().orderBy('id').execute(),
      });
      const [before, state] = [await events(), await rows()];
      const wrong: string[] = [];
      for (const spec of taking) {
        const required = Object.fromEntries(Object.entries(spec.required ?? {}).filter(([flag]) => flag !== 'reason'));
        const argument = argumentOf(spec);
        const args = [...commandLine({ ...spec, required }, argument && ARGUMENTS[argument]), '--reason', ' \t  '];
        const r = await runGatehouse(args, env, 60_000);
        if (r.code !== EXIT.usage || !r.stderr.includes('--reason')) wrong.push(`${args.join(' ')}: exit ${r.code} ${r.stderr.trim()}`);
      }
      expect(wrong).toEqual([]);
      expect(await events()).toBe(before);
      expect(await rows()).toEqual(state);
    },
  );
});
