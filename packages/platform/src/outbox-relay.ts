import { sql } from 'kysely';
import { jobOptionsFor, type OutageMark } from '@gatehouse/contracts';
import { outboxFairKey, type Db, type OutboxRow, type Trx } from '@gatehouse/ledger';
import type { QueueRegistry } from './queues.ts';
import type { Logger } from './logger.ts';
import { within } from './timeout.ts';

/** `payload` with an outage of the queue store since `since`, unless it already carries an outage. */
function withQueueOutage(payload: unknown, since: Date): unknown {
  const p = payload as Record<string, unknown> | null;
  if (!p || typeof p !== 'object' || p.outage) return payload;
  const outage: OutageMark = { dependency: 'redis', sinceMs: since.getTime() };
  return { ...p, outage };
}

/** How long a published row may wait for its batched `published_at` mark, ms (far below the sweep's 2 s grace). */
export const MARK_DELAY_MS = 25;

/** Marks rows `ids` published (in `db`, or the sweep's transaction). */
async function markPublished(db: Db | Trx, ids: string[]): Promise<void> {
  await db.updateTable('outbox').set({ published_at: new Date() }).where('id', 'in', ids).execute();
}

/**
 * Publishes outbox rows to BullMQ (docs/product/design.md#transactional-outbox). The fast path is
 * {@link OutboxRelay.publish}, called right after the transaction that wrote the rows commits,
 * so no polling interval sits on the critical path. The sweep ({@link OutboxRelay.start}) is the
 * recovery path for rows a crash left unpublished: it takes rows older than `graceMs` with
 * `FOR UPDATE SKIP LOCKED`, so several relays never publish the same row at once (a double
 * publish is harmless anyway: job ids are deterministic and consumers idempotent).
 */
export class OutboxRelay {
  readonly #db: Db;
  readonly #queues: QueueRegistry;
  readonly #log: Logger;
  #timer: NodeJS.Timeout | undefined;
  #sweeping: Promise<void> | undefined;
  /** Ids published but not yet marked, and the timer of their one batched mark (docs/decisions/0370-batched-outbox-marks.md). */
  readonly #unmarked = new Set<string>();
  #markTimer: NodeJS.Timeout | undefined;
  #marking: Promise<void> | undefined;

  constructor(db: Db, queues: QueueRegistry, log: Logger) {
    this.#db = db;
    this.#queues = queues;
    this.#log = log;
  }

  /**
   * Publishes committed rows, waiting at most `waitMs` (default 2000 ms): with Redis down the
   * request that committed them answers anyway, the publish goes on in the background and the
   * sweep retries (deterministic job ids make a second add a no-op). Published rows are marked
   * `published_at` by one batched UPDATE at most {@link MARK_DELAY_MS} later, off the caller's
   * path; a row whose mark is lost (a crash, the ledger down) is published again by the sweep,
   * which is harmless. Errors are logged, never thrown.
   */
  async publish(rows: OutboxRow[], waitMs = 2000): Promise<void> {
    if (!rows.length) return;
    if (!this.#queueStoreReady()) {
      // Redis is known to be down: leave the rows to the sweep, which marks the wait as an outage.
      this.#log.warn({ rows: rows.length }, 'queue store unavailable; the outbox sweep will publish');
      return;
    }
    const work = (async () => {
      await this.#add(rows);
      this.#markLater(rows);
    })().catch((err: unknown) => {
      this.#log.warn({ err: (err as Error).message, rows: rows.length }, 'outbox publish failed; sweep will retry');
    });
    // `work` never rejects (errors are logged above): only the wait can run out.
    await within(work, waitMs).catch(() => {
      this.#log.warn({ rows: rows.length, waitMs }, 'outbox publish slow (queue unavailable?); continuing in the background');
    });
  }

  /** Whether the registry's Redis connection is up now (ioredis `status`); any other client counts as up. */
  #queueStoreReady(): boolean {
    const status = (this.#queues.connection as { status?: unknown }).status;
    return typeof status !== 'string' || status === 'ready';
  }

