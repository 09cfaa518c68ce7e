import { FixtureStore } from './fixture-store.ts';
import { ReasoningIssued } from './reasoning.ts';
import { RequestLog } from './request-log.ts';

/** The stub's whole in-memory state: scripted fixtures, the log of received requests and the reasoning items issued. */
export type ModelStubState = { fixtures: FixtureStore; requests: RequestLog; reasoning: ReasoningIssued };

/** Creates empty state; `maxRequests` bounds the request log (default 5000, oldest dropped). */
export function createModelStubState(opts: { maxRequests?: number } = {}): ModelStubState {
  return { fixtures: new FixtureStore(), requests: new RequestLog(opts.maxRequests ?? 5000), reasoning: new ReasoningIssued() };
}
