import { beforeAll, describe, expect, it } from 'vitest';
import { copyFileSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import type { Worker } from 'bullmq';
import type { Redis } from 'ioredis';
import {
  DEFAULT_CANARY_THRESHOLDS,
  executionsQueue,
  loadReleaseManifest,
  queueContracts,
  queueName,
  repoRoot,
  type ExecutionJob,
} from '@gatehouse/contracts';
import { knownMigrations, registerRelease, releaseForced, releaseWritesEnabled, routeRelease } from '@gatehouse/ledger';
import { createLogger, createWorker, PostgresGate } from '@gatehouse/platform';
import { evaluateAction, loadActiveBundles } from '@gatehouse/policy';
import { findTool } from '@gatehouse/tools';
import { createAction, seedFinishedRun } from '@gatehouse/testing';
import { TEST_REDIS_URL } from '@gatehouse/test-harness';
import {
  CanaryRefused,
  activateRelease,
  ActivationRefused,
  RollbackRefused,
  activationNeeds,
  enableWrites,
  rollbackRelease,
  requestActivationOverride,
  TwoPersonRequired,
  drainRelease,
  quarantineRelease,
  queuedJobs,
  requeueRelease,
  RequeueRefused,
  QueueOpRefused,
  OpsUsageError,
  resumeRelease,
} from '@gatehouse/operations';
import { tokenFor } from '@gatehouse/cli';
import { approvalApi } from '../support/approval-api.ts';
import { runCli, type CliRun } from '../support/cli-process.ts';
import { useReleaseSuite } from '../support/release-suite.ts';

/**
 * Releases, canary and rollback (docs/product/releases.md): activation verifies digests and gates, a
 * candidate serves its cohort with writes disabled, rollback drains and restores, and candidate
 * jobs are requeued or quarantined only by explicit command — never claimed by a former worker.
 */
const SECRET = 'local-auth-secret-change-me';
const HMAC = 'test-audit-hmac-key-0123456789';
const t = useReleaseSuite();

beforeAll(async () => {
  copyFileSync(
    resolve(repoRoot, 'packages/policy/test/fixtures/support-units-mistake.json'),
    resolve(t.dirs.policyDir, 'support-units-mistake.json'),
  );
  t.dirs.writeRelease('rel-1');
  t.dirs.writeRelease('rel-2', (m) => (m.description = 'candidate'));
  t.dirs.writeRelease('rel-3', (m) => (m.payloadVersion = 2));
  t.dirs.writeRelease('rel-bad', (m) => ((m.policy as Record<string, string>).support = 'support-units-mistake'));
  t.dirs.writeRelease('rel-tampered', (m) => ((m.toolCatalog as Record<string, string>).support = '0'.repeat(64)));
  t.dirs.writeRelease('rel-old-schema', (m) => (m.schemaVersion = '20261130000100-CreateLedger'));
});

const op = { operator: 'ops-gus', hmacKey: HMAC };

/** One valid payload per queue contract of `release`, for workflow `workflowId`. */
function jobsFor(release: string, workflowId: string): Array<{ base: keyof typeof queueContracts; payload: Record<string, unknown> }> {
  return [
    { base: 'turns', payload: { release, workflowId, round: 2 } },
    { base: 'proposals', payload: { release, workflowId, proposalId: randomUUID(), callId: 'call_1' } },
    { base: 'approval-requests', payload: { release, workflowId, actionId: randomUUID(), actionVersion: 1 } },
    { base: 'executions', payload: { release, workflowId, actionId: randomUUID(), actionVersion: 1, approvalId: null } },
    {
      base: 'results',
      payload: { release, workflowId, callId: 'call_1', output: { source: 'gatehouse', trust: 'gatehouse', executed: false } },
    },
    // The reconciliation pass carries no workflow.
    { base: 'reconcile', payload: { release, trigger: 'manual' } },
  ];
}

async function enqueueAll(release: string, workflowId: string): Promise<void> {
  for (const { base, payload } of jobsFor(release, workflowId)) {
    const contract = queueContracts[base];
    const parsed = contract.schema.parse(payload);
    // As the outbox relay adds them: with the tenant's fair priority (ADR 0500).
    await t.queues.add(queueName(base, release), contract.jobName, parsed, { jobId: contract.jobId(parsed as never) }, 'northwind');
  }
}

describe('release activation', () => {
  it('refuses a manifest whose digests differ from the code, and a bundle that fails its gate unless forced (audited)', async () => {
    await expect(activateRelease(t.db, 'rel-tampered', op)).rejects.toThrow(/toolCatalog.support digest differs/);
    // A manifest naming an older schema than the code needs (the newest migration) is refused too.
    await expect(activateRelease(t.db, 'rel-old-schema', op)).rejects.toThrow(
      /schemaVersion 20261130000100-CreateLedger is not the newest migration of this code/,
    );
    const refused = await activateRelease(t.db, 'rel-bad', op).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ActivationRefused);
    expect((refused as ActivationRefused).problems.join('\n')).toContain('R7 just above auto limit');
    expect(await t.db.selectFrom('releases').selectAll().execute()).toEqual([]);

    // Forcing past the gate takes a second operator (ADR 0230): refused, nothing recorded, until
    // one operator asks and another approves; the override is bound to these failing cases.
    await expect(activateRelease(t.db, 'rel-bad', { ...op, force: true })).rejects.toBeInstanceOf(TwoPersonRequired);
    expect(await t.db.selectFrom('releases').selectAll().execute()).toEqual([]);
    const [forceNeed] = await activationNeeds(t.db, 'rel-bad', { force: true });
    expect(forceNeed?.kind).toBe('force_gate');
    const ask = await requestActivationOverride(t.db, 'rel-bad', forceNeed!, { ...op, reason: 'drill: the units mistake' });
    const api = approvalApi(t.db);
    expect(JSON.stringify((await api.decide(op.operator, ask.approvalId)).body)).toContain('requester_cannot_approve');
    expect((await api.decide('ops-ida', ask.approvalId)).status).toBe(200);
    const forced = await activateRelease(t.db, 'rel-bad', { ...op, force: true });
    expect(forced).toMatchObject({ status: 'active', forced: true });
    expect(await releaseForced(t.db, 'rel-bad')).toBe(true);
    const audit = await t.db.selectFrom('audit_outbox').select('event').execute();
    expect(audit.map((a) => `${String(a.event.type)} ${String(a.event.outcome)}`)).toContainEqual(
      expect.stringMatching(/^release.activated active:forced_past_\d+_gate_failures$/),
    );
    // Put rel-1 back as the active release for the rest of the suite.
    expect(await activateRelease(t.db, 'rel-1', op)).toMatchObject({ status: 'active', forced: false });
    expect((await t.db.selectFrom('releases').select(['id', 'status']).orderBy('id').execute()).map((r) => `${r.id}:${r.status}`)).toEqual([
      'rel-1:active',
      'rel-bad:retired',
    ]);
  });

  it('a candidate serves only its cohort and has consequential writes disabled at the policy boundary until enable-writes', async () => {
    await activateRelease(t.db, 'rel-2', { ...op, cohort: { tenants: [], users: ['rep-ana'] } });
    expect(await routeRelease(t.db, { id: 'rep-ana', tenant: 'quillfeather' }, 'rel-1')).toBe('rel-2');
    expect(await routeRelease(t.db, { id: 'rep-ben', tenant: 'quillfeather' }, 'rel-1')).toBe('rel-1');
    expect(await releaseWritesEnabled(t.db, 'rel-2')).toBe(false);

    const a = await createAction(t.db, { orderId: 'O-1002', amountCents: 1000, decision: 'ALLOW', release: 'rel-2' });
    const wf = await t.db.selectFrom('workflows').selectAll().where('id', '=', a.workflowId).executeTakeFirstOrThrow();
    const bundles = loadActiveBundles({ support: 'support-p1', change: 'change-c1' });
    const decide = () =>
      t.db.transaction().execute((trx) =>
        evaluateAction(trx, {
          wf,
          proposalId: randomUUID(),
          parsed: { tool: findTool('issue_refund')!, args: { orderId: 'O-1002', amountCents: 1000, reason: 'x' } },
          record: { pack: 'support', order: { id: 'O-1002', tenant: 'quillfeather', region: 'US', paid: 12000, status: 'delivered' } },
          bundles,
        }),
      );
    expect((await decide()).decision).toMatchObject({ decision: 'DENY', ruleId: 'R1' });
    // Not before its canary analysis has enough clean runs on both sides (test/ops/canary.test.ts).
    await expect(enableWrites(t.db, 'rel-2', 'ops-gus', HMAC)).rejects.toBeInstanceOf(CanaryRefused);
    for (let i = 0; i < DEFAULT_CANARY_THRESHOLDS.minRuns; i++) {
      await seedFinishedRun(t.db, { release: 'rel-1' });
      await seedFinishedRun(t.db, { release: 'rel-2' });
    }
    await enableWrites(t.db, 'rel-2', 'ops-gus', HMAC);
    expect((await decide()).decision).toMatchObject({ decision: 'ALLOW', ruleId: 'ALL' });
  });
});

