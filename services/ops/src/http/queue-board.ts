import type { Request, Response, NextFunction, RequestHandler } from 'express';
import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { ExpressAdapter } from '@bull-board/express';
import type { Redis } from 'ioredis';
import type { Db } from '@gatehouse/ledger';
import { within, type Logger, type QueueRegistry } from '@gatehouse/platform';
import { discoverQueues, type QueueEntry } from '../domain/queue-catalog.ts';

/** How long the overview waits for one queue's job counts before it shows them as unknown (null), ms. */
export const COUNTS_TIMEOUT_MS = 1500;

/** How long a request to the board's own API (`<basePath>/api/*`) may go unanswered before 503, ms. */
export const BOARD_API_DEADLINE_MS = 3000;

/**
 * The most jobs one request of the board's API may ask for per job state (`jobsPerPage`): the
 * largest page bull-board's own settings offer. Bull-board sets no upper bound of its own
 * (docs/decisions/0736-the-queue-board-reads-a-bounded-page.md).
 */
export const BOARD_MAX_JOBS_PER_PAGE = 300;

/**
 * Job states the overview counts per queue. `prioritized` is BullMQ's waiting state of a job with
 * a priority, which every workflow job has (docs/decisions/0500-tenant-fair-queues.md): it is
 * counted as `waiting`.
 */
const COUNTED = ['waiting', 'prioritized', 'active', 'delayed', 'failed', 'completed'] as const;

/** bull-board over every queue of every release, kept current by {@link QueueBoard.refresh}. */
export interface QueueBoard {
  /** Express handler serving the board (UI and its API) under `basePath`; mount behind the operator check. */
  handler: RequestHandler;
  /** The queues on the board now. */
  entries: () => QueueEntry[];
  /**
   * Re-discovers queues (manifests, `releases` table, Redis) and replaces the board's set. Redis's
   * part is bounded and skipped while Redis is not ready or does not answer (see `discoverQueues`):
   * this never waits on Redis longer than its bound.
   */
  refresh: () => Promise<QueueEntry[]>;
  /**
   * Job counts per state of one queue on the board: waiting (with prioritized), active, delayed,
   * failed, completed — or null when Redis did not answer: its connection is not `ready` (nothing
   * is sent), counts asked for earlier are still unanswered (nothing more is sent), it failed, or
   * it gave no answer within {@link COUNTS_TIMEOUT_MS}. Never rejects.
   */
  counts: (name: string) => Promise<Record<string, number> | null>;
}

/**
 * Why a `jobsPerPage` query value asks for more than {@link BOARD_MAX_JOBS_PER_PAGE} jobs, or
 * null when it does not: absent, within the bound, or not a number at all (bull-board answers
 * that with its own 400). Read as bull-board reads it (`Number`, so `1e5` and `0x2710` count).
 */
function pageTooLarge(value: unknown): string | null {
  if (typeof value !== 'string' || !(Number(value) > BOARD_MAX_JOBS_PER_PAGE)) return null;
  return `jobsPerPage is at most ${BOARD_MAX_JOBS_PER_PAGE} (the board's largest page), got ${value.trim().slice(0, 20)}; read further pages with page=2, 3, …`;
}

/**
 * Builds the board at `basePath` (default `/queues`). Every queue is read-only on the board
 * (bull-board answers 405 to its own write routes) and any non-GET request is refused here too:
 * moving, retrying or removing jobs is done with the audited `gatehouse queues …` commands
 * (requeue, quarantine, drain), never from a browser. While Redis is not answering, the board's
 * API (`<basePath>/api/*`) answers 503 `dependency_unavailable` (with `Retry-After: 5`, seconds)
 * at once, and any of its requests still unanswered after {@link BOARD_API_DEADLINE_MS} gets the
 * same 503 and holds Redis as unanswering until a PING sent then is answered
 * (docs/decisions/0651-ops-without-redis.md).
 */
export function createQueueBoard(opts: {
  db: Db;
  redis: Redis;
  queues: QueueRegistry;
  releasesDir?: string;
  basePath?: string;
  /** Told when discovery goes on without Redis (warn). */
  log?: Logger;
}): QueueBoard {
  const basePath = opts.basePath ?? '/queues';
  const serverAdapter = new ExpressAdapter();
  serverAdapter.setBasePath(basePath);
  const adapters = new Map<string, BullMQAdapter>();
  let current: QueueEntry[] = [];
  const adapterOf = (e: QueueEntry): BullMQAdapter => {
    let a = adapters.get(e.name);
    if (!a) {
      a = new BullMQAdapter(opts.queues.get(e.name), {
        readOnlyMode: true,
        allowRetries: false,
        description: `release ${e.release} · ${e.base}`,
      });
      adapters.set(e.name, a);
    }
    return a;
  };
  const board = bullBoard(serverAdapter);
  const gate = redisGate(opts.redis);
  const handler = boardHandler(serverAdapter.getRouter() as RequestHandler, opts.redis, gate);
  return {
    handler,
    entries: () => current,
    refresh: async () => {
      current = await discoverQueues({
        db: opts.db,
        redis: opts.redis,
        prefix: opts.queues.prefix,
        releasesDir: opts.releasesDir,
        known: current,
        onRedisSkipped: (why) => opts.log?.warn({ why }, 'queue discovery went on without redis; retried at the next discovery'),
      });
      board.replaceQueues(current.map(adapterOf));
      return current;
    },
    counts: async (name) => {
      if (gate.hold()) return null;
      let settled = false;
      const asked = opts.queues.get(name).getJobCounts(...COUNTED);
      void asked.then(
        () => void (settled = true),
        () => void (settled = true),
      );
      try {
        const { prioritized = 0, ...counts } = await within(asked, COUNTS_TIMEOUT_MS);
        return { ...counts, waiting: (counts.waiting ?? 0) + prioritized };
      } catch {
        if (!settled) gate.stillUnanswered(asked);
        return null;
      }
    },
  };
}

