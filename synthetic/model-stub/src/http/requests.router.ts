import { Router, type Request, type Response } from 'express';
import type { ModelStubState } from '../domain/stub-state.ts';
import { queryString } from './query.ts';

/**
 * Request log (docs/product/public-contract.md#model-stub):
 * - `GET /requests[?ticketId=][&workflowId=]` → `{requests: RequestRecord[], pairingErrors:
 *   number, pairingErrorDetails}` for that ticket / workflow (all when no filter), oldest first.
 * - `DELETE /requests[?ticketId=][&workflowId=]` → `{cleared: <requests dropped>}`; also drops
 *   the matching pairing-error records.
 */
export function createRequestsRouter(state: ModelStubState): Router {
  const router = Router();
  const filterOf = (req: Request) => ({ ticketId: queryString(req, 'ticketId'), workflowId: queryString(req, 'workflowId') });
  router.get('/requests', (req: Request, res: Response) => {
    res.json(state.requests.query(filterOf(req)));
  });
  router.delete('/requests', (req: Request, res: Response) => {
    res.json({ cleared: state.requests.clear(filterOf(req)) });
  });
  return router;
}
