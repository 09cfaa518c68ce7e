import { beforeAll, describe, expect, it } from 'vitest';
import { routeRelease } from '@gatehouse/ledger';
import { DEFAULT_CANARY_THRESHOLDS } from '@gatehouse/contracts';
import { seedFinishedRun } from '@gatehouse/testing';
import { activateRelease, ActivationRefused, rollbackRelease } from '@gatehouse/operations';
import { auditCount as countAudit, releaseRows, RELEASE_OPERATOR as op, threeReleases, useReleaseSuite } from '../support/release-suite.ts';
import { openSecondCanary } from '../support/second-canary.ts';

// Two candidates could be open at once (`release activate rel-2 --cohort …`, then `release activate
// rel-9 --cohort …`: both allowed before ADR 0728, and a ledger may still hold them). Promoting one of them (`release activate rel-2`) made it
// active, retired rel-1 and left rel-9 a candidate, silently: its cohort's runs, queues and
// approvals went on with rel-9, its canary compared with rel-1, a release no longer active. The
// promotion is now refused while another candidate is open, naming the rollback that ends the
// canaries and the command that opens rel-2's again (ADR 0716). A real ledger, each refusal
// changing nothing.

const t = useReleaseSuite();

beforeAll(async () => {
  await threeReleases(t, { rel2: 'candidate for rep-ana', rel9: 'candidate for rep-ben' });
  await activateRelease(t.db, 'rel-2', { ...op, cohort: { tenants: [], users: ['rep-ana'] } });
  // Refused now (ADR 0728; test/ops/one-canary-at-a-time.test.ts): opened as before that rule.
  await openSecondCanary(t.db, 'rel-9', { tenants: [], users: ['rep-ben'] }, op);
  // Enough clean runs that each candidate's canary analysis passes: a refusal is this rule's, not the analysis'.
  for (let i = 0; i < DEFAULT_CANARY_THRESHOLDS.minRuns; i++)
    for (const release of ['rel-1', 'rel-2', 'rel-9']) await seedFinishedRun(t.db, { release });
});

const releases = () => releaseRows(t.db);
const auditCount = () => countAudit(t.db);
const routes = async () => ({
  ana: await routeRelease(t.db, { id: 'rep-ana', tenant: 'quillfeather' }, 'none'),
  ben: await routeRelease(t.db, { id: 'rep-ben', tenant: 'quillfeather' }, 'none'),
  jon: await routeRelease(t.db, { id: 'lead-jon', tenant: 'northwind' }, 'none'),
});

describe('promoting a candidate while another is open (ADR 0716)', () => {
  it('two candidates open at once (a ledger from before ADR 0728) each route their cohort', async () => {
    expect((await releases()).map((r) => [r.id, r.status])).toEqual([
      ['rel-1', 'active'],
      ['rel-2', 'candidate'],
      ['rel-9', 'candidate'],
    ]);
    expect(await routes()).toEqual({ ana: 'rel-2', ben: 'rel-9', jon: 'rel-1' });
  });

  it('is refused for either candidate, naming the other, the rollback that ends both canaries and the reopening: nothing changed, nothing audited', async () => {
    const [before, events, routed] = [await releases(), await auditCount(), await routes()];
    for (const [id, other, cohort, otherCohort] of [
      ['rel-2', 'rel-9', 'user:rep-ana', 'user:rep-ben'],
      ['rel-9', 'rel-2', 'user:rep-ben', 'user:rep-ana'],
    ]) {
      const refused = await activateRelease(t.db, id!, op).catch((e: unknown) => e);
      expect(refused, id).toBeInstanceOf(ActivationRefused);
      const message = (refused as ActivationRefused).message;
      expect(message).toContain(`${other} is a candidate too, for ${otherCohort}: promoting ${id} would leave it serving that cohort`);
      expect(message).toContain('gatehouse release rollback --to rel-1 --reason "<why>" (retires');
      expect(message).toContain(`Retire it alone and promote ${id} again: gatehouse release retire ${other} --reason "<why>"`);
      expect(message).toContain(`gatehouse release activate ${id} --cohort ${cohort}`);
      expect(message).toContain('Nothing was changed');
    }
    expect(await releases()).toEqual(before);
    expect(await auditCount()).toBe(events);
    expect(await routes()).toEqual(routed);
  });

  it('the way it names works: the rollback retires both, the reopened canary is promoted alone', async () => {
    const rolledBack = (await rollbackRelease(t.db, t.queues, { to: 'rel-1', reason: 'one canary at a time', ...op })).rolledBack;
    expect([...rolledBack].sort()).toEqual(['rel-2', 'rel-9']);
    await activateRelease(t.db, 'rel-2', { ...op, cohort: { tenants: [], users: ['rep-ana'] } });
    // The reopened canary's analysis counts from its reopening: its evidence is gathered again.
    for (let i = 0; i < DEFAULT_CANARY_THRESHOLDS.minRuns; i++)
      for (const release of ['rel-1', 'rel-2']) await seedFinishedRun(t.db, { release });
    expect((await activateRelease(t.db, 'rel-2', op)).status).toBe('active');
    expect((await releases()).map((r) => [r.id, r.status])).toEqual([
      ['rel-1', 'retired'],
      ['rel-2', 'active'],
      ['rel-9', 'retired'],
    ]);
    expect(await routes()).toEqual({ ana: 'rel-2', ben: 'rel-2', jon: 'rel-2' });
  });
});
