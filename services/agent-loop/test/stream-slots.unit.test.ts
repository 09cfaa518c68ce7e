import { describe, expect, it } from 'vitest';
import { StreamSlots } from '../src/http/stream-slots.ts';

// The open-stream counts behind the events route's 429 (docs/decisions/0250-pushed-workflow-events.md, "Stream limits").

describe('StreamSlots', () => {
  it('admits up to the per-user limit, then names it; a refusal counts nothing', () => {
    const slots = new StreamSlots({ perUser: 2, perTenant: 10 });
    const a = slots.take('t1', 'ana');
    slots.take('t1', 'ana');
    expect(slots.take('t1', 'ana')).toEqual({ refused: 'user', limit: 2 });
    expect(slots.openFor('t1')).toBe(2);
    expect('release' in a).toBe(true);
    if ('release' in a) a.release();
    expect('release' in slots.take('t1', 'ana')).toBe(true);
  });

  it('counts a tenant over all its users; the same user id in another tenant is another user', () => {
    const slots = new StreamSlots({ perUser: 5, perTenant: 2 });
    slots.take('t1', 'ana');
    slots.take('t1', 'ben');
    expect(slots.take('t1', 'cy')).toEqual({ refused: 'tenant', limit: 2 });
    expect('release' in slots.take('t2', 'ana')).toBe(true);
  });

  it('release is idempotent and idle tenants hold no count', () => {
    const slots = new StreamSlots({ perUser: 1, perTenant: 1 });
    const s = slots.take('t1', 'ana');
    if (!('release' in s)) throw new Error('refused');
    s.release();
    s.release();
    expect(slots.openFor('t1')).toBe(0);
    const again = slots.take('t1', 'ana');
    expect('release' in again).toBe(true);
    expect(slots.take('t1', 'ana')).toEqual({ refused: 'tenant', limit: 1 });
  });
});
