import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, TEST_REDIS_URL, type TestDatabase } from '@gatehouse/test-harness';
import { tokenFor } from '../src/api-client.ts';
import { EXIT } from '../src/commands.ts';
import { runGatehouse } from './support/gatehouse-process.ts';

// `gatehouse tokens revoke --jti <id>` said "token <id> of <user> revoked" for any jti, one never
// issued included: user tokens are stateless and nothing records which were issued, so the command
// cannot know. It now says what it did — that jti is refused from now on, for any token bearing
// it — and plainly that no record says such a token was issued (ADR 0715). The real CLI, a real
// ledger: the refusal holds for a real token, whichever user the command named.

const SECRET = 'local-auth-secret-change-me';
let t: TestDatabase;
let stateDir: string;
let env: Record<string, string>;
beforeAll(async () => {
  t = await createTestDatabase();
  stateDir = mkdtempSync(resolve(tmpdir(), 'gh-cli-jti-'));
  env = {
    DATABASE_URL: t.url,
    REDIS_URL: TEST_REDIS_URL,
    GATEHOUSE_STATE_DIR: stateDir,
    GATEHOUSE_TOKEN: await tokenFor('ops-gus', SECRET),
    STAGING_URL: 'http://127.0.0.1:9',
    LOG_LEVEL: 'warn',
  };
});
afterAll(async () => {
  await t?.drop();
  rmSync(stateDir, { recursive: true, force: true });
});

/** The `jti` claim of a token this project minted. */
const jtiOf = (token: string): string => (JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()) as { jti: string }).jti;
const revokedJtis = async () =>
  (await t.db.selectFrom('user_token_revoked_jtis').select(['jti', 'subject']).orderBy('jti').execute()).map(
    (r) => `${r.subject}:${r.jti}`,
  );
const revocationEvents = async () =>
  (await t.db.selectFrom('audit_outbox').select('event').execute()).filter((r) => r.event.type === 'user_tokens.revoked').length;
const revoke = (user: string, jti: string) =>
  runGatehouse(['tokens', 'revoke', '--user', user, '--jti', jti, '--reason', 'leaked in a ticket'], env, 60_000);

describe('tokens revoke --jti (ADR 0715)', () => {
  it(
    'a jti never issued: refused from now on, and the output says no record shows it was issued — not "revoked"',
    { timeout: 120_000 },
    async () => {
      const r = await revoke('rep-ana', 'never-issued-0001');
      expect(r.code, r.stderr).toBe(EXIT.ok);
      expect(r.stdout).toContain('jti never-issued-0001 is refused from now on: any token bearing it is refused');
      expect(r.stdout).toContain('no record says a token with jti never-issued-0001 was issued: user tokens are stateless');
      expect(r.stdout).toContain('gatehouse tokens revoke --user rep-ana --reason "<why>"');
      expect(r.stdout).not.toMatch(/\brevoked\b/);
      expect(await revokedJtis()).toEqual(['rep-ana:never-issued-0001']);
      expect(await revocationEvents()).toBe(1);

      const again = await revoke('rep-ana', 'never-issued-0001');
      expect(again.code).toBe(EXIT.ok);
      expect(again.stdout).toContain('jti never-issued-0001 was already refused (an earlier revocation); nothing changed');
      expect(await revokedJtis()).toEqual(['rep-ana:never-issued-0001']);
    },
  );

  it(
    'a real token: the same words (the command cannot tell), and that token is refused — even when the command named another user',
    { timeout: 120_000 },
    async () => {
      const [leaked, named] = [await tokenFor('ops-gus', SECRET), await tokenFor('ops-gus', SECRET)];
      const status = (token: string) => runGatehouse(['reenable', 'status'], { ...env, GATEHOUSE_TOKEN: token }, 60_000);
      expect((await status(leaked)).code).toBe(EXIT.ok);

      const r = await revoke('ops-gus', jtiOf(leaked));
      expect(r.code, r.stderr).toBe(EXIT.ok);
      expect(r.stdout).toContain(`no record says a token with jti ${jtiOf(leaked)} was issued`);
      const refused = await status(leaked);
      expect(refused.code, refused.stderr).toBe(EXIT.unauthorized);
      expect(refused.stderr).toMatch(/token_revoked/);

      // The jti is refused whichever user carries it: naming rep-ana refuses ops-gus's token bearing it.
      expect((await revoke('rep-ana', jtiOf(named))).code).toBe(EXIT.ok);
      expect((await status(named)).code).toBe(EXIT.unauthorized);
      // The operator's own token, another jti, still works.
      expect((await status(env.GATEHOUSE_TOKEN!)).code).toBe(EXIT.ok);
    },
  );
});
