import { readFileSync } from 'node:fs';
import { testFaults } from '@gatehouse/contracts';

/**
 * One jump of a simulated clock (the incident drill's, docs/decisions/0320-drill-on-a-simulated-clock.md):
 * from the real instant `realMs` on, simulated time is `simMs + (now − realMs)` — it runs at the
 * real rate — until the next anchor, where it jumps forward. Both in epoch milliseconds.
 */
export interface SimClockAnchor {
  realMs: number;
  simMs: number;
}

/** The last anchor at or before `at` by `key`, or null before the first. Anchors ascend in both keys. */
function anchorAt(anchors: readonly SimClockAnchor[], key: 'realMs' | 'simMs', at: number): number {
  let i = -1;
  while (i + 1 < anchors.length && anchors[i + 1]![key] <= at) i++;
  return i;
}

/**
 * Simulated time of the real instant `realMs`: the last anchor's simulated time plus the real time
 * since it; before the first anchor, the first anchor's offset; no anchors: `realMs` itself.
 */
export function realToSim(anchors: readonly SimClockAnchor[], realMs: number): number {
  if (!anchors.length) return realMs;
  const a = anchors[Math.max(anchorAt(anchors, 'realMs', realMs), 0)]!;
  return a.simMs + (realMs - a.realMs);
}

/**
 * The real instant at which the simulated clock passed `simMs`. A simulated instant inside a jump
 * maps to the jump's real instant (nothing was recorded between), so "recorded at or after
 * simulated time s" is "recorded at or after real time simToReal(s)" for every record.
 */
export function simToReal(anchors: readonly SimClockAnchor[], simMs: number): number {
  if (!anchors.length) return simMs;
  const k = anchorAt(anchors, 'simMs', simMs);
  if (k < 0) return anchors[0]!.realMs - (anchors[0]!.simMs - simMs);
  const a = anchors[k]!;
  const next = anchors[k + 1];
  const real = a.realMs + (simMs - a.simMs);
  return next ? Math.min(real, next.realMs) : real;
}

/**
 * The start of a rolling window of `sinceMs` ending now (R5, R6, R10: docs/product/policy-rules.md),
 * as the real instant records are compared with. Normally `Date.now() − sinceMs`. Under the
 * test-only `GATEHOUSE_TEST_SIM_CLOCK_FILE`, "now" and the window are simulated: the window starts
 * at the real instant the simulated clock passed (simulated now − `sinceMs`), so three simulated
 * hours compressed into minutes see the same refunds a real afternoon would.
 * @throws Error when the switch is set outside `GATEHOUSE_ENV=test`, or its file is unreadable.
 */
export function windowStart(sinceMs: number, env: Record<string, string | undefined> = process.env): Date {
  const file = testFaults(env).simClockFile;
  if (!file) return new Date(Date.now() - sinceMs);
  const { anchors } = JSON.parse(readFileSync(file, 'utf8')) as { anchors: SimClockAnchor[] };
  return new Date(simToReal(anchors, realToSim(anchors, Date.now()) - sinceMs));
}
