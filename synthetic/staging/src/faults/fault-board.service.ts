import { randomUUID } from 'node:crypto';
import { z } from 'zod';

/** Downstreams a fault can be armed on (docs/product/design.md#synthetic-environment). */
export const FAULT_TARGETS = ['payments', 'orders', 'mail', 'changes'] as const;
/** One of {@link FAULT_TARGETS}. */
export type FaultTarget = (typeof FAULT_TARGETS)[number];

/**
 * Fault modes:
 * - `commit_then_lose_response`: perform and commit the effect, then destroy the socket unanswered;
 * - `rate_limit`: answer 429 with `Retry-After` (s, rounded up) and `retry-after-ms`, no effect;
 * - `server_error`: answer `status` (default 503), no effect;
 * - `request_timeout`: answer 408 `request_timeout`, as an HTTP edge does when it stopped reading
 *   the request in time (ADR 0690), no effect;
 * - `latency`: wait `latencyMs`, then proceed normally (the effect happens even if the client left);
 * - `hang`: never answer and perform no effect; the socket stays open until the client gives up
 *   or the server closes.
 */
export const FAULT_MODES = ['commit_then_lose_response', 'rate_limit', 'server_error', 'request_timeout', 'latency', 'hang'] as const;
/** One of {@link FAULT_MODES}. */
export type FaultMode = (typeof FAULT_MODES)[number];

/**
 * Body of `POST /faults`. `times` (default 1) is how many matching effect requests the fault
 * applies to before it disarms. `retryAfterMs` (default 1000 ms) is for `rate_limit`,
 * `latencyMs` (default 1000 ms) for `latency`, `status` (500–599, default 503) for `server_error`.
 */
export const FaultSpecSchema = z
  .object({
    target: z.enum(FAULT_TARGETS),
    mode: z.enum(FAULT_MODES),
    times: z.number().int().min(1).max(10_000).default(1),
    retryAfterMs: z.number().int().min(0).max(3_600_000).optional(),
    latencyMs: z.number().int().min(0).max(600_000).optional(),
    status: z.number().int().min(500).max(599).optional(),
  })
  .strict();
/** Parsed fault specification (input of {@link FaultBoard.arm}). */
export type FaultSpec = z.infer<typeof FaultSpecSchema>;

/**
 * An armed fault. `remaining` counts the effect requests it will still apply to; the defaults
 * of its mode are filled in (`retryAfterMs`, `latencyMs`, `status`).
 */
export interface ArmedFault {
  id: string;
  target: FaultTarget;
  mode: FaultMode;
  remaining: number;
  retryAfterMs: number;
  latencyMs: number;
  status: number;
  armedAt: string;
}

/**
 * The fault switches of one staging process, kept in memory on purpose: they are test
 * controls, not state of the systems of record, and there is a single staging process.
 * Faults of one target apply in the order they were armed, one fault per request.
 */
export class FaultBoard {
  private armed: ArmedFault[] = [];

  /** Arms a fault; returns it with its defaults filled in. */
  arm(spec: FaultSpec): ArmedFault {
    const fault: ArmedFault = {
      id: `flt_${randomUUID()}`,
      target: spec.target,
      mode: spec.mode,
      remaining: spec.times,
      retryAfterMs: spec.retryAfterMs ?? 1000,
      latencyMs: spec.latencyMs ?? 1000,
      status: spec.status ?? 503,
      armedAt: new Date().toISOString(),
    };
    this.armed.push(fault);
    return { ...fault };
  }

  /**
   * Consumes one application of the oldest fault armed on `target`, disarming it when its
   * count reaches zero. Returns a snapshot of the fault, or undefined when none is armed.
   */
  take(target: FaultTarget): ArmedFault | undefined {
    const index = this.armed.findIndex((f) => f.target === target);
    if (index < 0) return undefined;
    const fault = this.armed[index]!;
    fault.remaining -= 1;
    if (fault.remaining <= 0) this.armed.splice(index, 1);
    return { ...fault };
  }

  /** Snapshots of every armed fault, oldest first. */
  list(): ArmedFault[] {
    return this.armed.map((f) => ({ ...f }));
  }

  /** Disarms every fault; returns how many were armed. */
  clear(): number {
    const n = this.armed.length;
    this.armed = [];
    return n;
  }
}
