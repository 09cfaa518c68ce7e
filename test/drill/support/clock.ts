import { renameSync, writeFileSync } from 'node:fs';
import { realToSim, simToReal, type SimClockAnchor } from '@gatehouse/policy';

/**
 * The drill's simulated clock (docs/decisions/0320-drill-on-a-simulated-clock.md): while work runs
 * it runs at the real rate; when the stack is idle it jumps to the next scheduled event (a ticket's
 * arrival, a lead's decision, a monitor pass). Each jump is an anchor, written to `file` for the
 * services' rolling windows (`GATEHOUSE_TEST_SIM_CLOCK_FILE`, read by `windowStart` in
 * packages/policy). Simulated instants are epoch ms; `at(s)` reads them as seconds of the drill.
 */
export class DrillClock {
  private readonly anchors: SimClockAnchor[] = [];
  /** Simulated epoch ms of the drill's second 0. */
  readonly startMs: number;

  /**
   * Starts at real now, `aheadMs` in the simulated future (a later drill on the same ledger starts
   * a day after the former, so the rolling windows keep them apart); what was recorded before
   * keeps its real time.
   */
  readonly file: string;

  constructor(file: string, aheadMs = 0) {
    this.file = file;
    const now = Date.now();
    this.startMs = now + aheadMs;
    this.anchors.push({ realMs: 0, simMs: 0 }, { realMs: now, simMs: this.startMs });
    this.save();
  }

  /** Simulated now, epoch ms. */
  now(): number {
    return realToSim(this.anchors, Date.now());
  }

  /** Seconds of the drill at simulated now. */
  seconds(): number {
    return this.at(this.now());
  }

  /** Seconds of the drill at simulated epoch ms `simMs`. */
  at(simMs: number): number {
    return (simMs - this.startMs) / 1000;
  }

  /** Simulated epoch ms of a real record time (a ledger timestamp). */
  simOf(real: Date | number): number {
    return realToSim(this.anchors, typeof real === 'number' ? real : real.getTime());
  }

  /** The real instant the clock passed simulated `simMs` (for comparing with ledger timestamps). */
  realOf(simMs: number): Date {
    return new Date(simToReal(this.anchors, simMs));
  }

  /** Jumps to drill second `s` when it is ahead; never goes back (work that overran is late, not undone). */
  advanceTo(s: number): void {
    const target = this.startMs + s * 1000;
    if (target <= this.now()) return;
    this.anchors.push({ realMs: Date.now(), simMs: target });
    this.save();
  }

  private save(): void {
    writeFileSync(`${this.file}.tmp`, JSON.stringify({ anchors: this.anchors }));
    renameSync(`${this.file}.tmp`, this.file);
  }
}
