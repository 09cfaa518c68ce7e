import type { Request, Response, NextFunction, RequestHandler } from 'express';
import { createBullBoard } from '@bull-board/api';
import { BullMQAdapter } from '@bull-board/api/bullMQAdapter';
import { ExpressAdapter } from '@bull-board/express';
import type { Redis } from 'ioredis';
import type { Db } from '@gatehouse/ledger';
import type { QueueRegistry } from '@gatehouse/platform';
import { discoverQueues, type QueueEntry } from '../domain/queue-catalog.ts';

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
  /** Re-discovers queues (manifests, `releases` table, Redis) and replaces the board's set. */
  refresh: () => Promise<QueueEntry[]>;
  /** Job counts per state of one queue on the board: waiting (with prioritized), active, delayed, failed, completed (null when Redis did not answer). */
  counts: (name: string) => Promise<Record<string, number> | null>;
}

/**
 * Builds the board at `basePath` (default `/queues`). Every queue is read-only on the board
 * (bull-board answers 405 to its own write routes) and any non-GET request is refused here too:
 * moving, retrying or removing jobs is done with the audited `gatehouse queues …` commands
 * (requeue, quarantine, drain), never from a browser.
 */
export function createQueueBoard(opts: {
  db: Db;
  redis: Redis;
  queues: QueueRegistry;
  releasesDir?: string;
  basePath?: string;
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
  const board = createBullBoard({
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
  const router = serverAdapter.getRouter() as RequestHandler;
  const handler: RequestHandler = (req: Request, res: Response, next: NextFunction) => {
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.status(405).json({ error: { reason: 'read_only', message: 'the queue board is read-only; use the gatehouse queues commands' } });
      return;
    }
    // Bull-board's UI needs its own scripts; it must still never be framed.
    res.setHeader('x-frame-options', 'DENY');
    res.setHeader('content-security-policy', "frame-ancestors 'none'");
    res.setHeader('x-content-type-options', 'nosniff');
    res.setHeader('referrer-policy', 'no-referrer');
    return router(req, res, next);
  };
  return {
    handler,
    entries: () => current,
    refresh: async () => {
      current = await discoverQueues({ db: opts.db, redis: opts.redis, prefix: opts.queues.prefix, releasesDir: opts.releasesDir });
      board.replaceQueues(current.map(adapterOf));
      return current;
    },
    counts: async (name) => {
      try {
        const { prioritized = 0, ...counts } = await opts.queues.get(name).getJobCounts(...COUNTED);
        return { ...counts, waiting: (counts.waiting ?? 0) + prioritized };
      } catch {
        return null;
      }
    },
  };
}
