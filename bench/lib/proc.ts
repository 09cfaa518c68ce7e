import { readFileSync } from 'node:fs';
import { sql } from 'kysely';
import type { Redis } from 'ioredis';
import type { Db } from '@gatehouse/ledger';

// Linux /proc readers for the memory and CPU figures (this project's machines are Linux).

/** Kernel clock ticks per second for /proc CPU times (USER_HZ, 100 on Linux). */
const TICKS_PER_S = 100;

/**
 * Peak resident set size of a process so far (`VmHWM` of /proc/<pid>/status), MB (MiB), or
 * null when the process is gone. The kernel keeps the high-water mark, so one read at the end
 * of a load phase gives the peak during it (and everything before it).
 */
export function peakRssMb(pid: number): number | null {
  try {
    const m = /VmHWM:\s+(\d+)\s+kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Math.round((Number(m[1]) / 1024) * 10) / 10 : null;
  } catch {
    return null;
  }
}

/** CPU seconds (user + system) a process used so far, or 0 when it is gone. */
export function cpuSeconds(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may hold spaces) start after the last ')'.
    const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(f[11]) + Number(f[12])) / TICKS_PER_S;
  } catch {
    return 0;
  }
}

/** Machine-wide CPU time so far (all cores, /proc/stat), seconds: busy and total. */
export function machineCpu(): { busy: number; total: number } {
  const line = readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? '';
  const v = line.trim().split(/\s+/).slice(1).map(Number);
  const idle = (v[3] ?? 0) + (v[4] ?? 0);
  const total = v.reduce((s, x) => s + x, 0);
  return { busy: (total - idle) / TICKS_PER_S, total: total / TICKS_PER_S };
}

/** CPU seconds the Redis server used so far (`INFO cpu`: main thread user + sys). */
export async function redisCpuSeconds(redis: Redis): Promise<number> {
  const info = await redis.info('cpu');
  const get = (k: string): number => Number(new RegExp(`${k}:([\\d.]+)`).exec(info)?.[1] ?? 0);
  return get('used_cpu_user') + get('used_cpu_sys');
}

/** Process ids of the Postgres backends serving `database` right now. */
export async function postgresBackends(db: Db, database: string): Promise<number[]> {
  const r = await sql<{ pid: number }>`SELECT pid FROM pg_stat_activity WHERE datname = ${database}`.execute(db);
  return r.rows.map((x) => x.pid);
}

/** A CPU reading of every party to a benchmark, for {@link cpuBetween}. */
export interface CpuSnapshot {
  atMs: number;
  machine: { busy: number; total: number };
  processes: Record<string, number>;
  postgres: Map<number, number>;
  redis: number;
}

/** Reads CPU seconds of each named process, of our database's Postgres backends and of Redis. */
export async function cpuSnapshot(pids: Map<number, string>, db: Db, database: string, redis: Redis): Promise<CpuSnapshot> {
  const processes: Record<string, number> = {};
  for (const [pid, name] of pids) processes[name] = (processes[name] ?? 0) + cpuSeconds(pid);
  processes.bench = (processes.bench ?? 0) + cpuSeconds(process.pid);
  const postgres = new Map<number, number>();
  for (const pid of await postgresBackends(db, database)) postgres.set(pid, cpuSeconds(pid));
  return { atMs: Date.now(), machine: machineCpu(), processes, postgres, redis: await redisCpuSeconds(redis) };
}

/** CPU use between two snapshots: share of the machine busy (0–1) and CPU seconds by party. */
export interface CpuUse {
  /** Busy share of all cores over the window (includes anything else running on the machine). */
  machineBusy: number;
  wallS: number;
  /** CPU seconds by party: each service, `bench`, `postgres` (our backends), `redis` (whole server). */
  seconds: Record<string, number>;
}

/** CPU used between `a` and `b` (Postgres backends that started in between count from zero). */
export function cpuBetween(a: CpuSnapshot, b: CpuSnapshot): CpuUse {
  const seconds: Record<string, number> = {};
  for (const [name, s] of Object.entries(b.processes)) seconds[name] = round2(s - (a.processes[name] ?? 0));
  let pg = 0;
  for (const [pid, s] of b.postgres) pg += s - (a.postgres.get(pid) ?? 0);
  seconds.postgres = round2(pg);
  seconds.redis = round2(b.redis - a.redis);
  const total = b.machine.total - a.machine.total;
  return {
    machineBusy: total > 0 ? round2((b.machine.busy - a.machine.busy) / total) : 0,
    wallS: round2((b.atMs - a.atMs) / 1000),
    seconds,
  };
}

function round2(x: number): number {
  return Math.round(x * 100) / 100;
}
