import pg from 'pg';
import { Queue, Worker, type Job } from 'bullmq';
import { Redis } from 'ioredis';
import type { BenchSizes } from '../config.ts';
import { closedLoop, Waiters, type LoadResult } from '../lib/driver.ts';
import { Latencies, nowMs, round, type LatencySummary } from '../lib/stats.ts';
import { REDIS_URL, type BenchWorld } from '../lib/world.ts';

/** Floor probes: the unavoidable cost of the same hops and transactions without governance. */
export interface FloorReport {
  /** One BullMQ hop at concurrency 1: `add` → worker → `completed` observed, ms. */
  hop: LatencySummary;
  /** addBulk of `jobs` drained by one worker at concurrency 50. */
  bullmqThroughput: { jobs: number; opsPerSec: number; durationMs: number };
  /** Reservation transaction (BEGIN, insert-if-absent, conditional UPDATE with counter, COMMIT), 1 client, ms. */
  txn: LatencySummary;
  /** The completion UPDATE after it, 1 client, ms. */
  completion: LatencySummary;
  /** Reservation + completion at 8 clients. */
  txn8: LoadResult;
  /** 3 queue stages, each doing one reservation + completion: concurrency 1 and 50. */
  pipeline1: LoadResult;
  pipeline50: LoadResult;
  /** One HTTP GET of an order from the staging order system (the read policy needs), ms. */
  http: LatencySummary;
}