/** The bull-board instance on `serverAdapter`: no queues yet, titled, linking back to the overview and sign-out. */
function bullBoard(serverAdapter: ExpressAdapter): ReturnType<typeof createBullBoard> {
  return createBullBoard({
    queues: [],
    serverAdapter,
    options: {
      uiConfig: {
        boardTitle: 'Gatehouse queues',
        miscLinks: [
          { text: 'Ops overview', url: '/ops' },
          { text: 'Sign out', url: '/signout' },
        ],
        hideDocsLink: true,
      },
    },
  });
}

/** Whether Redis may be asked now, shared by the board's API and the overview's counts. */
interface RedisGate {
  /** Why Redis is not to be asked now (its connection is not ready, or earlier commands are still unanswered), or null when it may be. */
  hold: () => string | null;
  /** Counts `settles` as a command that outlived its bound until it settles (either way). */
  stillUnanswered: (settles: Promise<unknown>) => void;
}

/**
 * The gate of `redis`: commands that outlived their bound and are still unanswered hold it shut —
 * while any is, Redis is not asked again (a Redis that accepts connections but answers nothing
 * would pile them up) — as does a connection that is not `ready`.
 */
function redisGate(redis: Redis): RedisGate {
  let unanswered = 0;
  return {
    hold: () => {
      if (redis.status !== 'ready') return `redis connection is ${redis.status}`;
      if (unanswered > 0) return 'redis has not answered earlier commands';
      return null;
    },
    stillUnanswered: (settles) => {
      unanswered++;
      void settles.then(
        () => unanswered--,
        () => unanswered--,
      );
    },
  };
}

/**
 * The board's Express handler in front of bull-board's `router`: any non-GET/HEAD request is 405
 * `read_only`; every answer carries the no-framing headers. A request of the board's API
 * (`/api`, `/api/*`) asking for more than {@link BOARD_MAX_JOBS_PER_PAGE} jobs per state is 400
 * `invalid_query`; while `gate` holds Redis it is 503 at once, and one still unanswered after
 * {@link BOARD_API_DEADLINE_MS} gets the 503 and a PING the gate waits for.
 */
function boardHandler(router: RequestHandler, redis: Redis, gate: RedisGate): RequestHandler {
  return (req: Request, res: Response, next: NextFunction) => {
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.status(405).json({ error: { reason: 'read_only', message: 'the queue board is read-only; use the gatehouse queues commands' } });
      return;
    }
    // Bull-board's UI needs its own scripts; it must still never be framed.
    res.setHeader('x-frame-options', 'DENY');
    res.setHeader('content-security-policy', "frame-ancestors 'none'");
    res.setHeader('x-content-type-options', 'nosniff');
    res.setHeader('referrer-policy', 'no-referrer');
    // The board's own API reads Redis; its UI (HTML, scripts) does not. Matched as bull-board's
    // express router matches it, case-insensitively: `/API/queues` is the API too.
    if (/^\/api(\/|$)/i.test(req.path)) {
      const tooLarge = pageTooLarge(req.query.jobsPerPage);
      if (tooLarge) return void res.status(400).json({ error: { reason: 'invalid_query', message: tooLarge } });
      const why = gate.hold();
      if (why) return void unavailable(res, why);
      const timer = setTimeout(() => {
        if (res.headersSent) return;
        unavailable(res, `redis gave no answer within ${BOARD_API_DEADLINE_MS} ms`);
        // The board's own commands cannot be watched; a PING behind them answers when Redis does.
        gate.stillUnanswered(redis.ping());
      }, BOARD_API_DEADLINE_MS);
      res.on('close', () => clearTimeout(timer));
      res.on('finish', () => clearTimeout(timer));
    }
    return router(req, res, next);
  };
}

/** 503 `dependency_unavailable` with `Retry-After: 5` (seconds): the board's API cannot read Redis now. */
function unavailable(res: Response, why: string): void {
  res.setHeader('retry-after', '5');
  res
    .status(503)
    .json({ error: { reason: 'dependency_unavailable', message: `the queue board cannot read Redis now (${why}); retry later` } });
}
