import { z } from 'zod';

/** Dependencies a step can wait on when they do not answer. */
export const DependencySchema = z.enum(['postgres', 'redis', 'audit', 'model', 'system_of_record']);
export type Dependency = z.infer<typeof DependencySchema>;

/**
 * An outage a held job is waiting through: which dependency failed last, and since when
 * (epoch ms, the first failure). Written by the worker that holds the job, never by producers.
 */
export const OutageMarkSchema = z.object({ dependency: DependencySchema, sinceMs: z.number().int().nonnegative() });
export type OutageMark = z.infer<typeof OutageMarkSchema>;

/** Fields every job carries: its release (workers refuse other releases) and trace context. */
export const jobEnvelope = {
  release: z.string().min(1),
  /** W3C trace context of the producing span (`traceparent` header value), when traced. */
  traceparent: z.string().optional(),
  /** Set while the job is held for an unavailable dependency (its wait is not working time). */
  outage: OutageMarkSchema.optional(),
};

/** BullMQ queue name for a base queue in one release, e.g. `executions.rel-1`. */
export function queueName(base: string, release: string): string {
  return `${base}.${release}`;
}

/**
 * A Redis `SCAN … MATCH` pattern matching `s` literally: `*`, `?`, `[`, `]` and `\` escaped (a
 * queue prefix may contain them). Append the glob part yourself, e.g. `${redisGlobEscape(prefix)}:*`.
 */
export function redisGlobEscape(s: string): string {
  return s.replace(/[*?[\]\\]/g, (c) => `\\${c}`);
}

/** Default BullMQ job options: retried with backoff on thrown errors, kept briefly after end. */
export const defaultJobOptions = {
  attempts: 5,
  backoff: { type: 'exponential', delay: 200 },
  removeOnComplete: { age: 3600, count: 10_000 },
  removeOnFail: { age: 24 * 3600 },
} as const;

/** A queue contract: base name, job name, payload schema, job id rule and options. */
export interface QueueContract<T> {
  base: string;
  jobName: string;
  schema: z.ZodType<T>;
  /** Deterministic job id (no `:`, which BullMQ reserves), so a re-enqueue is a no-op while the job exists. */
  jobId: (payload: T) => string;
  options: {
    attempts: number;
    backoff: { type: 'exponential'; delay: number };
    removeOnComplete: { age: number; count: number };
    removeOnFail: { age: number };
  };
}