/** Runs every floor probe against the world's Postgres database and Redis prefix. */
export async function runFloor(w: BenchWorld, sizes: BenchSizes, orderId: string): Promise<FloorReport> {
  const pool = new pg.Pool({ connectionString: w.database!.url, max: 10 });
  const connections: Redis[] = [];
  const conn = (): Redis => {
    const c = new Redis(REDIS_URL, { maxRetriesPerRequest: null });
    connections.push(c);
    return c;
  };
  const redis = conn();
  const closers: Array<() => Promise<unknown>> = [];
  try {
    await pool.query(`CREATE SCHEMA IF NOT EXISTS bench_floor;
      CREATE TABLE IF NOT EXISTS bench_floor.ops (key text PRIMARY KEY, status text NOT NULL,
        fencing_token bigint NOT NULL DEFAULT 0, attempts int NOT NULL DEFAULT 0, result jsonb,
        updated_at timestamptz NOT NULL DEFAULT now())`);
    let seq = 0;
    const key = (): string => `k${seq++}`;

    // 1. One hop.
    const hopQ = new Queue('floor-hop', { connection: redis, prefix: w.prefix });
    const hopDone = new Waiters<number>();
    const hopW = new Worker('floor-hop', async () => 'ok', { connection: conn(), prefix: w.prefix, concurrency: 1 });
    hopW.on('completed', (job: Job) => hopDone.settle(job.id!, nowMs()));
    closers.push(
      () => hopW.close(),
      () => hopQ.close(),
    );
    const hop = new Latencies();
    const hopUntil = nowMs() + sizes.latencyMaxMs;
    for (let i = 0; i < sizes.warmup + sizes.hop && nowMs() < hopUntil; i++) {
      const id = `h${i}`;
      const t0 = nowMs();
      const done = hopDone.wait(id, 10_000);
      await hopQ.add('hop', { i }, { jobId: id, removeOnComplete: true });
      const t1 = await done;
      if (i >= sizes.warmup) hop.record(t1 - t0);
    }

    // 2. BullMQ throughput: addBulk, one worker at concurrency 50.
    const bulkQ = new Queue('floor-bulk', { connection: redis, prefix: w.prefix });
    let drained = 0;
    let allDrained: () => void = () => {};
    const finished = new Promise<void>((r) => (allDrained = r));
    const bulkW = new Worker('floor-bulk', async () => 'ok', { connection: conn(), prefix: w.prefix, concurrency: 50 });
    bulkW.on('completed', () => {
      if (++drained === sizes.bullmqJobs) allDrained();
    });
    closers.push(
      () => bulkW.close(),
      () => bulkQ.close(),
    );
    const b0 = nowMs();
    for (let i = 0; i < sizes.bullmqJobs; i += 1000) {
      const n = Math.min(1000, sizes.bullmqJobs - i);
      await bulkQ.addBulk(Array.from({ length: n }, (_, j) => ({ name: 'bulk', data: { i: i + j }, opts: { removeOnComplete: true } })));
    }
    await finished;
    const bulkMs = nowMs() - b0;

    // 3. The reservation transaction, 1 client then 8 clients.
    const reserve = async (k: string): Promise<number> => {
      const c = await pool.connect();
      try {
        await c.query('BEGIN');
        await c.query(`INSERT INTO bench_floor.ops (key, status) VALUES ($1, 'pending') ON CONFLICT (key) DO NOTHING`, [k]);
        const r = await c.query<{ fencing_token: string }>(
          `UPDATE bench_floor.ops SET status = 'running', fencing_token = fencing_token + 1, attempts = attempts + 1, updated_at = now()
           WHERE key = $1 AND status = 'pending' RETURNING fencing_token`,
          [k],
        );
        await c.query('COMMIT');
        return Number(r.rows[0]?.fencing_token ?? 0);
      } catch (err) {
        await c.query('ROLLBACK').catch(() => {});
        throw err;
      } finally {
        c.release();
      }
    };
    const complete = async (k: string, fence: number): Promise<void> => {
      await pool.query(
        `UPDATE bench_floor.ops SET status = 'succeeded', result = $2, updated_at = now() WHERE key = $1 AND fencing_token = $3 AND status = 'running'`,
        [k, JSON.stringify({ ok: true }), fence],
      );
    };
    const unit = async (): Promise<void> => {
      const k = key();
      await complete(k, await reserve(k));
    };
    const txn = new Latencies();
    const completion = new Latencies();
    const txnUntil = nowMs() + sizes.latencyMaxMs;
    for (let i = 0; i < sizes.warmup + sizes.txn1 && nowMs() < txnUntil; i++) {
      const k = key();
      const t0 = nowMs();
      const fence = await reserve(k);
      const t1 = nowMs();
      await complete(k, fence);
      if (i >= sizes.warmup) {
        txn.record(t1 - t0);
        completion.record(nowMs() - t1);
      }
    }
    const txn8 = await closedLoop(sizes.txn8, 8, unit, { maxMs: sizes.latencyMaxMs });

    // 4. Three stages, each one reservation + completion, then the next hop.
    const stageDone = new Waiters<number>();
    const stageQs = [1, 2, 3].map((s) => new Queue(`floor-s${s}`, { connection: redis, prefix: w.prefix }));
    const stageWs = [1, 2, 3].map(
      (s) =>
        new Worker(
          `floor-s${s}`,
          async (job: Job<{ id: string }>) => {
            await unit();
            if (s < 3) await stageQs[s]!.add('stage', job.data, { jobId: job.data.id, removeOnComplete: true });
            return 'ok';
          },
          { connection: conn(), prefix: w.prefix, concurrency: 8 },
        ),
    );
    stageWs[2]!.on('completed', (job: Job<{ id: string }>) => stageDone.settle(job.data.id, nowMs()));
    closers.push(...stageWs.map((x) => () => x.close()), ...stageQs.map((q) => () => q.close()));
    let p = 0;
    const pipe = async (): Promise<void> => {
      const id = `p${p++}`;
      const done = stageDone.wait(id, 30_000);
      await stageQs[0]!.add('stage', { id }, { jobId: id, removeOnComplete: true });
      await done;
    };
    await closedLoop(sizes.warmup, 1, pipe);
    const pipeline1 = await closedLoop(sizes.pipeline1, 1, pipe, { maxMs: sizes.latencyMaxMs });
    const pipeline50 = await closedLoop(sizes.pipeline50, 50, pipe, { maxMs: sizes.latencyMaxMs });

    // 5. One plain HTTP read of the order system.
    const http = new Latencies();
    const url = `${w.url('staging')}/orders/${orderId}`;
    const httpUntil = nowMs() + sizes.latencyMaxMs;
    for (let i = 0; i < sizes.warmup + sizes.http && nowMs() < httpUntil; i++) {
      const t0 = nowMs();
      const res = await fetch(url);
      await res.json();
      if (i >= sizes.warmup) http.record(nowMs() - t0);
    }

    return {
      hop: hop.summary(),
      bullmqThroughput: { jobs: sizes.bullmqJobs, opsPerSec: round((sizes.bullmqJobs * 1000) / bulkMs), durationMs: round(bulkMs) },
      txn: txn.summary(),
      completion: completion.summary(),
      txn8,
      pipeline1,
      pipeline50,
      http: http.summary(),
    };
  } finally {
    for (const close of closers) await close().catch(() => {});
    for (const c of connections) c.disconnect();
    await pool.end();
  }
}
