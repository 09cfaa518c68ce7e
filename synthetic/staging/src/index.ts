/**
 * `@gatehouse/staging`: the synthetic systems of record (payments ledger, order system, mail,
 * change service) with fault switches and a request log. Mount {@link createStagingApp} in
 * process, or run `src/main.ts` (port 7104).
 */
export { createStagingApp, type StagingAppOptions } from './app.ts';
export { ensureStagingSchema } from './schema.ts';
export { openStagingDatabase, type StagingDatabase, type StagingDb } from './db/staging.database.ts';
export {
  FaultBoard,
  FaultSpecSchema,
  FAULT_MODES,
  FAULT_TARGETS,
  type ArmedFault,
  type FaultMode,
  type FaultSpec,
  type FaultTarget,
} from './faults/fault-board.service.ts';
export type { RecordedRequest } from './repositories/request-log.repository.ts';
export { readTokenBindingSwitch } from './http/token-binding.ts';
export { ceilingCheckRemoved } from './http/payments.router.ts';
