import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import { resolve } from 'node:path';
import { repoRoot } from '@gatehouse/contracts';
import { releaseWritesEnabled, type Db } from '@gatehouse/ledger';
import { seedFinishedRun } from '@gatehouse/testing';
import { createTestDatabase, TEST_REDIS_URL, testQueuePrefix, type TestDatabase } from '@gatehouse/test-harness';
import { tokenFor } from '@gatehouse/cli';
import { activateRelease, enableWrites, analyzeCanary, CanaryRefused, formatAnalysis, requestCanaryOverride } from '@gatehouse/operations';
import { approvalApi } from '../support/approval-api.ts';
import { useReleaseDirs, type ReleaseDirs } from '../support/release-dirs.ts';

/**
 * Canary analysis (docs/decisions/0210-canary-analysis.md): a candidate's cohort is compared with
 * the baseline over the same window; enable-writes and promotion refuse a candidate whose
 * analysis fails or has too few runs, unless a second person (a policy owner or another operator)
 * approved an override through the approval service — bound to what failed, single use, audited.
 */
const SECRET = 'local-auth-secret-change-me';
const HMAC = 'test-audit-hmac-key-0123456789';
let dirs: ReleaseDirs;
const gus = { operator: 'ops-gus', hmacKey: HMAC };
const ida = { operator: 'ops-ida', hmacKey: HMAC };
const THRESHOLDS = { minRuns: 5, maxTaskSuccessDrop: 0.1, maxP95TerminalRatio: 1.5, maxErrorRateIncrease: 0.1, maxCostPerRunRatio: 1.25 };
/** Each candidate's own ledger: one canary is open at a time (ADR 0728). */
const ledgers = new Map<string, TestDatabase>();

beforeAll(() => {
  dirs = useReleaseDirs();
  for (const id of ['rel-1', 'rel-good', 'rel-unsafe', 'rel-slow', 'rel-thin', 'rel-withheld', 'rel-withheld-unsafe'])
    dirs.writeRelease(id, (m) => (m.canary = THRESHOLDS));
});

/** A fresh ledger with rel-1 active for everyone and `id` opened as the only candidate, for rep-ana. */
async function openCanary(id: string): Promise<Db> {
  const t = await createTestDatabase();
  ledgers.set(id, t);
  await activateRelease(t.db, 'rel-1', gus);
  await activateRelease(t.db, id, { ...gus, cohort });
  return t.db;
}

/** The ledger {@link openCanary} opened `id` in. */
function ledger(id: string): TestDatabase {
  const t = ledgers.get(id);
  if (!t) throw new Error(`no canary of ${id} was opened`);
  return t;
}

/** The baseline's runs in a candidate's window: 8 completed in 10 s at 1000 µ$, no denial. */
async function baselineRuns(db: Db): Promise<void> {
  for (let i = 0; i < 8; i++) await seedFinishedRun(db, { release: 'rel-1', seconds: 10 });
}
afterAll(async () => {
  dirs?.restore();
  for (const t of ledgers.values()) await t.drop();
});

const cohort = { tenants: [], users: ['rep-ana'] };

