/** Public API of the model-stub: the app factory, its state and the fixture / request-log types. */
export { createModelStubApp, type ModelStubOptions } from './app.ts';
export type { ModelStubState } from './domain/stub-state.ts';
export {
  FixtureEntrySchema,
  FixtureRequestSchema,
  FixtureStore,
  type FixtureEntry,
  type FixtureRequest,
  type FixtureQueue,
} from './domain/fixture-store.ts';
export type { RequestRecord, PairingErrorRecord, RequestFilter } from './domain/request-log.ts';
export type { ApiErrorBody } from './domain/api-error.ts';
export { planNextStep, eligibleTools, type PlannedStep, type PlannerContext } from './domain/planner.ts';
export type { HistoryItem } from './domain/input-items.ts';
