/**
 * The error tree lives in packages/contracts (src/errors.ts) so every package, even those below
 * the platform, extends it; re-exported here for the services that import errors from the
 * platform. The HTTP mapping is in `http-errors.ts`.
 */
export {
  AmbiguousOutcome,
  ConflictError,
  Forbidden,
  GatehouseError,
  Gone,
  NotFound,
  PolicyDenied,
  Refused,
  SystemError,
  Unauthorized,
  UserError,
  type GatehouseErrorOptions,
} from '@gatehouse/contracts';
export {
  /** Former name of {@link Forbidden}, kept for the code and tests that still use it. */
  Forbidden as ForbiddenError,
} from '@gatehouse/contracts';
