import { beforeAll, describe, expect, it } from 'vitest';
import { releaseWritesEnabled, routeRelease } from '@gatehouse/ledger';
import { DEFAULT_CANARY_THRESHOLDS } from '@gatehouse/contracts';
import { seedFinishedRun } from '@gatehouse/testing';
import { activateRelease, ActivationRefused, retireCandidate, rollbackRelease, RollbackRefused } from '@gatehouse/operations';
import { auditCount as countAudit, releaseRows, RELEASE_OPERATOR as op, threeReleases, useReleaseSuite } from '../support/release-suite.ts';

// Release commands an operator can mistype, each refused before anything changes: a cohort
// given to the active release (it would become a candidate with writes off, leaving no active
// release), and a rollback "to" the open candidate or to a release this ledger never ran (it
// would be promoted to everyone without its canary analysis or a second person; ADR 0660), and
// an activation for everyone beside an open candidate (it would keep serving its cohort; ADR 0704).

const t = useReleaseSuite();

beforeAll(() => threeReleases(t, { rel2: 'candidate', rel9: 'never ran here' }));

const releases = () => releaseRows(t.db);
const auditCount = () => countAudit(t.db);

describe('release commands an operator can mistype', () => {
  it('activating the active release with a cohort is refused: it stays active for everyone, writes on', async () => {
    const [before, events] = [await releases(), await auditCount()];
    const refused = await activateRelease(t.db, 'rel-1', { ...op, cohort: { tenants: [], users: ['rep-ana'] } }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ActivationRefused);
    expect((refused as ActivationRefused).message).toMatch(/rel-1 is the active release/);
    expect(await releases()).toEqual(before);
    expect(await auditCount()).toBe(events);
    expect(await releaseWritesEnabled(t.db, 'rel-1')).toBe(true);
    expect(await routeRelease(t.db, { id: 'rep-bo', tenant: 'northwind' }, 'none')).toBe('rel-1');
  });

  it('a rollback "to" the open candidate is refused: promotion goes through release activate', async () => {
    await activateRelease(t.db, 'rel-2', { ...op, cohort: { tenants: [], users: ['rep-ana'] } });
    const [before, events] = [await releases(), await auditCount()];
    const refused = await rollbackRelease(t.db, t.queues, { to: 'rel-2', reason: 'typo', ...op }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(RollbackRefused);
    expect((refused as RollbackRefused).message).toMatch(/rel-2 is a candidate/);
    expect(await releases()).toEqual(before);
    expect(await auditCount()).toBe(events);
  });

  it('activating the active release for everyone while rel-2 is a candidate is refused, naming the rollback that ends the canary and the promotion (ADR 0704)', async () => {
    expect((await releases()).find((r) => r.id === 'rel-2')?.status).toBe('candidate');
    const [before, events] = [await releases(), await auditCount()];
    for (const id of ['rel-1', 'rel-9']) {
      const refused = await activateRelease(t.db, id, op).catch((e: unknown) => e);
      expect(refused, id).toBeInstanceOf(ActivationRefused);
      const message = (refused as ActivationRefused).message;
      expect(message).toContain(`rel-2 is a candidate for user:rep-ana: activating ${id} for everyone would leave it serving that cohort`);
      expect(message).toContain('gatehouse release rollback --to rel-1 --reason');
      expect(message).toContain('gatehouse release activate rel-2');
    }
    expect(await releases()).toEqual(before);
    expect(await auditCount()).toBe(events);
    expect(await routeRelease(t.db, { id: 'rep-ana', tenant: 'quillfeather' }, 'none')).toBe('rel-2');
  });

  it('a rollback to a release this ledger never ran is refused', async () => {
    const [before, events] = [await releases(), await auditCount()];
    const refused = await rollbackRelease(t.db, t.queues, { to: 'rel-9', reason: 'typo', ...op }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(RollbackRefused);
    expect((refused as RollbackRefused).message).toMatch(/rel-9 never ran on this ledger/);
    expect(await releases()).toEqual(before);
    expect(await auditCount()).toBe(events);
    // The real rollback, back to the former release, still works.
    expect((await rollbackRelease(t.db, t.queues, { to: 'rel-1', reason: 'canary failed', ...op })).rolledBack).toEqual(['rel-2']);
  });

  it('a rollback to a candidate that an earlier rollback retired is refused: it was never active (two steps, ADR 0660)', async () => {
    // The previous test rolled back to rel-1, which retired the open candidate rel-2 (never promoted).
    expect((await releases()).find((r) => r.id === 'rel-2')?.status).toBe('retired');
    const [before, events] = [await releases(), await auditCount()];
    const refused = await rollbackRelease(t.db, t.queues, { to: 'rel-2', reason: 'second step', ...op }).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(RollbackRefused);
    expect((refused as RollbackRefused).reason).toBe('not_a_former_release');
    expect((refused as RollbackRefused).message).toMatch(/rel-2 was never the active release/);
    expect(await releases()).toEqual(before);
    expect(await auditCount()).toBe(events);
    expect(await routeRelease(t.db, { id: 'rep-ana', tenant: 'northwind' }, 'none')).toBe('rel-1');
  });

  it('activating for everyone a candidate that a rollback retired is refused: its canary was ended, not passed (ADR 0742)', async () => {
    expect((await releases()).find((r) => r.id === 'rel-2')?.status).toBe('retired');
    const [before, events] = [await releases(), await auditCount()];
    const refused = await activateRelease(t.db, 'rel-2', op).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(ActivationRefused);
    const message = (refused as ActivationRefused).message;
    expect(message).toContain('rel-2 was never the active release (a candidate retired before it was promoted)');
    expect(message).toContain('gatehouse release activate rel-2 --cohort …');
    expect(message).toContain('nothing was changed');
    expect(await releases()).toEqual(before);
    expect(await auditCount()).toBe(events);
    expect(await routeRelease(t.db, { id: 'rep-bo', tenant: 'northwind' }, 'none')).toBe('rel-1');
  });

  it('so is one retired alone, while reopening its canary with a cohort is allowed (ADR 0742)', async () => {
    await activateRelease(t.db, 'rel-2', { ...op, cohort: { tenants: [], users: ['rep-ana'] } });
    await retireCandidate(t.db, t.queues, 'rel-2', { ...op, reason: 'the canary looked bad' });
    const [before, events] = [await releases(), await auditCount()];
    expect(await activateRelease(t.db, 'rel-2', op).catch((e: unknown) => e)).toBeInstanceOf(ActivationRefused);
    expect(await releases()).toEqual(before);
    expect(await auditCount()).toBe(events);
    await activateRelease(t.db, 'rel-2', { ...op, cohort: { tenants: [], users: ['rep-ana'] } });
    expect((await releases()).find((r) => r.id === 'rel-2')).toMatchObject({ status: 'candidate', writes_enabled: false });
  });

  it('a release that was active for everyone, then retired, is still restored by a rollback', async () => {
    // rel-2 through its cohort and promotion (its canary analysis passes on seeded runs), which retires rel-1.
    await activateRelease(t.db, 'rel-2', { ...op, cohort: { tenants: [], users: ['rep-ana'] } });
    for (let i = 0; i < DEFAULT_CANARY_THRESHOLDS.minRuns; i++) {
      await seedFinishedRun(t.db, { release: 'rel-1' });
      await seedFinishedRun(t.db, { release: 'rel-2' });
    }
    await activateRelease(t.db, 'rel-2', op);
    expect((await releases()).map((r) => [r.id, r.status])).toEqual([
      ['rel-1', 'retired'],
      ['rel-2', 'active'],
    ]);
    expect((await rollbackRelease(t.db, t.queues, { to: 'rel-1', reason: 'back to the one that ran', ...op })).rolledBack).toEqual([
      'rel-2',
    ]);
    // And rel-2, active once, is a former release now.
    expect((await rollbackRelease(t.db, t.queues, { to: 'rel-2', reason: 'forward again', ...op })).rolledBack).toEqual(['rel-1']);
  });
});
