import { Router, type Request } from 'express';
import type { z } from 'zod';
import {
  OpsLimitQuerySchema,
  OpsQuerySchema,
  type OpsOverview,
  type OpsQueue,
  type OpsQueuesSchema,
  type StuckRunsSchema,
  type UnknownOperationsSchema,
} from '@gatehouse/contracts';
import { listStuckRuns, type Db } from '@gatehouse/ledger';
import { UserError } from '@gatehouse/platform';
import { currentWorklist, unknownOperations, workflowOverview } from '../domain/overview.ts';
import type { QueueBoard } from './queue-board.ts';
import { operatorOf, securePage } from './operator-auth.ts';
import { overviewPage } from './pages.html.ts';

function query(req: Request): z.infer<typeof OpsQuerySchema> {
  const r = OpsQuerySchema.safeParse(req.query);
  if (!r.success)
    throw new UserError('invalid_query', 'state must be a workflow state and limit 1..500', {
      details: r.error.issues.map((i) => ({ path: i.path.join('.'), message: i.message })),
    });
  return r.data;
}

/** The row limit of a list no state filters (`OpsLimitQuerySchema`). @throws UserError 400 `invalid_query` when it is not 1..500. */
function limitOf(req: Request): number {
  const r = OpsLimitQuerySchema.safeParse(req.query);
  if (!r.success)
    throw new UserError('invalid_query', 'limit must be an integer 1..500', {
      details: r.error.issues.map((i) => ({ path: i.path.join('.'), message: i.message })),
    });
  return r.data.limit;
}

/**
 * The dashboard's own pages and their JSON twins, all behind the operator check (mounted after
 * it): `GET /ops` (HTML overview), `GET /api/overview` (the same data), `GET /api/workflows`
 * (`?state=&limit=`), `GET /api/workflows/stuck` (live runs past their no-progress bound, with
 * the jobs they wait for and the watchdog's re-drives), `GET /api/operations/failed-unknown`, `GET /api/reconciliation/worklist`
 * and `GET /api/queues` (every queue of every release with job counts). Read-only. Queries and
 * answers are the schemas of packages/contracts/src/api/ops.ts.
 */
export function opsRouter(cfg: { db: Db; board: QueueBoard }): Router {
  const router = Router();
  const queues = async (): Promise<OpsQueue[]> =>
    Promise.all(cfg.board.entries().map(async (e) => ({ ...e, counts: await cfg.board.counts(e.name) })));
  const overview = async (req: Request): Promise<OpsOverview> => {
    const q = query(req);
    const [workflows, stuck, unknown, worklist, queueList] = await Promise.all([
      workflowOverview(cfg.db, { state: q.state, limit: q.limit }),
      listStuckRuns(cfg.db, Date.now(), q.limit),
      unknownOperations(cfg.db, q.limit),
      currentWorklist(cfg.db, q.limit),
      queues(),
    ]);
    return { stateFilter: q.state ?? null, workflows, stuck, unknown, worklist, queues: queueList };
  };

  router.get('/ops', async (req, res) => {
    securePage(res);
    const data = await overview(req);
    res.type('html').send(overviewPage({ operator: operatorOf(res).sub, ...data }));
  });
  router.get('/api/overview', async (req, res) => {
    res.json(await overview(req));
  });
  router.get('/api/workflows', async (req, res) => {
    const q = query(req);
    res.json(await workflowOverview(cfg.db, { state: q.state, limit: q.limit }));
  });
  router.get('/api/workflows/stuck', async (req, res) => {
    const body: z.infer<typeof StuckRunsSchema> = { runs: await listStuckRuns(cfg.db, Date.now(), limitOf(req)) };
    res.json(body);
  });
  router.get('/api/operations/failed-unknown', async (req, res) => {
    const body: z.infer<typeof UnknownOperationsSchema> = { operations: await unknownOperations(cfg.db, limitOf(req)) };
    res.json(body);
  });
  router.get('/api/reconciliation/worklist', async (req, res) => {
    res.json(await currentWorklist(cfg.db, limitOf(req)));
  });
  router.get('/api/queues', async (_req, res) => {
    const body: z.infer<typeof OpsQueuesSchema> = { queues: await queues() };
    res.json(body);
  });
  return router;
}
