import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, testQueuePrefix, TEST_REDIS_URL, type TestDatabase } from '@gatehouse/test-harness';
import { tokenFor } from '@gatehouse/cli';
import { runCli, type CliRun } from '../support/cli-process.ts';

// docs/product/public-contract.md#ops-cli: a containment command that names more than it acts on
// is a usage error (exit 2), nothing ran — `switch off A B` switched off A alone and exited 0, so
// on-call read B as contained too.

const SECRET = 'local-auth-secret-change-me';
const HMAC = 'test-audit-hmac-key-0123456789';
let t: TestDatabase;
const prefix = testQueuePrefix();

beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(async () => {
  await t?.drop();
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

describe('ops CLI: containment commands take exactly their arguments, naming what exists', () => {
  it('switch off|on A B, epoch bump X, reenable advance A B: exit 2, no switch written, no epoch bumped, nothing audited', async () => {
    const token = await tokenFor('ops-gus', SECRET);
    const events = (await t.db.selectFrom('audit_outbox').select('id').execute()).length;
    const epoch = await t.db.selectFrom('credential_epochs').select('epoch').executeTakeFirst();
    for (const args of [
      ['switch', 'off', 'issue_refund', 'reship_order'],
      ['switch', 'on', 'issue_refund', 'reship_order'],
      ['epoch', 'bump', 'now'],
      ['reenable', 'advance', 'issue_refund', 'reship_order', '--reason', 'two at once'],
    ]) {
      const r = await run(args, token);
      expect(r.code, `${args.join(' ')}: ${r.out}`).toBe(2);
      expect(r.out, args.join(' ')).toMatch(/unexpected argument/);
    }
    expect(await t.db.selectFrom('tool_switches').selectAll().execute()).toEqual([]);
    expect(await t.db.selectFrom('credential_epochs').select('epoch').executeTakeFirst()).toEqual(epoch);
    expect((await t.db.selectFrom('audit_outbox').select('id').execute()).length).toBe(events);
    // One tool is still fine.
    const ok = await run(['switch', 'off', 'issue_refund'], token);
    expect(ok.code, ok.out).toBe(0);
    expect(await t.db.selectFrom('tool_switches').select(['tool', 'enabled']).execute()).toEqual([
      { tool: 'issue_refund', enabled: false },
    ]);
  });

  it('reenable status with a tool no pack has (a typo): exit 2 naming the tools, not "is not contained" and exit 0; nothing audited', async () => {
    const token = await tokenFor('ops-gus', SECRET);
    const events = (await t.db.selectFrom('audit_outbox').select('id').execute()).length;
    for (const args of [
      ['reenable', 'status', 'issue_refnd'],
      ['reenable', 'status', 'issue_refnd', '--json'],
    ]) {
      const r = await run(args, token);
      expect(r.code, `${args.join(' ')}: ${r.out}`).toBe(2);
      expect(r.out, args.join(' ')).toMatch(/unknown tool issue_refnd: one of lookup_order, issue_refund/);
      expect(r.out, args.join(' ')).not.toMatch(/not contained|"tools"/);
    }
    expect((await t.db.selectFrom('audit_outbox').select('id').execute()).length).toBe(events);
    // A tool that exists and is not contained is still answered as such.
    const known = await run(['reenable', 'status', 'reship_order'], token);
    expect(known.code, known.out).toBe(0);
    expect(known.out).toMatch(/reship_order is not contained/);
  });

  it('reenable advance --cohort with a tenant or user the directory lacks (a typo): exit 2, the stage stays read_only (a cohort of no one admits nobody)', async () => {
    const token = await tokenFor('ops-gus', SECRET);
    const started = await run(['reenable', 'advance', 'issue_refund', '--reason', 'contained, start over'], token);
    expect(started.code, started.out).toBe(0);
    for (const cohort of ['tenant:quilfeather', 'user:rep-anna', 'tenant:northwind,user:nobody', 'tenant:northwind:x']) {
      const r = await run(['reenable', 'advance', 'issue_refund', '--cohort', cohort, '--max-bound', '1', '--reason', 'typo'], token);
      expect(r.code, `${cohort}: ${r.out}`).toBe(2);
      expect(r.out).toMatch(/unknown (tenant|user)/);
    }
    const open = await t.db.selectFrom('tool_reenable_stages').select('stage').where('ended_at', 'is', null).execute();
    expect(open).toEqual([{ stage: 'read_only' }]);
    const ok = await run(
      ['reenable', 'advance', 'issue_refund', '--cohort', 'tenant:northwind', '--max-bound', '1', '--reason', 'northwind'],
      token,
    );
    expect(ok.code, ok.out).toBe(0);
  });
});