describe('rollback rehearsal', () => {
  it('no former worker runs a candidate job; rollback drains, expires approvals, restores; every candidate job requeued by command', async () => {
    // rel-2 is a candidate with writes enabled (previous test); jobs sit in every candidate queue.
    const wf2 = await createAction(t.db, { orderId: 'O-1002', amountCents: 12000, release: 'rel-2' }); // approved, unconsumed
    await enqueueAll('rel-2', wf2.workflowId);
    // A former (rel-1) worker: a candidate-tagged job put on its queue is refused, never handled.
    let handled = 0;
    // The release its workflow is on when a job runs here: a requeued job must find it on rel-1.
    const releaseAtRun: string[] = [];
    const worker: Worker = createWorker(
      executionsQueue,
      async (job) => {
        handled++;
        const w = await t.db.selectFrom('workflows').select('release_id').where('id', '=', job.workflowId).executeTakeFirst();
        releaseAtRun.push(w?.release_id ?? 'none');
      },
      {
        release: 'rel-1',
        prefix: t.prefix,
        redisUrl: TEST_REDIS_URL,
        log: createLogger('test'),
        gate: new PostgresGate(t.db, createLogger('test')),
      },
    );
    try {
      const stray = executionsQueue.schema.parse(jobsFor('rel-2', wf2.workflowId)[3]!.payload) as ExecutionJob;
      const q1 = t.queues.get(queueName('executions', 'rel-1'));
      await q1.add('execution', stray, { jobId: 'stray_rel2', attempts: 1 });
      // The worker has just started (connect, first fetch): give it a deadline, not 100 polls of 50 ms.
      for (const until = Date.now() + 60_000; (await q1.getJobState('stray_rel2')) !== 'failed' && Date.now() < until;)
        await new Promise((r) => setTimeout(r, 50));
      expect(await q1.getJobState('stray_rel2')).toBe('failed');
      expect((await q1.getJob('stray_rel2'))?.failedReason).toMatch(/quarantined: job of release rel-2/);
      expect(handled).toBe(0);

      const steps: string[] = [];
      const report = await rollbackRelease(t.db, t.queues, {
        to: 'rel-1',
        reason: 'canary denials doubled',
        onStep: (l) => steps.push(l),
        ...op,
      });
      expect(report).toMatchObject({ to: 'rel-1', rolledBack: ['rel-2'], expiredApprovals: 1, queuedJobs: 6, safety: [] });
      // Each step reported as it ran, in the runbook's order.
      expect(steps.map((l) => l.slice(0, 4))).toEqual(['1/6 ', '2/6 ', '3/6 ', '4/6 ', '5/6 ', '6/6 ']);
      expect(steps[5]).toMatch(/safety cases of rel-1: pass \(\d+ boundary cases/);
      // The restored release comes back with consequential writes off, until enable-writes.
      expect(await releaseWritesEnabled(t.db, 'rel-1')).toBe(false);
      const rolled = await t.db.selectFrom('audit_outbox').select('event').execute();
      expect(
        rolled
          .map((a) => a.event)
          .filter((e) => e.type === 'release.rolled_back')
          .at(-1)?.outcome,
      ).toBe('from:rel-2;expired_approvals:1;writes:off;reason:canary denials doubled');
      expect(await enableWrites(t.db, 'rel-1', 'ops-gus', HMAC)).toMatchObject({ id: 'rel-1', forcedPast: [] });
      expect(await releaseWritesEnabled(t.db, 'rel-1')).toBe(true);
      expect(await releaseWritesEnabled(t.db, 'rel-2')).toBe(false);
      expect(await t.queues.get(queueName('turns', 'rel-2')).isPaused()).toBe(true);
      const approval = await t.db.selectFrom('approvals').select('expires_at').where('id', '=', wf2.approvalId!).executeTakeFirstOrThrow();
      expect(new Date(approval.expires_at).getTime()).toBeLessThanOrEqual(Date.now());
      expect(await routeRelease(t.db, { id: 'rep-ana', tenant: 'quillfeather' }, 'rel-1')).toBe('rel-1');
      // Rollback moves nothing by itself.
      expect(await queuedJobs(t.queues, 'rel-2')).toHaveLength(6);
      expect(handled).toBe(0);

      const moved = await requeueRelease(t.db, t.queues, 'rel-2', 'rel-1', op);
      expect(moved).toEqual({ moved: 6, refused: 0, pausedWorkflows: 0 });
      expect(await queuedJobs(t.queues, 'rel-2')).toHaveLength(0);
      const wf = await t.db.selectFrom('workflows').select('release_id').where('id', '=', wf2.workflowId).executeTakeFirstOrThrow();
      expect(wf.release_id).toBe('rel-1');
      for (const base of ['turns', 'proposals', 'approval-requests', 'results'] as const) {
        const jobs = await t.queues.get(queueName(base, 'rel-1')).getJobs(['waiting', 'paused', 'delayed', 'prioritized']);
        expect(jobs.map((j) => (j.data as { release: string }).release)).toEqual(['rel-1']);
      }
      // The moved execution job ran on rel-1's worker at once, and its workflow was already on rel-1
      // (moved before the job, or its next job would go to rel-2's drained queue). Wait for what the
      // handler records after its read, not for `handled`: that counts the job before its await.
      for (const until = Date.now() + 60_000; releaseAtRun.length < 1 && Date.now() < until;) await new Promise((r) => setTimeout(r, 50));
      expect(releaseAtRun).toEqual(['rel-1']);
    } finally {
      await worker.close();
    }
  });

  it('a candidate whose payload version the former release does not accept: requeue refused, quarantine keeps every job in the ledger', async () => {
    await activateRelease(t.db, 'rel-3', { ...op, cohort: { tenants: ['northwind'], users: [] } });
    const wf3 = await createAction(t.db, {
      orderId: 'N-2001',
      amountCents: 1000,
      decision: 'ALLOW',
      userId: 'rep-ivy',
      tenant: 'northwind',
      release: 'rel-3',
    });
    await enqueueAll('rel-3', wf3.workflowId);
    await rollbackRelease(t.db, t.queues, { to: 'rel-1', reason: 'payload version 2 rejected', ...op });
    await expect(requeueRelease(t.db, t.queues, 'rel-3', 'rel-1', op)).rejects.toBeInstanceOf(RequeueRefused);
    expect(await queuedJobs(t.queues, 'rel-3')).toHaveLength(6);
    expect((await quarantineRelease(t.db, t.queues, 'rel-3', op)).jobs).toBe(6);
    expect(await queuedJobs(t.queues, 'rel-3')).toHaveLength(0);
    // the tenant's fair tags went with the jobs (ADR 0500): its next job starts at the clock
    const tags = Object.keys(queueContracts).map((b) => `${t.queues.get(queueName(b, 'rel-3')).keys['']}fair-tags`);
    expect(await (t.queues.connection as Redis).exists(...tags)).toBe(0);
    const kept = await t.db.selectFrom('quarantined_jobs').selectAll().where('release_id', '=', 'rel-3').execute();
    expect(kept.map((k) => k.queue).sort()).toEqual(
      Object.keys(queueContracts)
        .map((b) => queueName(b, 'rel-3'))
        .sort(),
    );
    expect(
      kept.every((k) => k.workflow_id === (k.queue.startsWith('reconcile.') ? null : wf3.workflowId) && k.quarantined_by === 'ops-gus'),
    ).toBe(true);
    const wf = await t.db
      .selectFrom('workflows')
      .select(['state', 'stop_reason'])
      .where('id', '=', wf3.workflowId)
      .executeTakeFirstOrThrow();
    expect(wf).toEqual({ state: 'stopped', stop_reason: 'quarantined' });
    // The stop is in the audit trail like any other (stopRun: one run.stopped event per stopped run).
    const stops = (await t.db.selectFrom('audit_outbox').select('event').execute())
      .map((r) => r.event as { type: string; runId: string | null; outcome: string | null; service: string })
      .filter((e) => e.type === 'run.stopped' && e.runId === wf3.workflowId);
    expect(stops).toEqual([expect.objectContaining({ outcome: 'quarantined', service: 'ops' })]);
  });
});

describe('rollback as a runbook (docs/runbooks/rollback.md)', () => {
  it('needs a reason, and changes nothing without one', async () => {
    const before = await t.db.selectFrom('releases').select(['id', 'status', 'writes_enabled']).orderBy('id').execute();
    const events = (await t.db.selectFrom('audit_outbox').select('id').execute()).length;
    for (const reason of ['', '   ', 'x'.repeat(501), 'bad\u0000reason'])
      await expect(rollbackRelease(t.db, t.queues, { to: 'rel-1', reason, ...op })).rejects.toThrow(/reason/);
    expect(await t.db.selectFrom('releases').select(['id', 'status', 'writes_enabled']).orderBy('id').execute()).toEqual(before);
    expect((await t.db.selectFrom('audit_outbox').select('id').execute()).length).toBe(events);
  });

  it('a restored release that fails its safety cases keeps writes off: enable-writes refuses it', async () => {
    // rel-bad (units mistake) was registered by the forced activation above; a rollback to a
    // never-forced copy of it restores a bundle that fails its gate.
    t.dirs.writeRelease('rel-bad-unforced', (m) => ((m.policy as Record<string, string>).support = 'support-units-mistake'));
    // A former release of this ledger (a rollback restores only one that ran here, ADR 0660).
    await t.db
      .insertInto('releases')
      .values({
        id: 'rel-bad-unforced',
        manifest: JSON.stringify(loadReleaseManifest('rel-bad-unforced')),
        status: 'retired',
        first_active_at: new Date(),
      })
      .execute();
    const steps: string[] = [];
    const r = await rollbackRelease(t.db, t.queues, { to: 'rel-bad-unforced', reason: 'drill', onStep: (l) => steps.push(l), ...op });
    expect(r.safety.join('\n')).toContain('R7 just above auto limit');
    expect(steps[5]).toMatch(/FAIL — writes stay off/);
    expect(await releaseWritesEnabled(t.db, 'rel-bad-unforced')).toBe(false);
    const refused = await enableWrites(t.db, 'rel-bad-unforced', 'ops-gus', HMAC).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ActivationRefused);
    expect((refused as ActivationRefused).problems.join('\n')).toContain('R7 just above auto limit');
    expect(await releaseWritesEnabled(t.db, 'rel-bad-unforced')).toBe(false);
    // Back to rel-1 with writes on for the rest of the suite.
    await rollbackRelease(t.db, t.queues, { to: 'rel-1', reason: 'restore the corrected bundle', ...op });
    await enableWrites(t.db, 'rel-1', 'ops-gus', HMAC);
    expect(await releaseWritesEnabled(t.db, 'rel-1')).toBe(true);
    // A drain by the rollback away from rel-1 does not outlive the rollback back to it.
    expect(await t.queues.get(queueName('turns', 'rel-1')).isPaused()).toBe(false);
  });

  it('a rollback to the only active release is refused and changes nothing: its writes stay on', async () => {
    const before = await t.db.selectFrom('releases').select(['id', 'status', 'writes_enabled', 'draining']).orderBy('id').execute();
    expect(before.filter((r) => r.status === 'active' || r.status === 'candidate').map((r) => r.id)).toEqual(['rel-1']);
    const events = (await t.db.selectFrom('audit_outbox').select('id').execute()).length;
    await expect(rollbackRelease(t.db, t.queues, { to: 'rel-1', reason: 'typo', ...op })).rejects.toBeInstanceOf(RollbackRefused);
    expect(await t.db.selectFrom('releases').select(['id', 'status', 'writes_enabled', 'draining']).orderBy('id').execute()).toEqual(
      before,
    );
    expect(await releaseWritesEnabled(t.db, 'rel-1')).toBe(true);
    expect((await t.db.selectFrom('audit_outbox').select('id').execute()).length).toBe(events);
  });
});

