import { describe, expect, it } from 'vitest';
import { listedShipment, wholeList } from '../src/index.ts';

describe('wholeList: a listing is read whole or not at all', () => {
  const ids = (row: Record<string, unknown>): string | null => (typeof row.id === 'string' ? row.id : null);

  it('reads every entry of a whole list, and an empty list as empty', () => {
    expect(wholeList({ items: [{ id: 'a' }, { id: 'b' }] }, 'items', ids)).toEqual(['a', 'b']);
    expect(wholeList({ items: [] }, 'items', ids)).toEqual([]);
  });

  it('says nothing (null) of a body without the list: never an empty list', () => {
    for (const body of [null, undefined, 'x', 42, [], {}, { items: null }, { items: {} }, { other: [] }])
      expect(wholeList(body, 'items', ids)).toBeNull();
  });

  it('says nothing of a list with one entry that is not an object, or that the reader cannot read', () => {
    expect(wholeList({ items: [{ id: 'a' }, null] }, 'items', ids)).toBeNull();
    expect(wholeList({ items: [{ id: 'a' }, 'b'] }, 'items', ids)).toBeNull();
    expect(wholeList({ items: [{ id: 'a' }, { id: 7 }] }, 'items', ids)).toBeNull();
  });
});

describe('listedShipment', () => {
  it('reads the id, the creation time (NaN when unreadable) and the cancellation', () => {
    expect(listedShipment({ shipmentId: 's1', createdAt: '2026-01-01T00:00:00Z', cancelledAt: '2026-01-02T00:00:00Z' })).toEqual({
      shipmentId: 's1',
      createdAtMs: Date.UTC(2026, 0, 1),
      cancelled: true,
    });
    const noTime = listedShipment({ shipmentId: 's2', createdAt: 17 });
    expect(noTime?.createdAtMs).toBeNaN();
    expect(noTime?.cancelled).toBe(false);
  });

  it('refuses an entry without a non-empty shipment id', () => {
    for (const row of [{}, { shipmentId: '' }, { shipmentId: 3 }]) expect(listedShipment(row)).toBeNull();
  });
});
