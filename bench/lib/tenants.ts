import { writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { loadWorld, type World } from '@gatehouse/contracts';

/** One (tenant, rep) pair the benchmarks act as. */
export interface BenchActor {
  tenant: string;
  user: string;
}

/** Tenants the multi-tenant load spreads over (`bench-01`…): each with one rep in region US. */
export const BENCH_TENANTS = 8;

/**
 * The synthetic world plus `tenants` benchmark tenants (`bench-01`…), each with one rep
 * (`bench-rep-01`…) who may refund like rep-ana (same scopes and ceiling, region US), written
 * to `<dir>/world.json` for the services (`GATEHOUSE_WORLD`). Real multi-tenant load: each
 * tenant's limits (R4 per order, R5 per user-day, R6 per tenant-hour) compete only within it
 * (docs/decisions/0191-limit-contention-between-competitors.md).
 * @returns the file and the actors, rep-ana of quillfeather first.
 */
export function writeBenchWorld(dir: string, tenants = BENCH_TENANTS): { path: string; actors: BenchActor[] } {
  const base: World = loadWorld();
  const ana = base.users.find((u) => u.id === 'rep-ana');
  if (!ana) throw new Error('the synthetic world has no rep-ana to model benchmark reps on');
  const ids = Array.from({ length: tenants }, (_, i) => String(i + 1).padStart(2, '0'));
  const world: World = {
    ...base,
    tenants: [...base.tenants, ...ids.map((n) => ({ id: `bench-${n}`, name: `Benchmark tenant ${n}`, regions: ['US'] }))],
    users: [...base.users, ...ids.map((n) => ({ ...ana, id: `bench-rep-${n}`, tenant: `bench-${n}` }))],
  };
  const path = resolve(dir, 'world.json');
  writeFileSync(path, JSON.stringify(world, null, 2));
  return { path, actors: [{ tenant: ana.tenant, user: ana.id }, ...ids.map((n) => ({ tenant: `bench-${n}`, user: `bench-rep-${n}` }))] };
}
