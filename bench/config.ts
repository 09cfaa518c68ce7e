/** How many operations each benchmark runs; `full` is `./run bench`, `smoke` is CI's quick pass. */
export interface BenchSizes {
  /** Warm-up operations before each timed latency run (not recorded). */
  warmup: number;
  /** Floor: raw BullMQ hops timed one at a time. */
  hop: number;
  /** Floor: jobs added with addBulk and drained by one worker at concurrency 50. */
  bullmqJobs: number;
  /** Floor: raw reservation transactions, at 1 client and at 8 clients. */
  txn1: number;
  txn8: number;
  /** Floor: raw 3-stage pipeline at concurrency 1 and 50. */
  pipeline1: number;
  pipeline50: number;
  /** Floor: plain HTTP reads of the order system. */
  http: number;
  /** Governed calls at concurrency 1 (latency) and 50 (throughput), per kind. */
  read1: number;
  read50: number;
  refund1: number;
  refund50: number;
  approved1: number;
  approved50: number;
  /** Scaling: governed refunds at concurrency 50 per executor count. */
  scaling: number;
  scalingExecutors: number[];
  /** Isolation: the quiet tenant's reads per run (alone, then loaded) and the busy tenant's backlog of reads. */
  isolation1: number;
  isolationBacklog: number;
  /** Duplicate-delivery replay: distinct actions, deliveries of each, executor processes, jitter (ms). */
  replayActions: number;
  replayDeliveries: number;
  replayExecutors: number;
  replayJitterMs: number;
  /** End-to-end tickets and how many are in flight at once. */
  tickets: number;
  ticketConcurrency: number;
  /** Telemetry: on/off rounds (off, on, off, … — `2 × rounds + 1` phases, each on bracketed by two offs). */
  telemetryRounds: number;
  /** Telemetry: each phase's warm-up at concurrency 1 before anything is timed, ms (steady state, not start-up). */
  telemetryWarmUpMs: number;
  /** Telemetry: each phase's timed run at concurrency 8, ms (CPU per call is counted over it and the c=1 run). */
  telemetryLoadMs: number;
  /** Time box of each timed concurrency-1 run and of the floor's loops, ms. */
  latencyMaxMs: number;
  /** Time box of each concurrency-50 run and of the ticket run, ms (no new call starts after it). */
  loadMaxMs: number;
  /** Quiet window measuring the services' background round trips, ms. */
  idleMs: number;
  /** Whole run's time budget, ms: the replay gets what the other sections leave of it. */
  budgetMs: number;
  /** Policy decisions: refund actions seeded in the ledger (one run per size) and time per task (ms). */
  policyLedger: number[];
  policyTimeMs: number;
}

/** `./run bench`: sized to finish in well under 10 minutes on the project's 2-core machines. */
export const FULL: BenchSizes = {
  warmup: 10,
  hop: 1000,
  bullmqJobs: 5000,
  txn1: 1000,
  txn8: 3000,
  pipeline1: 200,
  pipeline50: 2000,
  http: 300,
  read1: 200,
  read50: 1500,
  refund1: 200,
  refund50: 1500,
  approved1: 150,
  approved50: 1000,
  scaling: 1000,
  scalingExecutors: [1, 2, 4],
  isolation1: 40,
  isolationBacklog: 600,
  replayActions: 1000,
  replayDeliveries: 10,
  replayExecutors: 4,
  replayJitterMs: 1000,
  tickets: 200,
  ticketConcurrency: 20,
  telemetryRounds: 2,
  telemetryWarmUpMs: 40_000,
  telemetryLoadMs: 30_000,
  latencyMaxMs: 6000,
  loadMaxMs: 12_000,
  idleMs: 2000,
  budgetMs: 820_000,
  policyLedger: [1000, 10_000, 50_000],
  policyTimeMs: 2000,
};

/** `BENCH_SMOKE=1` / `./run bench --smoke`: every benchmark at a small N, well under a minute. */
export const SMOKE: BenchSizes = {
  warmup: 2,
  hop: 50,
  bullmqJobs: 500,
  txn1: 50,
  txn8: 200,
  pipeline1: 20,
  pipeline50: 100,
  http: 20,
  read1: 3,
  read50: 15,
  refund1: 3,
  refund50: 15,
  approved1: 3,
  approved50: 15,
  scaling: 10,
  scalingExecutors: [1, 2],
  isolation1: 3,
  isolationBacklog: 20,
  replayActions: 10,
  replayDeliveries: 3,
  replayExecutors: 2,
  replayJitterMs: 200,
  tickets: 2,
  ticketConcurrency: 2,
  telemetryRounds: 1,
  telemetryWarmUpMs: 6000,
  telemetryLoadMs: 2500,
  latencyMaxMs: 3000,
  loadMaxMs: 5000,
  idleMs: 500,
  budgetMs: 120_000,
  policyLedger: [300],
  policyTimeMs: 200,
};