  async #add(rows: OutboxRow[]): Promise<void> {
    for (const r of rows) {
      await this.#queues.add(r.queue, r.job_name, r.payload, { ...jobOptionsFor(r.queue), jobId: r.job_id }, r.fair_key);
    }
  }

  /**
   * One recovery pass; returns how many rows it published. A row the sweep publishes waited in
   * the outbox because the queue store did not take it (or its writer died before publishing):
   * its job carries that wait as an outage of `redis` since the row was written, so the consumer
   * credits it to the run's deadline like any outage (docs/decisions/0110-outage-time.md). A row
   * that already names an outage keeps it.
   */
  async sweep(graceMs = 2000, limit = 200): Promise<number> {
    // Never hold the rows' locks while Redis is down: the adds would wait for it inside the transaction.
    if (!this.#queueStoreReady()) return 0;
    return this.#db.transaction().execute(async (trx) => {
      const found = await trx
        .selectFrom('outbox')
        .select(['id', 'queue', 'job_name', 'job_id', 'payload', 'created_at', outboxFairKey.as('fair_key')])
        .where('published_at', 'is', null)
        .where(sql<boolean>`created_at < now() - make_interval(secs => ${graceMs / 1000})`)
        .orderBy('id')
        .limit(limit)
        .forUpdate()
        .skipLocked()
        .execute();
      if (!found.length) return 0;
      const rows = found.map(({ created_at, ...r }) => ({ ...r, payload: withQueueOutage(r.payload, created_at) }));
      await this.#add(rows as OutboxRow[]);
      await markPublished(
        trx,
        rows.map((r) => r.id),
      );
      return rows.length;
    });
  }

  /** Starts the periodic sweep every `intervalMs` (default 1000 ms). */
  start(intervalMs = 1000): void {
    this.#timer = setInterval(() => {
      if (this.#sweeping) return;
      this.#sweeping = this.sweep()
        .then((n) => {
          if (n) this.#log.info({ published: n }, 'outbox sweep published rows');
        })
        .catch((err: unknown) => this.#log.warn({ err: (err as Error).message }, 'outbox sweep failed'))
        .finally(() => {
          this.#sweeping = undefined;
        });
    }, intervalMs);
    this.#timer.unref();
  }

  /** Queues the published `rows` for the next batched mark. */
  #markLater(rows: OutboxRow[]): void {
    for (const r of rows) this.#unmarked.add(r.id);
    if (this.#markTimer) return;
    this.#markTimer = setTimeout(() => void this.flushMarks(), MARK_DELAY_MS);
    this.#markTimer.unref();
  }

  /**
   * Writes the marks of every row published so far, in one UPDATE per batch (also what
   * {@link stop} does last). Returns once no mark is pending or being written, whoever started
   * the batch. A failure is logged and its rows stay unmarked: the sweep publishes them again.
   */
  async flushMarks(): Promise<void> {
    clearTimeout(this.#markTimer);
    this.#markTimer = undefined;
    while (this.#marking || this.#unmarked.size) {
      if (!this.#marking) {
        const ids = [...this.#unmarked];
        this.#unmarked.clear();
        this.#marking = markPublished(this.#db, ids)
          .catch((err: unknown) =>
            this.#log.warn({ err: (err as Error).message, rows: ids.length }, 'outbox mark failed; sweep will republish'),
          )
          .finally(() => {
            this.#marking = undefined;
          });
      }
      await this.#marking;
    }
  }

  /**
   * {@link publish}, then {@link flushMarks}: for a short-lived caller (the CLI) that ends its
   * process right after, so its rows are not left for the sweep to publish again.
   */
  async publishAndMark(rows: OutboxRow[], waitMs = 2000): Promise<void> {
    await this.publish(rows, waitMs);
    await this.flushMarks();
  }

  /** Stops the sweep and writes the marks still pending. */
  async stop(): Promise<void> {
    clearInterval(this.#timer);
    await this.#sweeping;
    await this.flushMarks();
  }
}
