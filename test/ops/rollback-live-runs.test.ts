import { beforeAll, describe, expect, it } from 'vitest';
import { copyFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { DEFAULT_CANARY_THRESHOLDS, repoRoot } from '@gatehouse/contracts';
import { loadBundle, loadGateCases } from '@gatehouse/policy';
import { createAction, seedFinishedRun } from '@gatehouse/testing';
import { activateRelease, enableWrites, retireCandidate, rollbackRelease } from '@gatehouse/operations';
import { RELEASE_OPERATOR as op, releaseCliEnv, threeReleases, useReleaseSuite } from '../support/release-suite.ts';
import { runCli } from '../support/cli-process.ts';

// A rollback (or a retirement) drains the candidate and moves nothing: its live runs wait there
// until on-call requeues or quarantines them (docs/runbooks/rollback.md step 2). The command told
// on-call so only when jobs were queued in Redis at that moment — but a run waiting on its
// approval has none: the expiry the rollback causes is answered later, onto the drained queue.
// Such a run was stranded with "next: enable-writes" as the only next step printed. The live runs
// are counted from the ledger (as quarantine and requeue choose them: ADR 0673, 0711).
// A promotion retires the former active release the same way as far as its live runs go: they
// stay on it, and stopping its services would strand them; the command names them too.

const t = useReleaseSuite();

beforeAll(() => threeReleases(t, { rel2: 'candidate for rep-ana', rel9: 'candidate for rep-ben' }));

const cliEnv = () => releaseCliEnv(t);

describe('live runs left on a drained release', () => {
  it('a rollback counts them from the ledger and names requeue or quarantine, with no job queued', { timeout: 120_000 }, async () => {
    await activateRelease(t.db, 'rel-2', { ...op, cohort: { tenants: [], users: ['rep-ana'] } });
    // Waiting on a lead: no job of it is queued anywhere.
    await createAction(t.db, { orderId: 'O-1002', amountCents: 9000, release: 'rel-2', pendingApproval: {} });
    const done = await runCli(['release', 'rollback', '--to', 'rel-1', '--reason', 'canary denials doubled'], await cliEnv());
    expect(done.code, done.out).toBe(0);
    expect(done.out).toContain('1 live run(s) and 0 job(s) still on rel-2');
    expect(done.out).toContain('gatehouse queues requeue --from rel-2 --to rel-1');
    expect(done.out).toContain('gatehouse queues quarantine --release rel-2');
  });

  it('the library reports them: a rollback and a retirement', async () => {
    await activateRelease(t.db, 'rel-9', { ...op, cohort: { tenants: [], users: ['rep-ben'] } });
    await createAction(t.db, { orderId: 'O-1002', amountCents: 9000, release: 'rel-9', pendingApproval: {} });
    const retired = await retireCandidate(t.db, t.queues, 'rel-9', { ...op, reason: 'abandon this canary' });
    expect(retired).toMatchObject({ queuedJobs: 0, liveRuns: 1 });
    await activateRelease(t.db, 'rel-9', { ...op, cohort: { tenants: [], users: ['rep-ben'] } });
    const rolled = await rollbackRelease(t.db, t.queues, { to: 'rel-1', reason: 'again', ...op });
    // rel-9's run is still there (nothing moved it); no job is queued for it.
    expect(rolled).toMatchObject({ rolledBack: ['rel-9'], queuedJobs: 0, liveRuns: 1 });
  });
});

describe('a promotion', () => {
  it('names the live runs that stay on the release it retired, and how to keep or move them', { timeout: 120_000 }, async () => {
    t.dirs.writeRelease('rel-10');
    await activateRelease(t.db, 'rel-10', { ...op, cohort: { tenants: [], users: ['rep-ana'] } });
    for (let i = 0; i < DEFAULT_CANARY_THRESHOLDS.minRuns; i++) {
      await seedFinishedRun(t.db, { release: 'rel-1' });
      await seedFinishedRun(t.db, { release: 'rel-10' });
    }
    // rep-ben's refund on rel-1 waits on a lead: it finishes on rel-1, whatever becomes active.
    await createAction(t.db, { orderId: 'O-1002', amountCents: 9000, release: 'rel-1', pendingApproval: {} });
    const done = await runCli(['release', 'activate', 'rel-10'], await cliEnv());
    expect(done.code, done.out).toBe(0);
    expect(done.out).toContain('rel-10 is the active release');
    expect(done.out).toContain("1 live run(s) stay on rel-1, the release each started on: keep rel-1's services running");
    expect(done.out).toContain('gatehouse queues requeue --from rel-1 --to rel-10');
  });
});

describe('the safety cases a release command reports', () => {
  it("count every case its gate ran: a revision's own table (support-p2's R10 cases) included", async () => {
    copyFileSync(resolve(repoRoot, 'policy/support-p2.json'), resolve(t.dirs.policyDir, 'support-p2.json'));
    t.dirs.writeRelease('rel-p2', (m) => ((m.policy as Record<string, string>).support = 'support-p2'));
    await activateRelease(t.db, 'rel-p2', op);
    const gated = loadGateCases(loadBundle('support-p2')).length + loadGateCases(loadBundle('change-c1')).length;
    expect(await enableWrites(t.db, 'rel-p2', op.operator, op.hmacKey)).toMatchObject({ boundaryCases: gated });
  });
});
