import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { copyFileSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { loadReleaseManifest, repoRoot } from '@gatehouse/contracts';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import {
  activateRelease,
  activationNeeds,
  approveOverride,
  raisedLimits,
  requestActivationOverride,
  TwoPersonRequired,
} from '@gatehouse/operations';

/**
 * Two-person release changes (docs/decisions/0230-two-person-release-changes.md): activating a
 * bundle looser than the active one, or forcing one past its gate, needs an override one
 * operator asks for and another approves — bound to exactly what it loosens, used once.
 */
const HMAC = 'test-audit-hmac-key-0123456789';
let t: TestDatabase;
const releasesDir = mkdtempSync(resolve(tmpdir(), 'gh-2p-'));
const policyDir = mkdtempSync(resolve(tmpdir(), 'gh-2p-policy-'));
const gus = { operator: 'ops-gus', hmacKey: HMAC };
const ida = { operator: 'ops-ida', hmacKey: HMAC };

function writeBundle(revision: string, change: (b: { revision: string; approval: { ttlSeconds: number } }) => void): void {
  const b = JSON.parse(readFileSync(resolve(repoRoot, 'policy/support-p1.json'), 'utf8')) as {
    revision: string;
    approval: { ttlSeconds: number };
  };
  b.revision = revision;
  change(b);
  writeFileSync(resolve(policyDir, `${revision}.json`), JSON.stringify(b));
}
function writeRelease(id: string, support: string): void {
  const m = JSON.parse(readFileSync(resolve(repoRoot, 'releases/rel-1.json'), 'utf8')) as { id: string; policy: { support: string } };
  m.id = id;
  m.policy.support = support;
  writeFileSync(resolve(releasesDir, `${id}.json`), JSON.stringify(m));
}

const saved = { RELEASES_DIR: process.env.RELEASES_DIR, POLICY_DIR: process.env.POLICY_DIR };
beforeAll(async () => {
  t = await createTestDatabase();
  for (const f of ['support-p1.json', 'support-p2.json', 'change-c1.json'])
    copyFileSync(resolve(repoRoot, 'policy', f), resolve(policyDir, f));
  copyFileSync(
    resolve(repoRoot, 'packages/policy/test/fixtures/support-units-mistake.json'),
    resolve(policyDir, 'support-units-mistake.json'),
  );
  // Approvals that live 20 minutes instead of 15: passes every boundary case, but is looser.
  writeBundle('support-long-approvals', (b) => (b.approval.ttlSeconds = 1200));
  writeRelease('rel-1', 'support-p1');
  writeRelease('rel-long', 'support-long-approvals');
  writeRelease('rel-p2', 'support-p2');
  process.env.RELEASES_DIR = releasesDir;
  process.env.POLICY_DIR = policyDir;
  await activateRelease(t.db, 'rel-1', gus);
});
afterAll(async () => {
  for (const [k, v] of Object.entries(saved))
    if (v === undefined) delete process.env[k];
    else process.env[k] = v;
  await t?.drop();
});

describe('which bundle changes loosen a limit', () => {
  it('the units mistake raises the maximum and the auto limit; a tighter or added limit raises nothing', () => {
    const m = (support: string) => ({ ...loadReleaseManifest('rel-1'), policy: { support, change: 'change-c1' } });
    expect(raisedLimits(m('support-p1'), m('support-units-mistake'))).toEqual([
      'support.limits.maxRefundCents: 50000 → 5000000',
      'support.limits.autoApproveLimitCents: 5000 → 500000',
    ]);
    expect(raisedLimits(m('support-units-mistake'), m('support-p1'))).toEqual([]);
    expect(raisedLimits(m('support-p1'), m('support-p2'))).toEqual([]); // R10 adds a cap
    expect(raisedLimits(m('support-p1'), m('support-long-approvals'))).toEqual(['support.approval.ttlSeconds: 900 → 1200']);
    expect(raisedLimits(null, m('support-units-mistake'))).toEqual([]);
  });
});

describe('activating a looser bundle', () => {
  it("is refused for one operator and changes nothing; a second operator's approval lets it through once", async () => {
    const before = await t.db.selectFrom('releases').select(['id', 'status']).orderBy('id').execute();
    await expect(activateRelease(t.db, 'rel-long', gus)).rejects.toBeInstanceOf(TwoPersonRequired);
    expect(await t.db.selectFrom('releases').select(['id', 'status']).orderBy('id').execute()).toEqual(before);
    const [need] = await activationNeeds(t.db, 'rel-long', {});
    const id = await requestActivationOverride(t.db, 'rel-long', need!, {
      ...gus,
      reason: 'longer approval window for the EU night shift',
    });
    await expect(approveOverride(t.db, id, gus)).rejects.toMatchObject({ reason: 'requester_cannot_approve' });
    await approveOverride(t.db, id, ida);
    expect(await activateRelease(t.db, 'rel-long', gus)).toMatchObject({ status: 'active' });
    const used = await t.db
      .selectFrom('release_overrides')
      .select(['status', 'approved_by'])
      .where('id', '=', id)
      .executeTakeFirstOrThrow();
    expect(used).toEqual({ status: 'used', approved_by: 'ops-ida' });
  });

  it('an override for one loosening does not cover another; a tighter or equal bundle needs none', async () => {
    // Back to rel-1 (tighter than rel-long): no second person needed.
    await activateRelease(t.db, 'rel-1', gus);
    // An approved override for the 20-minute window, then a bundle that loosens something else.
    const [need] = await activationNeeds(t.db, 'rel-long', {});
    const id = await requestActivationOverride(
      t.db,
      'rel-long',
      { ...need!, items: ['support.limits.maxRefundCents: 50000 → 60000'] },
      { ...gus, reason: 'x' },
    );
    await approveOverride(t.db, id, ida);
    await expect(activateRelease(t.db, 'rel-long', gus)).rejects.toBeInstanceOf(TwoPersonRequired);
    // support-p2 only adds a cap: one operator suffices.
    expect(await activateRelease(t.db, 'rel-p2', gus)).toMatchObject({ status: 'active' });
  });
});
