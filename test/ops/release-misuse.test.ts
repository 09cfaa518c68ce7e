import { beforeAll, describe, expect, it } from 'vitest';
import { releaseWritesEnabled, routeRelease } from '@gatehouse/ledger';
import { activateRelease, ActivationRefused, rollbackRelease, RollbackRefused } from '@gatehouse/operations';
import { useReleaseSuite } from '../support/release-suite.ts';

// Release commands an operator can mistype, each refused before anything changes: a cohort
// given to the active release (it would become a candidate with writes off, leaving no active
// release), and a rollback "to" the open candidate or to a release this ledger never ran (it
// would be promoted to everyone without its canary analysis or a second person; ADR 0660).

const HMAC = 'test-audit-hmac-key-0123456789';
const op = { operator: 'ops-gus', hmacKey: HMAC };
const t = useReleaseSuite();

beforeAll(async () => {
  t.dirs.writeRelease('rel-1');
  t.dirs.writeRelease('rel-2', (m) => (m.description = 'candidate'));
  t.dirs.writeRelease('rel-9', (m) => (m.description = 'never ran here'));
  await activateRelease(t.db, 'rel-1', op);
});

const releases = () => t.db.selectFrom('releases').select(['id', 'status', 'writes_enabled', 'cohort', 'draining']).orderBy('id').execute();
const auditCount = async () => (await t.db.selectFrom('audit_outbox').select('id').execute()).length;

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
});
