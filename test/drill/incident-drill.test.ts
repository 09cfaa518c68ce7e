import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { copyFileSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { repoRoot, resetTestFaultsForTests } from '@gatehouse/contracts';
import { startE2EStack, type E2EStack } from '@gatehouse/test-harness';
import { cli } from '../hard-cases/helpers.ts';
import { DrillRun, type DrillContext, type DrillPlan } from './support/drill.ts';
import { formatReport, writeReport, type DrillReport } from './support/report.ts';

/**
 * The incident drill of docs/product/hard-cases.md#units-mistake at scale, on a simulated clock
 * (docs/decisions/0320-drill-on-a-simulated-clock.md; report format: docs/runbooks/incident-drill.md):
 * three hours of traffic, one ticket per 90 s (120 tickets) across both tenants and all four reps
 * who may refund, under rel-1 (support-p1); the units-mistake bundle forced through the two-person
 * path at 47.5 min, just before tickets asking above the 500.00 delegation ceiling (seed 54: three
 * of them, then one between 50.00 and 500.00); the monitor pass every 30 simulated seconds; its alert starts containment
 * (switch off + epoch bump); on-call rolls back to rel-1 ten minutes later and the held work resumes
 * under it; reconciliation selects the violations by their own properties, a lead ratifies or
 * reverses each; zero unexplained differences. Then the same drill, shorter, with two controls
 * removed — the monitor for its first 10 minutes, the switch at execution — fails on each.
 */
const DAY_MS = 86_400_000;
const releasesDir = mkdtempSync(resolve(tmpdir(), 'gh-drill-releases-'));
const policyDir = mkdtempSync(resolve(tmpdir(), 'gh-drill-policy-'));
const clockFile = resolve(mkdtempSync(resolve(tmpdir(), 'gh-drill-clock-')), 'clock.json');
let s: E2EStack;
let ctx: DrillContext;

/** rel-1 as shipped, and `ids` as copies of it naming the units-mistake bundle. */
function writeReleases(ids: string[]): void {
  for (const f of ['support-p1.json', 'change-c1.json']) copyFileSync(resolve(repoRoot, 'policy', f), resolve(policyDir, f));
  writeFileSync(resolve(policyDir, 'support-units-mistake.json'), JSON.stringify(wholeBundleInDollars()));
  const rel1 = JSON.parse(readFileSync(resolve(repoRoot, 'releases/rel-1.json'), 'utf8')) as Record<string, unknown>;
  writeFileSync(resolve(releasesDir, 'rel-1.json'), JSON.stringify(rel1));
  for (const id of ids) {
    const manifest = { ...rel1, id, description: 'the units mistake', policy: { support: 'support-units-mistake', change: 'change-c1' } };
    writeFileSync(resolve(releasesDir, `${id}.json`), JSON.stringify(manifest));
  }
}

/**
 * The units mistake as the drill plays it: the fixture's bundle with every money limit written in
 * dollars where cents are read — the per-user day (R5) and the agent's hour (R6) too, not only the
 * maximum and the auto limit. With R5 still in cents, a rep's day (near its 1,000.00 by then)
 * decided by timing whether any ticket above the 500.00 delegation ceiling passed policy, so the
 * payments ledger's ceiling was exercised in some runs and not in others; now every such ticket
 * under the mistake reaches the ledger, which refuses it on the token's ceiling.
 */
function wholeBundleInDollars(): Record<string, unknown> {
  const fixture = resolve(repoRoot, 'packages/policy/test/fixtures/support-units-mistake.json');
  const bundle = JSON.parse(readFileSync(fixture, 'utf8')) as { limits: Record<string, number>; description: string };
  const limits = { ...bundle.limits };
  limits.userRolling24hCents = limits.userRolling24hCents! * 100;
  limits.agentRolling1hCents = limits.agentRolling1hCents! * 100;
  return { ...bundle, limits, description: `${bundle.description} The drill's copy: the user's day and the agent's hour in dollars too.` };
}

beforeAll(async () => {
  writeReleases(['rel-units', 'rel-units-c']);
  s = await startE2EStack({
    RELEASES_DIR: releasesDir,
    POLICY_DIR: policyDir,
    // The drill runs the monitor pass itself, on the simulated clock; the service's own timer stays out of the way.
    MONITOR_INTERVAL_MS: '3600000',
    // The service's default anchor cadence: each monitor pass verifies the chain and its anchors.
    AUDIT_ANCHOR_INTERVAL_MS: '30000',
    RECONCILE_INTERVAL_MS: '0',
    EXPIRY_SWEEP_MS: '500',
    GATEHOUSE_TEST_SIM_CLOCK_FILE: clockFile,
  });
  ctx = { s, policyDir, clockFile };
}, 300_000);

afterAll(async () => {
  await s?.close();
});

const plan = (p: Partial<DrillPlan> & Pick<DrillPlan, 'tag' | 'seed' | 'tickets' | 'firstOrder' | 'badRelease'>): DrillPlan => ({
  everyS: 90,
  forceAtS: 0,
  rollbackAfterS: 600,
  aheadMs: 0,
  ...p,
});

function show(r: DrillReport): void {
  console.log(`${formatReport(r)}\ntimeline:\n${r.timeline.join('\n')}`);
}

describe('incident drill at scale: the units mistake on a simulated clock', () => {
  it(
    '120 tickets over three simulated hours: forced → alert → containment → rollback → reconciliation, zero unexplained',
    { timeout: 480_000 },
    async () => {
      // The gate refuses the bundle, and forcing it alone is refused: it takes a second person (ADR 0230).
      await expect(cli(s, ['release', 'activate', 'rel-units'])).rejects.toThrow(/R7 just above auto limit/);
      await expect(cli(s, ['release', 'activate', 'rel-units', '--force'])).rejects.toThrow(
        /needs a second person \(a policy owner or another operator\) for: force_gate .*raise_limits/,
      );
      const report = await new DrillRun(
        ctx,
        plan({ tag: 'D', seed: 54, tickets: 120, firstOrder: 4000, badRelease: 'rel-units', forceAtS: 2850 }),
      ).run();
      show(report);
      writeReport(resolve(repoRoot, 'test-results/drill-report.json'), report);
      // The whole report in the failure's message: CI keeps the message, not the test's output.
      expect(report.verdict, `${formatReport(report)}\ntimeline:\n${report.timeline.join('\n')}`).toEqual([]);
      const units = report.rows.find((r) => r.revision === 'support-units-mistake')!;
      expect(units.overLimitWithoutApproval, 'the mistake did damage').toBeGreaterThan(0);
      expect(units.blockedByCeiling, "the payments ledger's token ceiling bounded it").toBeGreaterThan(0);
      expect(report.rows.find((r) => r.revision === 'support-p1')!.refundsPaid).toBeGreaterThan(units.refundsPaid);
      expect(report.effectsAfterContainment).toBe(0);
      expect(report.reconciliation.unexplainedAfter).toBe(0);
      expect(report.paymentsDisagreements).toEqual([]);
      // One 30 s cadence plus the pass itself.
      expect(report.times.secondsToAlert).toBeLessThan(40);
    },
  );

  it(
    'controls removed: without the monitor (GATEHOUSE_TEST_DISABLE_MONITORS) no alert for 10 minutes while violations go on; without the switch at execution (GATEHOUSE_TEST_DISABLE_SWITCH) containment runs, yet refunds are paid',
    { timeout: 300_000 },
    async () => {
      const env = process.env.GATEHOUSE_ENV;
      process.env.GATEHOUSE_ENV = 'test';
      resetTestFaultsForTests();
      try {
        const report = await new DrillRun(
          ctx,
          plan({
            tag: 'C',
            seed: 28,
            tickets: 14,
            firstOrder: 5000,
            badRelease: 'rel-units-c',
            aheadMs: 2 * DAY_MS,
            monitorRemovedUntilS: 600,
            badEnv: { GATEHOUSE_TEST_DISABLE_SWITCH: '1' },
          }),
        ).run();
        show(report);
        // The monitor removed: the first violation goes unreported past two passes, and more follow.
        expect(report.times.secondsToAlert).toBeGreaterThan(60);
        expect(report.verdict.some((v) => /^alert .* after the first violation$/.test(v))).toBe(true);
        // The switch removed at execution: containment ran on the (late) alert, yet refunds were paid after it.
        expect(report.times.containedAt).not.toBeNull();
        expect(report.effectsAfterContainment).toBeGreaterThan(0);
        expect(report.verdict.some((v) => /refund effect\(s\) after containment/.test(v))).toBe(true);
      } finally {
        delete process.env.GATEHOUSE_TEST_DISABLE_MONITORS;
        process.env.GATEHOUSE_ENV = env;
        resetTestFaultsForTests();
      }
    },
  );
});
