import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, dropQueuePrefix, testQueuePrefix, TEST_REDIS_URL, type TestDatabase } from '@gatehouse/test-harness';
import { tokenFor } from '@gatehouse/cli';
import { auditLossHeld, raiseAuditLossHold, verifyAuditChain } from '@gatehouse/ledger';
import { runCli, type CliRun } from '../support/cli-process.ts';

// `gatehouse audit acknowledge-loss` (docs/decisions/0795-a-lost-audit-tail-holds-effects-until-acknowledged.md):
// an operator's command, audited, with the CLI's exit codes — 1 when nothing is held, 2 without
// --reason, 3 without an operator token, 0 once the hold is cleared.

const SECRET = 'local-auth-secret-change-me';
const HMAC = 'test-audit-hmac-key-0123456789';
let t: TestDatabase;
const prefix = testQueuePrefix();

beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(async () => {
  await t?.drop();
  await dropQueuePrefix(TEST_REDIS_URL, prefix);
});

function run(args: string[], token: string): Promise<CliRun> {
  return runCli(args, {
    DATABASE_URL: t.url,
    REDIS_URL: TEST_REDIS_URL,
    QUEUE_PREFIX: prefix,
    GATEHOUSE_AUDIT_HMAC_KEY: HMAC,
    STAGING_URL: 'http://127.0.0.1:9',
    GATEHOUSE_TOKEN: token,
  });
}

const acknowledged = async () =>
  (await t.db.selectFrom('audit_outbox').select('event').execute()).filter(
    (r) => (r.event as { type: string }).type === 'audit.loss_acknowledged',
  );

describe('gatehouse audit acknowledge-loss', () => {
  it('1 with nothing held, 2 without --reason, 3 without an operator token; 0 clears a raised hold, audited', async () => {
    const ops = await tokenFor('ops-gus', SECRET);
    const nothing = await run(['audit', 'acknowledge-loss', '--reason', 'drill'], ops);
    expect(nothing.code, nothing.out).toBe(1);
    expect(nothing.out).toMatch(/no audit-loss hold is raised/);

    // The chain (empty here) against a witness with an anchor at seq 4: a cut tail.
    const chain = await verifyAuditChain(t.db, {
      witness: [{ seq: 4, hash: 'a'.repeat(64), signature: 'c2ln', at: new Date().toISOString() }],
    });
    expect(await raiseAuditLossHold(t.db, chain)).toBe(true);

    expect((await run(['audit', 'acknowledge-loss'], ops)).code).toBe(2);
    const lead = await tokenFor('lead-eli', SECRET);
    expect((await run(['audit', 'acknowledge-loss', '--reason', 'not mine'], lead)).code).toBe(3);
    expect(await auditLossHeld(t.db)).not.toBeNull();
    expect(await acknowledged()).toEqual([]);

    const ok = await run(['audit', 'acknowledge-loss', '--reason', 'lost window reconciled'], ops);
    expect(ok.code, ok.out).toBe(0);
    expect(ok.out).toMatch(/audit loss at witnessed seq 4 acknowledged .*; 0 held action\(s\) re-enqueued/);
    expect(await auditLossHeld(t.db)).toBeNull();
    expect(await acknowledged()).toHaveLength(1);
    // The same loss, still witnessed, is not raised again.
    expect(await raiseAuditLossHold(t.db, chain)).toBe(false);
  });
});