describe('release analyze', () => {
  it('a candidate no worse than the baseline passes, and enable-writes then runs', async () => {
    const db = await openCanary('rel-good');
    await baselineRuns(db);
    for (let i = 0; i < 6; i++) await seedFinishedRun(db, { release: 'rel-good', seconds: 11 });
    const a = await analyzeCanary(db, 'rel-good');
    expect(a.verdict).toBe('pass');
    expect(a.measures.candidate).toMatchObject({ runs: 6, terminal: 6, taskSuccess: 1, unsafePerRun: 0, failedUnknownPerRun: 0 });
    expect(a.rows.every((r) => r.ok)).toBe(true);
    expect(await enableWrites(db, 'rel-good', 'ops-gus', HMAC)).toMatchObject({ canary: 'pass' });
    expect(await releaseWritesEnabled(db, 'rel-good')).toBe(true);
  });

  it('a named baseline is another, registered release: the candidate itself (it would tie and pass) or an unknown id is refused', async () => {
    const db = ledger('rel-good').db;
    await expect(analyzeCanary(db, 'rel-good', { baseline: 'rel-good' })).rejects.toThrow(
      expect.objectContaining({ reason: 'same_release', message: expect.stringContaining('the baseline must be another release') }),
    );
    await expect(analyzeCanary(db, 'rel-good', { baseline: 'rel-nope' })).rejects.toThrow('release rel-nope is not registered');
    expect((await analyzeCanary(db, 'rel-good', { baseline: 'rel-1' })).verdict).toBe('pass');
  });

  it('one more denial per run fails the safety measure with no tolerance; enable-writes and promotion refuse', async () => {
    const db = await openCanary('rel-unsafe');
    await baselineRuns(db);
    for (let i = 0; i < 6; i++) await seedFinishedRun(db, { release: 'rel-unsafe', seconds: 10, denied: i === 0 ? 1 : 0 });
    const a = await analyzeCanary(db, 'rel-unsafe');
    expect(a.verdict).toBe('fail');
    expect(a.rows.filter((r) => !r.ok).map((r) => [r.measure, r.safety])).toEqual([['unsafe_per_run', true]]);
    await expect(enableWrites(db, 'rel-unsafe', 'ops-gus', HMAC)).rejects.toBeInstanceOf(CanaryRefused);
    // Its promotion is refused too (an override used by enable-writes or by the promotion: the last describe).
    await expect(activateRelease(db, 'rel-unsafe', gus)).rejects.toBeInstanceOf(CanaryRefused);
    expect(await releaseWritesEnabled(db, 'rel-unsafe')).toBe(false);
    const r = await db.selectFrom('releases').select('status').where('id', '=', 'rel-unsafe').executeTakeFirstOrThrow();
    expect(r.status).toBe('candidate');
  });

  it('slower runs fail p95 past the manifest ratio; a failed_unknown fails its safety measure', async () => {
    const db = await openCanary('rel-slow');
    await baselineRuns(db);
    for (let i = 0; i < 6; i++) await seedFinishedRun(db, { release: 'rel-slow', seconds: 16, failedUnknown: i === 0 ? 1 : 0 });
    const a = await analyzeCanary(db, 'rel-slow');
    expect(a.rows.filter((r) => !r.ok).map((r) => r.measure)).toEqual(['p95_terminal_s', 'failed_unknown_per_run']);
  });

  it('too few runs is insufficient and refuses like a failure', async () => {
    const db = await openCanary('rel-thin');
    await baselineRuns(db);
    for (let i = 0; i < 2; i++) await seedFinishedRun(db, { release: 'rel-thin' });
    expect((await analyzeCanary(db, 'rel-thin')).verdict).toBe('insufficient');
    await expect(enableWrites(db, 'rel-thin', 'ops-gus', HMAC)).rejects.toBeInstanceOf(CanaryRefused);
  });

  it('runs that completed with their writes withheld are no evidence: however many, the candidate is insufficient, and the analysis says why (ADR 0724)', async () => {
    const db = await openCanary('rel-withheld');
    await baselineRuns(db);
    // Act-mode runs before enable-writes: only read tools offered, fast, cheap and all "completed".
    for (let i = 0; i < 8; i++)
      await seedFinishedRun(db, { release: 'rel-withheld', seconds: 4, spendMicroUsd: 300, writesWithheld: true });
    const a = await analyzeCanary(db, 'rel-withheld');
    expect(a.measures.candidate).toMatchObject({ runs: 8, writesWithheld: 8, terminal: 0, taskSuccess: null, unsafePerRun: 0 });
    expect(a.verdict).toBe('insufficient');
    expect(formatAnalysis(a).join('\n')).toContain(
      'left out (completed with writes off, only read tools offered): baseline 0, candidate 8',
    );
    const refused = await enableWrites(db, 'rel-withheld', 'ops-gus', HMAC).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(CanaryRefused);
    expect((refused as Error).message).toContain(
      "fewer than 5 terminal runs on a side (8 of the candidate's completed with writes withheld, not counted)",
    );
    expect(await releaseWritesEnabled(db, 'rel-withheld')).toBe(false);
    // Runs it could judge count as before: with five of them the candidate passes.
    for (let i = 0; i < 5; i++) await seedFinishedRun(db, { release: 'rel-withheld', seconds: 10 });
    const judged = await analyzeCanary(db, 'rel-withheld');
    expect(judged.measures.candidate).toMatchObject({ runs: 13, writesWithheld: 8, terminal: 5, taskSuccess: 1 });
    expect(judged.verdict).toBe('pass');
  });

  it('a withheld run still counts for the safety measures: its denial fails unsafe_per_run', async () => {
    const db = await openCanary('rel-withheld-unsafe');
    await baselineRuns(db);
    for (let i = 0; i < 6; i++) await seedFinishedRun(db, { release: 'rel-withheld-unsafe', seconds: 10 });
    await seedFinishedRun(db, { release: 'rel-withheld-unsafe', seconds: 4, writesWithheld: true, denied: 1 });
    const a = await analyzeCanary(db, 'rel-withheld-unsafe');
    expect(a.measures.candidate).toMatchObject({ runs: 7, writesWithheld: 1, terminal: 6, taskSuccess: 1 });
    expect(a.rows.filter((r) => !r.ok).map((r) => [r.measure, r.safety])).toEqual([['unsafe_per_run', true]]);
  });
});

