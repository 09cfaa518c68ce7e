import type { Express } from 'express';
import { createHttpApp, createLogger, finishApp, type Logger } from '@gatehouse/platform';
import { createModelStubState, type ModelStubState } from './domain/stub-state.ts';
import { apiErrorHandler, apiNotFound } from './http/api-errors.middleware.ts';
import { createFixturesRouter } from './http/fixtures.router.ts';
import { createRequestsRouter } from './http/requests.router.ts';
import { createResponsesRouter } from './http/responses.router.ts';

/** Options of {@link createModelStubApp}. */
export type ModelStubOptions = {
  /** Logger (default: `createLogger('model-stub')`). */
  log?: Logger;
  /** Bound of the request log, oldest dropped (default 5000). */
  maxRequests?: number;
};

/**
 * Builds the model-stub express app, unstarted, with its in-memory state: `POST /v1/responses`
 * (Responses API wire format), `POST|GET|DELETE /fixtures`, `GET|DELETE /requests`,
 * `GET /healthz`, `GET /readyz`. Mount in-process or `listen(app, port)`.
 */
export function createModelStubApp(opts: ModelStubOptions = {}): { app: Express; state: ModelStubState } {
  const log = opts.log ?? createLogger('model-stub');
  const state = createModelStubState({ maxRequests: opts.maxRequests ?? 5000 });
  const app = createHttpApp('model-stub');
  app.use('/v1', createResponsesRouter(state, log));
  app.use('/v1', apiNotFound);
  app.use('/v1', apiErrorHandler(log));
  app.use(createFixturesRouter(state));
  app.use(createRequestsRouter(state));
  finishApp(app, log);
  return { app, state };
}