describe('ops commands need an operator token', () => {
  const commands: string[][] = [
    ['switch', 'off', 'issue_refund'],
    ['switch', 'on', 'issue_refund'],
    ['epoch', 'bump'],
    ['reconcile'],
    ['release', 'activate', 'rel-2', '--cohort', 'user:rep-ana'],
    ['release', 'enable-writes', 'rel-1'],
    ['release', 'rollback', '--to', 'rel-1', '--reason', 'rehearsal'],
    // In the order an operator runs them: a release's queued work is moved or set aside while it drains.
    ['queues', 'drain', '--release', 'rel-2'],
    ['queues', 'quarantine', '--release', 'rel-2'],
    ['queues', 'requeue', '--from', 'rel-2', '--to', 'rel-1'],
    ['queues', 'resume', '--release', 'rel-2'],
  ];

  function run(args: string[], token: string | null): Promise<CliRun> {
    return runCli(args, {
      DATABASE_URL: t.url,
      REDIS_URL: TEST_REDIS_URL,
      QUEUE_PREFIX: t.prefix,
      GATEHOUSE_AUDIT_HMAC_KEY: HMAC,
      STAGING_URL: 'http://127.0.0.1:9',
      GATEHOUSE_TOKEN: token ?? '',
    });
  }

  it('a rollback without a reason is a usage error: exit 2 and nothing recorded, before the token is even checked', async () => {
    const events = (await t.db.selectFrom('audit_outbox').select('id').execute()).length;
    const r = await run(['release', 'rollback', '--to', 'rel-1'], await tokenFor('ops-gus', SECRET));
    expect(r.code, r.out).toBe(2);
    expect(r.out).toContain('release rollback needs --reason');
    expect((await t.db.selectFrom('audit_outbox').select('id').execute()).length).toBe(events);
  });

  it(
    'every ops command refuses a rep token, a forged token and no token — each refusal audited, nothing changed',
    { timeout: 240_000 },
    async () => {
      const repToken = await tokenFor('rep-ana', SECRET);
      const forged = await tokenFor('ops-gus', 'not-the-secret');
      const before = await t.db.selectFrom('releases').select(['id', 'status', 'writes_enabled', 'cohort']).orderBy('id').execute();
      const epochBefore = await t.db.selectFrom('credential_epochs').select('epoch').executeTakeFirstOrThrow();
      // Every command with a rep's token; a forged and a missing token on a few (each is a process).
      const cases = [
        ...commands.map((args) => ({ args, label: 'rep', token: repToken as string | null, reason: 'not_an_operator' })),
        { args: commands[0]!, label: 'forged', token: forged, reason: 'invalid_token' },
        { args: commands[2]!, label: 'none', token: null, reason: 'missing_token' },
      ];
      for (let i = 0; i < cases.length; i += 4) {
        await Promise.all(
          cases.slice(i, i + 4).map(async (c) => {
            const r = await run(c.args, c.token);
            expect(r.code, `${c.args.join(' ')} as ${c.label}: ${r.out}`).toBe(3); // not authorized
            expect(r.out).toContain(`refused (${c.reason})`);
          }),
        );
      }
      const refusals = await t.db
        .selectFrom('audit_outbox')
        .select('event')
        .where((eb) => eb.ref('event', '->>').key('type'), '=', 'ops.refused')
        .execute();
      expect(refusals.length).toBe(cases.length);
      expect(await t.db.selectFrom('releases').select(['id', 'status', 'writes_enabled', 'cohort']).orderBy('id').execute()).toEqual(
        before,
      );
      expect(await t.db.selectFrom('tool_switches').selectAll().execute()).toEqual([]);
      expect(await t.db.selectFrom('credential_epochs').select('epoch').executeTakeFirstOrThrow()).toEqual(epochBefore);
      expect(await t.queues.get(queueName('turns', 'rel-1')).isPaused()).toBe(false);
    },
  );

  it('with the operator token each command runs and writes its audit event', { timeout: 240_000 }, async () => {
    const opsToken = await tokenFor('ops-gus', SECRET);
    const types: string[] = [];
    for (const args of commands) {
      const before = await t.db
        .selectFrom('audit_outbox')
        .select(({ fn }) => fn.max('id').as('id'))
        .executeTakeFirstOrThrow();
      const r = await run(args, opsToken);
      expect(r.out, args.join(' ')).not.toContain('refused (');
      const after = await t.db
        .selectFrom('audit_outbox')
        .select('event')
        .where('id', '>', String(before.id ?? 0))
        .execute();
      expect(after.length, `${args.join(' ')}: ${r.out}`).toBeGreaterThan(0);
      types.push(...after.map((a) => String(a.event.type)));
    }
    for (const type of [
      'switch.changed',
      'epoch.bumped',
      'release.activated',
      'release.writes_enabled',
      'release.rolled_back',
      'queues.drained',
      'queues.quarantined',
      'queues.requeued',
    ]) {
      expect(types).toContain(type);
    }
  });

  it('typos are usage errors (exit 2, nothing ran): an unknown tool, a requeue onto the release it comes from', async () => {
    const opsToken = await tokenFor('ops-gus', SECRET);
    const events = (await t.db.selectFrom('audit_outbox').select('id').execute()).length;
    for (const args of [
      ['switch', 'off', 'no_such_tool'],
      ['reenable', 'advance', 'no_such_tool', '--reason', 'typo'],
      ['queues', 'requeue', '--from', 'rel-2', '--to', 'rel-2'],
    ]) {
      const r = await run(args, opsToken);
      expect(r.code, `${args.join(' ')}: ${r.out}`).toBe(2);
    }
    expect((await run(['switch', 'off', 'no_such_tool'], opsToken)).out).toContain('unknown tool no_such_tool: one of lookup_order');
    expect((await t.db.selectFrom('audit_outbox').select('id').execute()).length).toBe(events);
    expect(await t.db.selectFrom('tool_switches').selectAll().where('tool', '=', 'no_such_tool').execute()).toEqual([]);
  });

  it(
    'migrate down reverts only the latest migration, for an operator; --all needs --confirm <database>',
    { timeout: 240_000 },
    async () => {
      const applied = async () =>
        (await sql<{ name: string }>`SELECT name FROM kysely_migration ORDER BY name`.execute(t.db)).rows.map((r) => r.name);
      const all = await applied();
      expect(all.at(-1)).toBe(knownMigrations().at(-1));
      const database = new URL(t.url).pathname.slice(1);
      // A rep is refused, and --all without the database's name is refused before anything runs.
      const rep = await run(['migrate', 'down'], await tokenFor('rep-ana', SECRET));
      expect(rep.code).toBe(3); // not authorized (apps/cli/src/commands.ts EXIT)
      expect(rep.out).toContain('refused (not_an_operator)');
      const opsToken = await tokenFor('ops-gus', SECRET);
      const unconfirmed = await run(['migrate', 'down', '--all'], opsToken);
      expect(unconfirmed.code).toBe(2); // a usage error: nothing ran
      expect(unconfirmed.out).toContain(`--confirm ${database}`);
      expect(await applied()).toEqual(all);
      // The operator reverts exactly one migration (audited), and migrate up applies it again.
      const down = await run(['migrate', 'down'], opsToken);
      expect(down.code, down.out).toBe(0);
      expect(down.out).toContain(`reverted ${all.at(-1)}`);
      expect(await applied()).toEqual(all.slice(0, -1));
      const audited = await t.db
        .selectFrom('audit_outbox')
        .select('event')
        .where((eb) => eb.ref('event', '->>').key('outcome'), '=', 'migrate down')
        .execute();
      expect(audited.map((a) => a.event.type)).toEqual(['ops.command']);
      const up = await run(['migrate', 'up'], null);
      expect(up.code, up.out).toBe(0);
      expect(await applied()).toEqual(all);
    },
  );
});

