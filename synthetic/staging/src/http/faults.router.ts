import { Router } from 'express';
import { parseBody } from '@gatehouse/platform';
import { FaultSpecSchema, type FaultBoard } from '../faults/fault-board.service.ts';

/**
 * Fault switches for tests (docs/product/design.md#synthetic-environment):
 * - `POST /faults` body {@link FaultSpecSchema} → 201 `{fault}`; 400 invalid body.
 * - `GET /faults` → `{faults: [...]}` (armed ones, oldest first).
 * - `DELETE /faults` → `{cleared: n}`.
 */
export function faultsRouter(faults: FaultBoard): Router {
  const router = Router();
  router.post('/faults', (req, res) => {
    res.status(201).json({ fault: faults.arm(parseBody(FaultSpecSchema, req.body)) });
  });
  router.get('/faults', (_req, res) => {
    res.json({ faults: faults.list() });
  });
  router.delete('/faults', (_req, res) => {
    res.json({ cleared: faults.clear() });
  });
  return router;
}
