import { Router } from 'express';
import { z } from 'zod';
import { FAULT_TARGETS } from '../faults/fault-board.service.ts';
import type { RequestLogRepository } from '../repositories/request-log.repository.ts';
import { parseQuery } from './query.parser.ts';

const ListQuerySchema = z.object({
  orderId: z.string().min(1).max(64).optional(),
  target: z.enum(FAULT_TARGETS).optional(),
});

/**
 * The request log, for "zero downstream calls" assertions:
 * - `GET /requests?orderId=…&target=…` → `{requests: [{id, at, target, method, path, orderId,
 *   idempotencyKey, fencingToken, status, reason}]}`, oldest first; 400 `invalid_query`.
 * - `DELETE /requests` → `{cleared: n}` (tests only).
 */
export function requestsRouter(requestLog: RequestLogRepository): Router {
  const router = Router();
  router.get('/requests', async (req, res) => {
    const q = parseQuery(ListQuerySchema, req.query);
    const filter: { orderId?: string; target?: string } = {};
    if (q.orderId !== undefined) filter.orderId = q.orderId;
    if (q.target !== undefined) filter.target = q.target;
    res.json({ requests: await requestLog.list(filter) });
  });
  router.delete('/requests', async (_req, res) => {
    res.json({ cleared: await requestLog.clear() });
  });
  return router;
}
