import { existsSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { sleep } from './driver.ts';

/** Path of the preload module that counts round trips inside service processes. */
export const COUNT_HOOK = fileURLToPath(new URL('./count-hook.ts', import.meta.url));

/**
 * Round trips one process made so far: pg queries (incl. BEGIN/COMMIT/ROLLBACK; `begin` counts
 * explicit transactions), Redis commands, outgoing HTTP requests (fetch).
 */
export interface ProcessCounts {
  pg: number;
  begin: number;
  commit: number;
  rollback: number;
  redis: number;
  http: number;
}

const KEYS = ['pg', 'begin', 'commit', 'rollback', 'redis', 'http'] as const;
const ZERO: ProcessCounts = { pg: 0, begin: 0, commit: 0, rollback: 0, redis: 0, http: 0 };

function mapCounts(f: (k: keyof ProcessCounts) => number): ProcessCounts {
  return Object.fromEntries(KEYS.map((k) => [k, f(k)])) as unknown as ProcessCounts;
}

/** Counts by service name (several processes of one service are summed). */
export type CountSnapshot = Record<string, ProcessCounts>;

/**
 * Reads the counters the services' preload hook wrote to `dir` after waiting `settleMs` (the
 * hook flushes every 200 ms), summed per service. `pids` maps process id → service name.
 */
export async function readCounts(dir: string, pids: Map<number, string>, settleMs = 450): Promise<CountSnapshot> {
  if (settleMs) await sleep(settleMs);
  const out: CountSnapshot = {};
  for (const [pid, service] of pids) {
    const file = resolve(dir, `${pid}.json`);
    if (!existsSync(file)) continue;
    const c = JSON.parse(readFileSync(file, 'utf8')) as ProcessCounts;
    const acc = (out[service] ??= { ...ZERO });
    for (const k of KEYS) acc[k] += c[k] ?? 0;
  }
  return out;
}

/** `after - before` per service (services missing before count from zero). */
export function diffCounts(after: CountSnapshot, before: CountSnapshot): CountSnapshot {
  const out: CountSnapshot = {};
  for (const [svc, a] of Object.entries(after)) {
    const b = before[svc] ?? ZERO;
    out[svc] = mapCounts((k) => a[k] - b[k]);
  }
  return out;
}

/**
 * Round trips per operation: `(delta - idle rate × elapsed) / ops` per service, where the idle
 * rate (per ms, from a quiet window) removes the background work every service does anyway
 * (outbox sweeps, audit heartbeats, expiry sweeps). Rounded to 0.1.
 */
export function perOperation(delta: CountSnapshot, idlePerMs: CountSnapshot, elapsedMs: number, ops: number): CountSnapshot {
  const out: CountSnapshot = {};
  for (const [svc, d] of Object.entries(delta)) {
    const idle = idlePerMs[svc] ?? ZERO;
    out[svc] = mapCounts((k) => Math.max(0, Math.round(((d[k] - idle[k] * elapsedMs) / ops) * 10) / 10));
  }
  return out;
}

/** `delta / ms` per service (an idle rate for {@link perOperation}). */
export function perMs(delta: CountSnapshot, ms: number): CountSnapshot {
  const out: CountSnapshot = {};
  for (const [svc, d] of Object.entries(delta)) {
    out[svc] = mapCounts((k) => d[k] / ms);
  }
  return out;
}

/** Sum over `services` (all when omitted). */
export function total(c: CountSnapshot, services?: readonly string[]): ProcessCounts {
  const acc = { ...ZERO };
  for (const [svc, v] of Object.entries(c)) {
    if (services && !services.includes(svc)) continue;
    for (const k of KEYS) acc[k] += v[k];
  }
  return mapCounts((k) => Math.round(acc[k] * 10) / 10);
}
