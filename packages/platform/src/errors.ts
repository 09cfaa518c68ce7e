/**
 * One error tree for the whole runtime. HTTP mapping happens only in {@link httpStatusOf} /
 * the express error middleware.
 */
export abstract class GatehouseError extends Error {
  /** Machine-readable reason, returned to API clients. */
  readonly reason: string;
  constructor(reason: string, message?: string) {
    super(message ?? reason);
    this.name = new.target.name;
    this.reason = reason;
  }
}

/** Bad input from a client or the model: 400 (or 401/404 via `status`). */
export class UserError extends GatehouseError {
  readonly status: 400 | 401 | 404;
  readonly details: unknown;
  constructor(reason: string, message?: string, opts: { status?: 400 | 401 | 404; details?: unknown } = {}) {
    super(reason, message);
    this.status = opts.status ?? 400;
    this.details = opts.details;
  }
}

/** The caller is authenticated but not allowed: 403. */
export class ForbiddenError extends GatehouseError {}

/** Policy denied an action under a named rule. */
export class PolicyDenied extends GatehouseError {
  readonly ruleId: string;
  constructor(ruleId: string, message?: string) {
    super('policy_denied', message);
    this.ruleId = ruleId;
  }
}

/** Stale version, digest mismatch, key reuse with other parameters: 409. */
export class ConflictError extends GatehouseError {}

/** Expired or already used / decided: 410. */
export class GoneError extends GatehouseError {}

/** Something on our side failed: 500/503. */
export class SystemError extends GatehouseError {}

/** A write may or may not have happened downstream; never retried blindly. */
export class AmbiguousOutcome extends GatehouseError {}

/** Maps an error to its HTTP status. */
export function httpStatusOf(err: unknown): number {
  if (err instanceof UserError) return err.status;
  if (err instanceof ForbiddenError) return 403;
  if (err instanceof PolicyDenied) return 403;
  if (err instanceof ConflictError) return 409;
  if (err instanceof GoneError) return 410;
  if (err instanceof SystemError) return 503;
  return 500;
}
