import { describe, expect, it } from 'vitest';
import { loadWorld, WorldSchema } from '../src/index.ts';

// A user id names one person across the directory (ADR 0766): cohorts (`user:<id>`), token
// revocation and the operator's tenant look a user up by id alone.

const world = loadWorld();
const ivy = world.users.find((u) => u.id === 'rep-ivy')!;

describe('the directory: a user id is one person across tenants', () => {
  it('the shipped world passes', () => {
    expect(WorldSchema.safeParse(world).success).toBe(true);
  });

  it('the same user id in a second tenant is refused, naming the id', () => {
    const twin = { ...ivy, tenant: world.tenants.find((t) => t.id !== ivy.tenant)!.id };
    const r = WorldSchema.safeParse({ ...world, users: [...world.users, twin] });
    expect(r.success).toBe(false);
    expect(r.error?.issues.map((i) => i.message)).toEqual([
      'user id "rep-ivy" appears more than once: a user id names one person across every tenant',
    ]);
  });

  it('a tenant listed twice is refused', () => {
    const r = WorldSchema.safeParse({ ...world, tenants: [...world.tenants, world.tenants[0]!] });
    expect(r.error?.issues.map((i) => i.message)).toEqual([`tenant id "${world.tenants[0]!.id}" appears more than once`]);
  });
});
