import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '@gatehouse/contracts';
import {
  assertGatePasses,
  loadBoundaryCases,
  loadBundle,
  loadBundleFile,
  loadGateCases,
  loadSupportBundleFile,
  policyRevisions,
  runBoundaryGate,
  type BoundaryCase,
} from '../src/index.ts';

const fixtures = resolve(import.meta.dirname, 'fixtures');
const broken = resolve(fixtures, 'support-units-mistake.json');

describe('boundary-case gate', () => {
  it('covers every limit at, just below and just above its boundary', () => {
    const names = loadBoundaryCases('support').map((c) => c.name);
    for (const rule of ['R0', 'R1', 'R2', 'R3', 'R4', 'R5', 'R6', 'R7', 'R8', 'R9'])
      expect(names.some((n) => n.startsWith(rule))).toBe(true);
    for (const edge of ['just below maximum', 'at maximum', 'just above maximum', 'at auto limit', 'just above auto limit']) {
      expect(names.some((n) => n.includes(edge))).toBe(true);
    }
  });

  it('passes for every bundle in policy/', () => {
    const bundles = readdirSync(resolve(repoRoot, 'policy')).filter((f) => f.endsWith('.json'));
    expect(bundles.sort()).toEqual(['change-c1.json', 'support-p1.json', 'support-p2.json']);
    for (const file of bundles) expect(runBoundaryGate(loadBundle(file.replace(/\.json$/, '')))).toEqual([]);
  });

  it('rejects the units-mistake bundle (dollars written where cents are read) and names the boundaries', () => {
    const failures = runBoundaryGate(loadSupportBundleFile(broken));
    const names = failures.map((f) => f.name);
    expect(names).toContain('R7 just above auto limit');
    expect(names).toContain('R3 just above maximum');
    expect(names).toContain('R7 cumulative: second 4900');
    expect(() => assertGatePasses(loadSupportBundleFile(broken))).toThrow(/boundary-case gate/);
  });

  it('`gatehouse policy check` exits 1 for the broken bundle and 0 for support-p1', () => {
    const run = (arg: string) =>
      spawnSync(process.execPath, [resolve(repoRoot, 'apps/cli/src/main.ts'), 'policy', 'check', arg], { encoding: 'utf8' });
    const bad = run(broken);
    expect(bad.status).toBe(1);
    expect(bad.stdout).toContain('FAIL R7 just above auto limit');
    expect(bad.stdout).toContain('REFUSED');
    const good = run('support-p1');
    expect(good.status).toBe(0);
    const change = run('change-c1');
    expect(change.status, change.stdout + change.stderr).toBe(0);
    expect(change.stdout).toMatch(/change-c1: (\d+) of \1 boundary cases pass/);
  });

  it('support-p2 adds its own table (R10 at, below and above each tenant cap; another tenant unaffected); support-p1 keeps its own', () => {
    const p2 = loadBundle('support-p2');
    const own = (loadGateCases(p2) as BoundaryCase[]).filter((c) => c.name.startsWith('R10'));
    for (const edge of ['one cent below', 'at its', 'one cent above']) {
      for (const tenant of ['quillfeather', 'northwind'])
        expect(own.some((c) => c.name.includes(tenant) && c.name.includes(edge))).toBe(true);
    }
    expect(own.some((c) => c.name.includes('second tenant unaffected'))).toBe(true);
    expect(loadGateCases(loadBundle('support-p1'))).toEqual(loadBoundaryCases('support'));
    // support-p1 would fail p2's cases: the gate really tries R10.
    expect(runBoundaryGate(loadBundle('support-p1'), own).map((f) => f.got.ruleId)).toContain('ALL');
    const run = spawnSync(process.execPath, [resolve(repoRoot, 'apps/cli/src/main.ts'), 'policy', 'check', 'support-p2'], {
      encoding: 'utf8',
    });
    expect(run.status, run.stdout + run.stderr).toBe(0);
    expect(run.stdout).toMatch(new RegExp(`support-p2: (\\d+) of \\1 boundary cases pass`));
    expect(Number(/of (\d+)/.exec(run.stdout)?.[1])).toBe(loadBoundaryCases('support').length + own.length);
  });

  it('a service refuses to boot with a bundle that fails the gate (activation refused)', () => {
    const boot = spawnSync(process.execPath, [resolve(repoRoot, 'services/policy-gateway/src/main.ts')], {
      encoding: 'utf8',
      timeout: 20_000,
      env: {
        ...process.env,
        POLICY_DIR: fixtures,
        POLICY_REVISION: 'support-units-mistake',
        // The override of the release's revision is a test's only (ADR 0774).
        GATEHOUSE_ENV: 'test',
        POLICY_GATEWAY_PORT: '0',
        QUEUE_PREFIX: 'gh-gate-test',
        LOG_LEVEL: 'error',
      },
    });
    expect(boot.status).not.toBe(0);
    expect(boot.stderr).toContain('fails its boundary-case gate');
  });

  // A service of rel-1 started with POLICY_REVISION set to another bundle ran it: one that passes
  // the gate but is looser (any region's lead approves) booted with no second person, no audit,
  // and `release verify rel-1` still matching. Outside tests a service runs its release's revisions.
  it("a service runs its release manifest's policy revisions: an override naming another is refused outside tests", () => {
    const base = { GATEHOUSE_RELEASE: 'rel-1' };
    for (const GATEHOUSE_ENV of ['production', 'local'] as const) {
      expect(() => policyRevisions({ ...base, GATEHOUSE_ENV, POLICY_REVISION: 'support-any-region' })).toThrow(
        /POLICY_REVISION=support-any-region: release rel-1 runs support-p1/,
      );
      expect(() => policyRevisions({ ...base, GATEHOUSE_ENV, CHANGE_POLICY_REVISION: 'change-c2' })).toThrow(
        /CHANGE_POLICY_REVISION=change-c2: release rel-1 runs change-c1/,
      );
      // Naming the manifest's own revision changes nothing.
      expect(policyRevisions({ ...base, GATEHOUSE_ENV, POLICY_REVISION: 'support-p1' })).toEqual({
        support: 'support-p1',
        change: 'change-c1',
      });
    }
    expect(policyRevisions({ ...base, GATEHOUSE_ENV: 'test', POLICY_REVISION: 'support-units-mistake' })).toEqual({
      support: 'support-units-mistake',
      change: 'change-c1',
    });
  });

  it('the change pack: every tool gated at, before and after its allowed states; change-c1 passes', () => {
    const cases = loadBoundaryCases('change');
    for (const rule of ['C0', 'C1', 'C2', 'C3', 'C4', 'C5']) expect(cases.some((c) => c.name.startsWith(rule))).toBe(true);
    for (const tool of ['lookup_change', 'prepare_change', 'schedule_change']) {
      const states = new Set(cases.filter((c) => c.tool === tool).map((c) => c.state));
      expect(states.size, tool).toBeGreaterThanOrEqual(3);
    }
    expect(runBoundaryGate(loadBundle('change-c1'))).toEqual([]);
  });

  it('rejects a change bundle whose approval rule runs before the state and scope checks', () => {
    const failures = runBoundaryGate(loadBundleFile(resolve(fixtures, 'change-order-mistake.json')));
    const names = failures.map((f) => f.name);
    expect(names).toContain('C1 schedule not allowed while investigating');
    expect(names).toContain('C1 engineer without the schedule scope');
    expect(failures.every((f) => f.got.ruleId === 'C5')).toBe(true);
  });

  // A support approval rule (R7 refunds, R9 reships) decides the action when it runs first: run
  // ahead of a deny rule that applies to the same tool, it sends for a lead's approval what that
  // rule denies (a refund over the user's day, a reship of another region's or an unshipped
  // order). Every such move must fail the gate, in support-p1 and support-p2.
  it('rejects a support bundle that runs an approval rule before a deny rule of the same tool', () => {
    const mustFollow: Record<string, string[]> = {
      R7: ['R0', 'R1', 'R2', 'R3', 'R4', 'R5', 'R6', 'R10'],
      R9: ['R0', 'R1', 'R2', 'R8'],
    };
    const passing: string[] = [];
    for (const base of [loadBundle('support-p1'), loadBundle('support-p2')]) {
      const order = base.ruleOrder as readonly string[];
      for (const [approval, denies] of Object.entries(mustFollow)) {
        for (const deny of denies.filter((d) => order.includes(d))) {
          const moved = order.filter((r) => r !== approval);
          moved.splice(moved.indexOf(deny), 0, approval);
          const bundle = { ...base, ruleOrder: moved } as typeof base;
          if (!runBoundaryGate(bundle, loadGateCases(base)).length) passing.push(`${base.revision}: ${approval} before ${deny}`);
        }
      }
    }
    expect(passing).toEqual([]);
  });

  it('a support bundle whose approver is not a lead, or whose approvals last over a day, does not load', () => {
    const b = JSON.parse(readFileSync(resolve(repoRoot, 'policy/support-p1.json'), 'utf8')) as Record<string, unknown>;
    const dir = mkdtempSync(resolve(tmpdir(), 'gh-policy-'));
    for (const [name, approval, issue] of [
      ['support-rep-approves', { ttlSeconds: 900, approverRole: 'rep', sameRegion: true }, /approval\.approverRole: /],
      ['support-ms-as-s', { ttlSeconds: 900_000, approverRole: 'lead', sameRegion: true }, /approval\.ttlSeconds: .*86400/],
    ] as const) {
      const file = resolve(dir, `${name}.json`);
      writeFileSync(file, JSON.stringify({ ...b, revision: name, approval }));
      expect(() => loadBundleFile(file), name).toThrow(issue);
    }
  });

  it('a change bundle with an approval lifetime above 600 s does not load', () => {
    const b = JSON.parse(readFileSync(resolve(repoRoot, 'policy/change-c1.json'), 'utf8')) as Record<string, unknown>;
    const file = resolve(mkdtempSync(resolve(tmpdir(), 'gh-policy-')), 'change-long.json');
    writeFileSync(file, JSON.stringify({ ...b, approval: { ttlSeconds: 900, approverRole: 'change_owner', sameRegion: false } }));
    // One line per issue, with its path: what an operator running `policy check` reads.
    expect(() => loadBundleFile(file)).toThrow(/is invalid:\n {2}approval\.ttlSeconds: .*600/);
  });
});
