import { beforeAll, describe, expect, it } from 'vitest';
import { inTransaction, lockReleases, routeRelease } from '@gatehouse/ledger';
import { DEFAULT_CANARY_THRESHOLDS, queueContracts, queueName } from '@gatehouse/contracts';
import { createAction, recordEffect, seedFinishedRun } from '@gatehouse/testing';
import { activateRelease, ActivationRefused, retireCandidate, RetireRefused } from '@gatehouse/operations';
import { lockWaiters } from '@gatehouse/test-harness';
import { releaseCliEnv, releaseRows, RELEASE_OPERATOR as op, threeReleases, useReleaseSuite } from '../support/release-suite.ts';
import { runCli } from '../support/cli-process.ts';
import { openSecondCanary } from '../support/second-canary.ts';

// A second canary could be opened beside an open one (`release activate rel-9 --cohort …` while
// rel-2 was a candidate), and then neither could be promoted (ADR 0716): the only way out was a
// rollback that retired both and turned the active release's writes off. Now the second opening
// is refused, naming the open candidate and the ways on, and `release retire <candidate>` ends
// one canary alone: writes off, drain, its approvals expired, its operations inventoried, its
// cohort back on the active release — whose status and writes are not touched (ADR 0728).

const ana = { tenants: [], users: ['rep-ana'] };
const ben = { tenants: [], users: ['rep-ben'] };
const t = useReleaseSuite();

beforeAll(() => threeReleases(t, { rel2: 'candidate for rep-ana', rel9: 'candidate for rep-ben' }));

const releases = () => releaseRows(t.db);
const candidates = async () => (await releases()).filter((r) => r.status === 'candidate').map((r) => r.id);
const auditTypes = async () =>
  (await t.db.selectFrom('audit_outbox').select('event').orderBy('id').execute()).map((e) => String(e.event.type));
const route = (id: string) => routeRelease(t.db, { id, tenant: 'quillfeather' }, 'none');

describe('a second canary (ADR 0728)', () => {
  it('is refused, naming the open candidate, its cohort and the ways on: nothing changed, nothing audited', async () => {
    await activateRelease(t.db, 'rel-2', { ...op, cohort: ana });
    const [before, events] = [await releases(), await auditTypes()];
    const refused = await activateRelease(t.db, 'rel-9', { ...op, cohort: ben }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ActivationRefused);
    const message = (refused as ActivationRefused).message;
    expect(message).toContain('rel-2 is an open candidate for user:rep-ana');
    expect(message).toContain('gatehouse release retire rel-2 --reason "<why>" (its cohort goes back to rel-1');
    expect(message).toContain('or promote it first: gatehouse release activate rel-2');
    expect(message).toContain('gatehouse release rollback --to rel-1 --reason "<why>"');
    expect(message).toContain('Nothing was changed');
    expect(await releases()).toEqual(before);
    expect(await auditTypes()).toEqual(events);
    expect([await route('rep-ana'), await route('rep-ben')]).toEqual(['rel-2', 'rel-1']);
  });

  it('two openings at once: exactly one opens, the other is refused under the lock (three rounds, behind a barrier)', async () => {
    await retireCandidate(t.db, t.queues, 'rel-2', { ...op, reason: 'start the race from no canary' });
    for (let round = 0; round < 3; round++) {
      expect(await candidates()).toEqual([]);
      let release!: () => void;
      const held = new Promise<void>((r) => (release = r));
      // Hold the releases lock, so both openings pass their first check and wait for it.
      const holder = inTransaction(t.db, async (trx) => {
        await lockReleases(trx);
        await held;
      });
      const openings = Promise.allSettled([
        activateRelease(t.db, 'rel-2', { ...op, cohort: ana }),
        activateRelease(t.db, 'rel-9', { ...op, cohort: ben }),
      ]);
      expect(await lockWaiters(t.db, 2, 30_000)).toBe(true);
      release();
      await holder;
      const results = await openings;
      expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
      const rejected = results.filter((r) => r.status === 'rejected');
      expect(rejected).toHaveLength(1);
      expect((rejected[0] as PromiseRejectedResult).reason).toBeInstanceOf(ActivationRefused);
      const open = await candidates();
      expect(open).toHaveLength(1);
      await retireCandidate(t.db, t.queues, open[0]!, { ...op, reason: `round ${round} over` });
    }
  });
});

