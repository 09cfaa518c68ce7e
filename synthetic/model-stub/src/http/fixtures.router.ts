import { Router, type Request, type Response } from 'express';
import { parseBody } from '@gatehouse/platform';
import { FixtureRequestSchema } from '../domain/fixture-store.ts';
import type { ModelStubState } from '../domain/stub-state.ts';
import { queryString } from './query.ts';

/**
 * Fixture control plane (docs/product/public-contract.md#model-stub):
 * - `POST /fixtures` `{ticketId, responses:[entry…], repeat?}` → 201 `{ticketId, queued, repeat}`;
 *   appends to the ticket's queue. @throws UserError `invalid_body` (400 with details) on a bad body.
 * - `GET /fixtures?ticketId=` → `{fixtures: {<ticketId>: {queue, repeat}}}` (pending entries).
 * - `DELETE /fixtures[?ticketId=]` → `{cleared: <tickets cleared>}`.
 */
export function createFixturesRouter(state: ModelStubState): Router {
  const router = Router();
  router.post('/fixtures', (req: Request, res: Response) => {
    const body = parseBody(FixtureRequestSchema, req.body);
    res.status(201).json(state.fixtures.add(body));
  });
  router.get('/fixtures', (req: Request, res: Response) => {
    res.json({ fixtures: state.fixtures.snapshot(queryString(req, 'ticketId')) });
  });
  router.delete('/fixtures', (req: Request, res: Response) => {
    res.json({ cleared: state.fixtures.clear(queryString(req, 'ticketId')) });
  });
  return router;
}
