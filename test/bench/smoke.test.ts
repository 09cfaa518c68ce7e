import { describe, expect, it } from 'vitest';
import { runBench } from '../../bench/bench.ts';

// The benchmarks' smoke pass (`./run bench --smoke` in-process): every benchmark runs at a small N
// against its own database, Redis prefix and service processes, so the suite never rots.
// Correctness only — timings are reported by `./run bench`, never asserted in tests.

describe('bench smoke (small N, correctness only)', () => {
  it('runs every benchmark; each governed call and ticket succeeds; the replay gives exactly one effect per action', async () => {
    const r = await runBench({ smoke: true, log: () => {} });
    expect(r.errors).toEqual({});
    // Every run the benchmark seeds ends: none is left for the watchdog to re-drive into later figures.
    expect(r.meta.redrives).toBe(0);
    expect(r.meta.liveRuns).toBe(0);

    for (const g of Object.values(r.governed)) {
      expect(g).not.toBeNull();
      expect(g!.c1.errors + g!.c50.errors).toBe(0);
      expect(Object.keys(g!.outcomes)).toEqual(['succeeded']);
      expect(g!.perCall.hops).toBeGreaterThan(0);
      expect(g!.perCall.pgRoundTrips).toBeGreaterThan(0);
    }

    const rp = r.replay!;
    for (const run of [rp.clean, rp.duplicate]) {
      expect(run.failed).toBe(0);
      expect(run.effects).toBe(rp.actions); // counted at the payments ledger
      expect(run.downstreamPosts).toBe(rp.actions); // replays never reach it
      expect(run.approvalsUsed).toBe(rp.actions);
    }
    expect(rp.duplicate.jobs).toBe(rp.actions * rp.duplicate.deliveries);
    expect(rp.exactlyOnce).toBe(true);

    // Telemetry on vs off (docs/decisions/0260): every call succeeds either way, and with it on the
    // stand-in collector received spans.
    const t = r.telemetry!;
    expect(t.phases.map((p) => p.telemetry)).toEqual(['off', 'on', 'off']);
    for (const p of t.phases) expect(p.c1.errors + p.c8.errors).toBe(0);
    for (const p of t.phases) expect(p.cpuMsPerCall).toBeGreaterThan(0);
    expect(t.startRatio).not.toBeNull();
    expect(Object.keys(t.cpuRatioByService)).toEqual(expect.arrayContaining(['executor', 'policy-gateway', 'audit']));
    expect(t.exports.traces).toBeGreaterThan(0);

    expect(r.scaling!.map((p) => p.executors)).toEqual(r.meta.sizes.scalingExecutors);
    // Tenant isolation: every quiet read of both runs and the whole backlog were answered.
    const iso = r.isolation!;
    expect([iso.alone, iso.loaded].map((x) => [x.ops, x.errors])).toEqual([
      [r.meta.sizes.isolation1, 0],
      [r.meta.sizes.isolation1, 0],
    ]);
    expect(iso.backlog).toBe(r.meta.sizes.isolationBacklog);
    expect(iso.quietTenant).not.toBe(iso.busyTenant);
    expect(r.e2e!.states).toEqual({ completed: r.e2e!.tickets });
    expect(r.e2e!.effects).toBe(r.e2e!.tickets);
    expect(r.policy!.withLedger).toHaveLength(r.meta.sizes.policyLedger.length);
    expect(Object.keys(r.memory)).toEqual(expect.arrayContaining(['policy-gateway', 'executor', 'approval', 'audit', 'agent-loop']));
    expect(r.targets.length).toBeGreaterThan(0);
  }, 420_000); // 300 s before the telemetry section, which restarts the services once per phase (three in smoke)
});