describe('release retire <candidate> (ADR 0728)', () => {
  it("ends one canary alone: writes off, drain, approvals expired, operations inventoried, queued jobs counted, audited; the active release's writes untouched", async () => {
    await activateRelease(t.db, 'rel-2', { ...op, cohort: ana });
    await t.db.updateTable('releases').set({ writes_enabled: true }).where('id', '=', 'rel-2').execute();
    const waiting = await createAction(t.db, { orderId: 'O-1002', amountCents: 9000, release: 'rel-2', pendingApproval: {} });
    const running = await createAction(t.db, { orderId: 'O-1003', amountCents: 1000, release: 'rel-2' });
    await recordEffect(t.db, running, { status: 'running' });
    const job = { release: 'rel-2', workflowId: running.workflowId, round: 2 };
    await t.queues.add(
      queueName('turns', 'rel-2'),
      queueContracts.turns.jobName,
      job,
      { jobId: `retire-${running.workflowId}` },
      'quillfeather',
    );
    const rel1Before = (await releases()).find((r) => r.id === 'rel-1');
    expect(await route('rep-ana')).toBe('rel-2');

    const r = await retireCandidate(t.db, t.queues, 'rel-2', { ...op, reason: 'abandon this canary, rel-9 replaces it' });
    expect(r).toMatchObject({
      release: 'rel-2',
      cohort: 'user:rep-ana',
      active: 'rel-1',
      expiredApprovals: 1,
      operations: { running: 1 },
      queuesNotPaused: null,
      queuedJobs: 1,
    });
    expect(r.paused).toContain(queueName('turns', 'rel-2'));
    expect(await t.queues.get(queueName('turns', 'rel-2')).isPaused()).toBe(true);

    const after = await releases();
    expect(after.find((x) => x.id === 'rel-2')).toMatchObject({ status: 'retired', writes_enabled: false, cohort: null, draining: true });
    expect(after.find((x) => x.id === 'rel-1')).toEqual(rel1Before);
    expect(rel1Before).toMatchObject({ status: 'active', writes_enabled: true });
    expect(await route('rep-ana')).toBe('rel-1');
    const approval = await t.db
      .selectFrom('approvals')
      .select('expires_at')
      .where('id', '=', waiting.approvalId!)
      .executeTakeFirstOrThrow();
    expect(approval.expires_at.getTime()).toBeLessThanOrEqual(Date.now());
    // The running operation is left for reconciliation, never turned into a retryable failure.
    const operation = await t.db
      .selectFrom('operations')
      .select('status')
      .where('action_id', '=', running.actionId)
      .executeTakeFirstOrThrow();
    expect(operation.status).toBe('running');
    const retired = await t.db
      .selectFrom('audit_outbox')
      .select('event')
      .where((eb) => eb.ref('event', '->>').key('type'), '=', 'release.retired')
      .execute();
    expect(retired.map((e) => e.event.outcome)).toContainEqual(
      'cohort:user:rep-ana;expired_approvals:1;operations:{"running":1};reason:abandon this canary, rel-9 replaces it',
    );
    // And the next canary opens.
    expect((await activateRelease(t.db, 'rel-9', { ...op, cohort: ben })).status).toBe('candidate');
  });

  it('refuses a release that is not an open candidate — the active one, a retired one, an unknown one — and a missing reason: nothing changed, nothing audited', async () => {
    const [before, events] = [await releases(), await auditTypes()];
    for (const [id, why] of [
      ['rel-1', 'retire_active'],
      ['rel-2', 'retire_retired'],
      ['rel-404', 'retire_not_registered'],
    ] as const) {
      const refused = await retireCandidate(t.db, t.queues, id, { ...op, reason: 'typo' }).catch((e: unknown) => e);
      expect(refused, id).toBeInstanceOf(RetireRefused);
      expect((refused as RetireRefused).reason, id).toBe(why);
      expect((refused as Error).message, id).toContain('nothing was changed');
    }
    await expect(retireCandidate(t.db, t.queues, 'rel-9', { ...op, reason: '  ' })).rejects.toThrow(/release retire needs --reason/);
    expect(await releases()).toEqual(before);
    expect(await auditTypes()).toEqual(events);
    expect(await t.queues.get(queueName('turns', 'rel-1')).isPaused()).toBe(false);
  });

  it("beside a second canary opened before this rule, promotion's refusal names the retirement, which lets the promotion through without reopening (ADR 0716)", async () => {
    // rel-9 is the open candidate; rel-2 a second one, as a ledger from before ADR 0728 may hold.
    await openSecondCanary(t.db, 'rel-2', ana, op);
    for (let i = 0; i < DEFAULT_CANARY_THRESHOLDS.minRuns; i++)
      for (const release of ['rel-1', 'rel-9']) await seedFinishedRun(t.db, { release });
    const refused = await activateRelease(t.db, 'rel-9', op).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ActivationRefused);
    expect((refused as Error).message).toContain('Retire it alone and promote rel-9 again: gatehouse release retire rel-2 --reason');
    await retireCandidate(t.db, t.queues, 'rel-2', { ...op, reason: 'keep the rel-9 canary' });
    expect((await activateRelease(t.db, 'rel-9', op)).status).toBe('active');
    expect((await releases()).map((r) => [r.id, r.status])).toEqual([
      ['rel-1', 'retired'],
      ['rel-2', 'retired'],
      ['rel-9', 'active'],
    ]);
  });

  it(
    'through the CLI: exit 0 with what it did; exit 1 for the active release; exit 2 without --reason (before the token)',
    { timeout: 120_000 },
    async () => {
      t.dirs.writeRelease('rel-10');
      await activateRelease(t.db, 'rel-10', { ...op, cohort: ana });
      const env = await releaseCliEnv(t);
      const usage = await runCli(['release', 'retire', 'rel-10'], env);
      expect(usage.code, usage.out).toBe(2);
      expect(usage.out).toContain('release retire needs --reason <why>');
      expect(await candidates()).toEqual(['rel-10']);
      const done = await runCli(['release', 'retire', 'rel-10', '--reason', 'bad canary'], env);
      expect(done.code, done.out).toBe(0);
      expect(done.out).toContain('retired rel-10: its cohort user:rep-ana goes back to rel-9');
      expect(done.out).toContain('approvals expired: 0');
      expect(await candidates()).toEqual([]);
      const active = await runCli(['release', 'retire', 'rel-9', '--reason', 'typo'], env);
      expect(active.code, active.out).toBe(1);
      expect(active.out).toContain('release rel-9 is the active release, not a candidate');
    },
  );
});