describe('two-person override', () => {
  it('the requester cannot approve; a second operator can, through the approval API; it is used once and bound to what failed', async () => {
    const db = ledger('rel-unsafe').db;
    const api = approvalApi(db);
    const { approvalId: id } = await requestCanaryOverride(db, 'rel-unsafe', { ...gus, reason: 'the denial is a known test ticket' });
    const own = await api.decide('ops-gus', id);
    expect(own.status).toBe(403);
    expect(JSON.stringify(own.body)).toContain('requester_cannot_approve');
    // Not approved yet: still refused.
    await expect(enableWrites(db, 'rel-unsafe', 'ops-gus', HMAC)).rejects.toBeInstanceOf(CanaryRefused);
    expect(await api.decide('ops-ida', id)).toMatchObject({ status: 200, body: { status: 'approved' } });
    // The approver's own decision sent again is its answer again (ADR 0726); anyone else's is too late.
    expect(await api.decide('ops-ida', id)).toMatchObject({ status: 200, body: { status: 'approved', replayed: true } });
    expect((await api.decide('pol-hal', id)).status).toBe(410);
    expect(await enableWrites(db, 'rel-unsafe', 'ops-gus', HMAC)).toMatchObject({ canary: 'override' });
    expect(await releaseWritesEnabled(db, 'rel-unsafe')).toBe(true);
    // Used: a second enable-writes would need its own override (so does the promotion: the last describe).
    const used = await db.selectFrom('approvals').select('status').where('id', '=', id).executeTakeFirstOrThrow();
    expect(used.status).toBe('used');
    const events = (await db.selectFrom('audit_outbox').select('event').execute()).map((e) => String(e.event.type));
    for (const type of ['release.override_requested', 'approval.decided', 'release.override_used']) expect(events).toContain(type);
  });

  it('an override approved for one failure does not cover another', async () => {
    const db = ledger('rel-thin').db;
    const api = approvalApi(db);
    const { approvalId: id } = await requestCanaryOverride(db, 'rel-thin', { ...ida, reason: 'low traffic tenant' });
    expect((await api.decide('ops-gus', id)).status).toBe(200);
    // More runs arrive, now failing cost instead of being insufficient.
    for (let i = 0; i < 6; i++) await seedFinishedRun(db, { release: 'rel-thin', spendMicroUsd: 5000 });
    await expect(enableWrites(db, 'rel-thin', 'ops-ida', HMAC)).rejects.toBeInstanceOf(CanaryRefused);
    expect(await releaseWritesEnabled(db, 'rel-thin')).toBe(false);
    const o = await db.selectFrom('approvals').select('status').where('id', '=', id).executeTakeFirstOrThrow();
    expect(o.status).toBe('approved');
  });

  it('an analysis that passes has nothing to override', async () => {
    const db = ledger('rel-good').db;
    await expect(requestCanaryOverride(db, 'rel-good', { ...gus, reason: 'x' })).rejects.toThrow(/nothing to override/);
  });
});