describe('schema changes stay backward compatible until acceptance', () => {
  it('no migration after the first drops, renames or retypes anything, and every added column is nullable or defaulted', () => {
    // Every migration after the first (the ones a candidate may bring).
    const files = knownMigrations().slice(1);
    expect(files.length).toBeGreaterThanOrEqual(5);
    for (const f of files) {
      const text = readFileSync(resolve(repoRoot, 'migrations', `${f}.ts`), 'utf8');
      const up = text.slice(text.indexOf('export async function up'), text.indexOf('export async function down'));
      expect(up, f).not.toMatch(/\bDROP\b|\bRENAME\b|ALTER COLUMN|SET NOT NULL/i);
      for (const add of up.matchAll(/ADD COLUMN ([^,;]+)/gi)) {
        const col = add[1]!;
        if (/NOT NULL/i.test(col)) expect(col, `${f}: ${col}`).toMatch(/DEFAULT/i);
      }
    }
  });

  it("the former release's queries read rows the candidate wrote", async () => {
    await registerRelease(t.db, 'rel-1', {});
    // Rows only the candidate's schema knows about (cohort, draining, approver role, quarantined jobs) exist now;
    // the former release's own column lists still read releases and approvals.
    const releases = await t.db
      .selectFrom('releases')
      .select(['id', 'manifest', 'status', 'writes_enabled', 'created_at', 'activated_at'])
      .execute();
    expect(releases.length).toBeGreaterThan(0);
    const approvals = await t.db
      .selectFrom('approvals')
      .select([
        'id',
        'workflow_id',
        'action_id',
        'action_version',
        'action_digest',
        'policy_revision',
        'tool',
        'tenant',
        'region',
        'amount_cents',
        'requester',
        'rule_id',
        'status',
        'approver',
        'expires_at',
      ])
      .execute();
    expect(approvals.length).toBeGreaterThan(0);
  });
});

