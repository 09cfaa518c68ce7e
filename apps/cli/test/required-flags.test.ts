import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, TEST_REDIS_URL, type TestDatabase } from '@gatehouse/test-harness';
import { tokenFor } from '../src/api-client.ts';
import { EXIT } from '../src/commands.ts';
import { runGatehouse } from './support/gatehouse-process.ts';

// The CLI's exit codes (docs/product/public-contract.md#ops-cli): a missing required flag is a
// usage error — exit 2, nothing ran. `release override` without --reason exited 1 (the
// override's own check, after the token), and `queues drain|resume|quarantine|requeue` without
// their flags were refused only after the token was checked and the command audited as run
// (exit 3 without a token). Every required flag is now checked by one owner (commands.ts,
// checkRequired) before the token: exit 2 naming the flag, not one audit event written.

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