describe('the CLI', () => {
  it('release analyze prints the table and its verdict; exit 1 unless it passes', { timeout: 120_000 }, async () => {
    const token = await tokenFor('ops-gus', SECRET);
    const run = (args: string[], url: string) =>
      new Promise<{ code: number; out: string }>((done) =>
        execFile(
          process.execPath,
          [resolve(repoRoot, 'apps/cli/src/main.ts'), ...args],
          {
            cwd: repoRoot,
            timeout: 60_000,
            env: {
              ...process.env,
              DATABASE_URL: url,
              REDIS_URL: TEST_REDIS_URL,
              QUEUE_PREFIX: testQueuePrefix(),
              GATEHOUSE_AUDIT_HMAC_KEY: HMAC,
              GATEHOUSE_TOKEN: token,
              LOG_LEVEL: 'warn',
            },
          },
          (err, stdout, stderr) => done({ code: err ? Number(err.code ?? 1) : 0, out: stdout + stderr }),
        ),
      );
    const slow = await run(['release', 'analyze', 'rel-slow'], ledger('rel-slow').url);
    expect(slow.code, slow.out).toBe(1);
    expect(slow.out).toMatch(/p95_terminal_s .*FAIL/);
    expect(slow.out).toMatch(/failed_unknown_per_run .*FAIL \(safety\)/);
    expect(slow.out).toContain('verdict: FAIL');
    const good = await run(['release', 'analyze', 'rel-good', '--json'], ledger('rel-good').url);
    expect(good.code, good.out).toBe(0);
    expect(JSON.parse(good.out.slice(good.out.indexOf('{'))) as { verdict: string }).toMatchObject({ verdict: 'pass' });
  });
});

describe('promotion of the only open candidate', () => {
  let t2: TestDatabase;
  beforeAll(async () => {
    dirs.writeRelease('rel-lone', (m) => (m.canary = THRESHOLDS));
    t2 = await createTestDatabase();
    await activateRelease(t2.db, 'rel-1', gus);
  });
  afterAll(async () => {
    await t2?.drop();
  });

  it('runs the analysis: refused while it fails; an override is used by one promotion or one enable-writes, not both', async () => {
    const api2 = approvalApi(t2.db);
    await activateRelease(t2.db, 'rel-lone', { ...gus, cohort });
    for (let i = 0; i < 8; i++) await seedFinishedRun(t2.db, { release: 'rel-1', seconds: 10 });
    for (let i = 0; i < 6; i++) await seedFinishedRun(t2.db, { release: 'rel-lone', seconds: 10, denied: i === 0 ? 1 : 0 });
    await expect(activateRelease(t2.db, 'rel-lone', gus)).rejects.toBeInstanceOf(CanaryRefused);
    const first = await requestCanaryOverride(t2.db, 'rel-lone', { ...gus, reason: 'the denial is a known test ticket' });
    expect((await api2.decide('ops-ida', first.approvalId)).status).toBe(200);
    expect(await enableWrites(t2.db, 'rel-lone', 'ops-gus', HMAC)).toMatchObject({ canary: 'override' });
    // Single use: the promotion needs its own.
    await expect(activateRelease(t2.db, 'rel-lone', gus)).rejects.toBeInstanceOf(CanaryRefused);
    const second = await requestCanaryOverride(t2.db, 'rel-lone', { ...gus, reason: 'still the known test ticket' });
    expect((await api2.decide('ops-ida', second.approvalId)).status).toBe(200);
    await activateRelease(t2.db, 'rel-lone', gus);
    const r = await t2.db.selectFrom('releases').select(['id', 'status']).orderBy('id').execute();
    expect(r).toEqual([
      { id: 'rel-1', status: 'retired' },
      { id: 'rel-lone', status: 'active' },
    ]);
  });
});