describe('queued work is moved or set aside only from a draining release', () => {
  it('quarantine and requeue refuse a release whose workers still serve it; requeue refuses a target that would not run the jobs', async () => {
    const active = await t.db.selectFrom('releases').select('id').where('status', '=', 'active').executeTakeFirstOrThrow();
    await t.db.updateTable('releases').set({ draining: false }).where('id', '=', active.id).execute();
    const wf = await createAction(t.db, {
      orderId: 'O-1001',
      amountCents: 1000,
      decision: 'ALLOW',
      userId: 'rep-ana',
      tenant: 'quillfeather',
      release: active.id,
    });
    const earlier = new Set((await queuedJobs(t.queues, active.id)).map((q) => q.job.id));
    await enqueueAll(active.id, wf.workflowId);
    const queued = (await queuedJobs(t.queues, active.id)).length;
    expect(queued).toBeGreaterThan(earlier.size);
    const live = await t.db.selectFrom('workflows').select('state').where('id', '=', wf.workflowId).executeTakeFirstOrThrow();
    try {
      await expect(quarantineRelease(t.db, t.queues, active.id, op)).rejects.toThrow(
        new RegExp(`release ${active.id} is active and not draining.*gatehouse queues drain --release ${active.id}`),
      );
      await expect(quarantineRelease(t.db, t.queues, active.id, op)).rejects.toBeInstanceOf(QueueOpRefused);
      await expect(requeueRelease(t.db, t.queues, active.id, 'rel-2', op)).rejects.toBeInstanceOf(QueueOpRefused);
      await expect(requeueRelease(t.db, t.queues, active.id, active.id, op)).rejects.toThrow('the two releases must differ');
      await expect(requeueRelease(t.db, t.queues, active.id, active.id, op)).rejects.toBeInstanceOf(OpsUsageError);
      // Nothing moved, nothing set aside, the live run goes on.
      expect(await queuedJobs(t.queues, active.id)).toHaveLength(queued);
      expect(await t.db.selectFrom('quarantined_jobs').select('job_id').where('release_id', '=', active.id).execute()).toEqual([]);
      expect(await t.db.selectFrom('workflows').select('state').where('id', '=', wf.workflowId).executeTakeFirstOrThrow()).toEqual(live);

      // From a draining release, onto a release that is not registered, retired or draining: refused.
      await drainRelease(t.db, t.queues, active.id, op);
      await expect(requeueRelease(t.db, t.queues, active.id, 'rel-9', op)).rejects.toThrow('release rel-9 is not registered');
      const retired = await t.db
        .selectFrom('releases')
        .select('id')
        .where('status', '=', 'retired')
        .where('draining', '=', false)
        .orderBy('id')
        .executeTakeFirstOrThrow();
      await expect(requeueRelease(t.db, t.queues, active.id, retired.id, op)).rejects.toThrow(`release ${retired.id} is retired`);
      expect(await queuedJobs(t.queues, active.id)).toHaveLength(queued);
    } finally {
      for (const { job } of await queuedJobs(t.queues, active.id)) if (!earlier.has(job.id)) await job.remove();
      await resumeRelease(t.db, t.queues, active.id, op);
    }
  });
});

describe('operator typos are refused, not reported as done', () => {
  it('drain and quarantine of a release that is not registered are refused; a missing manifest is named', async () => {
    await expect(drainRelease(t.db, t.queues, 'rel-9', op)).rejects.toThrow('release rel-9 is not registered');
    await expect(quarantineRelease(t.db, t.queues, 'rel-9', op)).rejects.toThrow('release rel-9 is not registered');
    expect(await t.queues.get(queueName('turns', 'rel-9')).isPaused()).toBe(false);
    expect(() => loadReleaseManifest('rel-9')).toThrow(/no release manifest rel-9 \(looked for .*rel-9\.json\)/);
  });
});
