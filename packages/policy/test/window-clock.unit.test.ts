import { describe, expect, it } from 'vitest';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { realToSim, simToReal, windowStart, type SimClockAnchor } from '../src/window-clock.ts';

// Real 0 → sim 0; real 10 s → sim 90 s (a jump); real 12 s → sim 3600 s (a jump).
const anchors: SimClockAnchor[] = [
  { realMs: 0, simMs: 0 },
  { realMs: 10_000, simMs: 90_000 },
  { realMs: 12_000, simMs: 3_600_000 },
];

describe('the simulated clock of the rolling windows (ADR 0320)', () => {
  it('runs at the real rate between anchors and jumps at each', () => {
    expect(realToSim(anchors, 5_000)).toBe(5_000);
    expect(realToSim(anchors, 11_000)).toBe(91_000);
    expect(realToSim(anchors, 13_000)).toBe(3_601_000);
    expect(realToSim([], 42)).toBe(42);
  });

  it('maps a simulated instant back to the real instant the clock passed it (inside a jump: the jump)', () => {
    expect(simToReal(anchors, 5_000)).toBe(5_000);
    expect(simToReal(anchors, 60_000)).toBe(10_000); // jumped over between real 10 s and sim 90 s
    expect(simToReal(anchors, 91_000)).toBe(11_000);
    expect(simToReal(anchors, 1_000_000)).toBe(12_000);
    expect(simToReal(anchors, 3_601_000)).toBe(13_000);
    expect(simToReal(anchors, -1_000)).toBe(-1_000);
  });

  it('windowStart: the real clock without the switch; the simulated one with it, refused outside test', () => {
    const before = Date.now();
    expect(windowStart(1000, {}).getTime()).toBeGreaterThanOrEqual(before - 1000);
    const file = resolve(mkdtempSync(resolve(tmpdir(), 'gh-clock-')), 'clock.json');
    const now = Date.now();
    // The clock started at real now − 5 s and jumped 2 h forward at real now − 1 s: an hour's
    // window ending at simulated now starts at that jump (nothing was recorded inside it).
    const jump = { realMs: now - 1000, simMs: now - 1000 + 7_200_000 };
    writeFileSync(file, JSON.stringify({ anchors: [{ realMs: now - 5000, simMs: now - 5000 }, jump] }));
    const env = { GATEHOUSE_TEST_SIM_CLOCK_FILE: file, GATEHOUSE_ENV: 'test' };
    expect(windowStart(3_600_000, env).getTime()).toBe(now - 1000);
    // A 3-hour window reaches back before the clock's start: 3 h − the 2 h jumped = 1 real hour.
    expect(Math.abs(windowStart(3 * 3_600_000, env).getTime() - (now - 3_600_000))).toBeLessThan(1000);
    expect(() => windowStart(1000, { ...env, GATEHOUSE_ENV: 'production' })).toThrow(/only be set with GATEHOUSE_ENV=test/);
  });
});
