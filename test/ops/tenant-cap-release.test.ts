import { randomUUID } from 'node:crypto';
import { resolve } from 'node:path';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_CANARY_THRESHOLDS, loadReleaseManifest, repoRoot } from '@gatehouse/contracts';
import { inTransaction } from '@gatehouse/ledger';
import { evaluateAction, loadServiceBundles, type DecidingWorkflow } from '@gatehouse/policy';
import { findTool } from '@gatehouse/tools';
import { createAction, seedFinishedRun } from '@gatehouse/testing';
import { createTestDatabase, dropQueuePrefix, testQueuePrefix, TEST_REDIS_URL, type TestDatabase } from '@gatehouse/test-harness';
import { tokenFor } from '@gatehouse/cli';
import { runCli, type CliRun } from '../support/cli-process.ts';

/**
 * Release rel-2 brings support-p2 (R10, the tenant's daily refund cap,
 * docs/decisions/0190-tenant-daily-refund-cap.md): `gatehouse release activate` — the CLI as a
 * process, with an operator's token — passes its gate, makes it a candidate for one tenant
 * (writes disabled), then active for all; the services of rel-2 then deny a refund past the
 * tenant's cap read from the ledger, while rel-1 (support-p1) still allows it.
 */
const SECRET = 'local-auth-secret-change-me';
const HMAC = 'test-audit-hmac-key-0123456789';
let t: TestDatabase;
// Activation resumes the release's queues (ADR 0480): under this test's own prefix, never the default one.
const prefix = testQueuePrefix();
const log = { error: () => {} };

function cli(args: string[], token: string): Promise<CliRun> {
  return runCli(args, {
    RELEASES_DIR: resolve(repoRoot, 'releases'),
    POLICY_DIR: resolve(repoRoot, 'policy'),
    DATABASE_URL: t.url,
    REDIS_URL: TEST_REDIS_URL,
    QUEUE_PREFIX: prefix,
    GATEHOUSE_AUDIT_HMAC_KEY: HMAC,
    GATEHOUSE_TOKEN: token,
  });
}

/** One refund decision of `release`'s services, as the gateway makes it (bundles through the gate, facts from the ledger). */
async function decideRefund(release: string, who: { tenant: string; userId: string; orderId: string; paid: number }, amountCents: number) {
  const bundles = await loadServiceBundles(t.db, { GATEHOUSE_RELEASE: release }, log);
  const wf: DecidingWorkflow = {
    id: randomUUID(),
    release_id: release,
    pack: 'support',
    tenant: who.tenant,
    user_id: who.userId,
    mode: 'act',
    state: 'investigating',
  };
  const order = { id: who.orderId, tenant: who.tenant, region: 'US', paid: who.paid, status: 'shipped' };
  const { decision } = await inTransaction(t.db, (trx) =>
    evaluateAction(trx, {
      wf,
      proposalId: randomUUID(),
      parsed: { tool: findTool('issue_refund')!, args: { orderId: who.orderId, amountCents, reason: 'damaged item' } },
      record: { pack: 'support', order },
      bundles,
    }),
  );
  return `${decision.decision}:${decision.ruleId}:${decision.policyRevision}`;
}

const ivy = { tenant: 'northwind', userId: 'rep-ivy', orderId: 'N-2001', paid: 10_000 };
const ana = { tenant: 'quillfeather', userId: 'rep-ana', orderId: 'O-1002', paid: 50_000 };

beforeAll(async () => {
  t = await createTestDatabase();
  // Northwind's day: five refunds of 49900 (249500 of its own cap 250000), by another user, two
  // hours ago — inside the rolling day (R10), outside the agent's hour (R6) and rep-ivy's day (R5).
  for (let i = 0; i < 5; i++) {
    const a = await createAction(t.db, { orderId: `N-SEED-${i}`, amountCents: 49_900, tenant: 'northwind', userId: 'lead-jon' });
    await t.db
      .updateTable('actions')
      .set({ status: 'succeeded', created_at: sql<Date>`now() - interval '2 hours'` })
      .where('id', '=', a.actionId)
      .execute();
  }
});
afterAll(async () => {
  await dropQueuePrefix(TEST_REDIS_URL, prefix);
  await t?.drop();
});

describe('release rel-2: support-p2 with the tenant daily refund cap', () => {
  it('names support-p2 and otherwise equals rel-1', () => {
    const rel1 = loadReleaseManifest('rel-1', resolve(repoRoot, 'releases'));
    const rel2 = loadReleaseManifest('rel-2', resolve(repoRoot, 'releases'));
    expect(rel2.policy).toEqual({ support: 'support-p2', change: 'change-c1' });
    expect({ ...rel2, id: 'rel-1', description: rel1.description, policy: rel1.policy }).toEqual(rel1);
  });

  it('`gatehouse release activate rel-2` canaries it for northwind, then activates it; rel-2 denies past the cap (R10), rel-1 does not', async () => {
    const ops = await tokenFor('ops-gus', SECRET);
    const first = await cli(['release', 'activate', 'rel-1'], ops);
    expect(first, first.out).toMatchObject({ code: 0 });

    const canary = await cli(['release', 'activate', 'rel-2', '--cohort', 'tenant:northwind'], ops);
    expect(canary.code, canary.out).toBe(0);
    expect(canary.out).toContain('rel-2 is a candidate for tenant:northwind');
    // A candidate's writes start disabled: no refund is eligible yet (R1), whatever the cap.
    expect(await decideRefund('rel-2', ivy, 400)).toBe('DENY:R1:support-p2');

    // Writes come on once the canary analysis has enough clean runs on both sides (ADR 0210).
    for (let i = 0; i < DEFAULT_CANARY_THRESHOLDS.minRuns; i++) {
      await seedFinishedRun(t.db, { release: 'rel-1' });
      await seedFinishedRun(t.db, { release: 'rel-2' });
    }
    const writes = await cli(['release', 'enable-writes', 'rel-2'], ops);
    expect(writes.code, writes.out).toBe(0);
    // 249500 + 500 = 250000: at northwind's cap; one more cent is past it.
    expect(await decideRefund('rel-2', ivy, 500)).toBe('ALLOW:ALL:support-p2');
    expect(await decideRefund('rel-2', ivy, 501)).toBe('DENY:R10:support-p2');
    expect(await decideRefund('rel-1', ivy, 501)).toBe('ALLOW:ALL:support-p1');

    const active = await cli(['release', 'activate', 'rel-2'], ops);
    expect(active.code, active.out).toBe(0);
    expect(active.out).toContain('rel-2 is the active release');
    const releases = await t.db.selectFrom('releases').select(['id', 'status', 'forced']).orderBy('id').execute();
    expect(releases).toEqual([
      { id: 'rel-1', status: 'retired', forced: false },
      { id: 'rel-2', status: 'active', forced: false },
    ]);
    const audit = await t.db.selectFrom('audit_outbox').select('event').execute();
    const activated = audit.map((a) => a.event).filter((e) => e.type === 'release.activated');
    expect(activated.map((e) => `${String(e.outcome)} ${JSON.stringify(e.revisions)}`)).toContainEqual(
      expect.stringMatching(/^active .*"policy":"support-p2,change-c1".*"release":"rel-2"/),
    );
    // Another tenant's refund is judged on its own day: quillfeather has none.
    expect(await decideRefund('rel-2', ana, 1000)).toBe('ALLOW:ALL:support-p2');
    expect(await decideRefund('rel-2', ivy, 501)).toBe('DENY:R10:support-p2');
  });
});
