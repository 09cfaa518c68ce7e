/**
 * The one error tree of the runtime (docs/decisions/0290-one-error-tree-and-browser-session.md).
 * Every error class of every package and service extends {@link GatehouseError}, through one of
 * the bases below; a source scan (`packages/contracts/test/error-tree.test.ts`) refuses a new
 * `extends Error` anywhere else. The HTTP status of each class is decided in one place, by class:
 * `httpStatusOf` / `errorResponseOf` in packages/platform (src/http-errors.ts). The statuses named
 * below are that table's.
 */

/** Options every error of the tree accepts. */
export interface GatehouseErrorOptions {
  /** The error this one wraps (kept for logs; never sent to a client). */
  cause?: unknown;
}

/**
 * Root of the tree: a machine-readable `reason` (snake_case, returned to API clients as
 * `error.reason`) and a human message. `name` is the concrete subclass's name.
 */
export abstract class GatehouseError extends Error {
  /** Machine-readable reason, returned to API clients. */
  readonly reason: string;
  constructor(reason: string, message?: string, options?: GatehouseErrorOptions) {
    super(message ?? reason, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.reason = reason;
  }

  /** The message an HTTP client sees (default: `message`); a subclass may hide internals. */
  get publicMessage(): string {
    return this.message;
  }
}

/** Bad input from a client, an operator or the model: 400. `details` lists the issues. */
export class UserError extends GatehouseError {
  /** Structured issues (e.g. zod's, as `{path, message}`), returned as `error.details`. */
  readonly details: unknown;
  constructor(reason: string, message?: string, opts: { details?: unknown; cause?: unknown } = {}) {
    super(reason, message, opts);
    this.details = opts.details;
  }
}

/** The thing asked for does not exist, or is not visible to the caller: 404. */
export class NotFound extends GatehouseError {}

/** No credentials, or credentials that do not verify: 401. */
export class Unauthorized extends GatehouseError {}

/** The caller is authenticated but not allowed: 403. */
export class Forbidden extends GatehouseError {}

/** A named rule refused the request or command (`ruleId`); reason `policy_denied`: 403. */
export class PolicyDenied extends GatehouseError {
  /** The rule that refused. */
  readonly ruleId: string;
  constructor(ruleId: string, message?: string, options?: GatehouseErrorOptions) {
    super('policy_denied', message, options);
    this.ruleId = ruleId;
  }
}

/** Stale version, digest mismatch, key reuse with other parameters, a move the state refuses: 409. */
export class ConflictError extends GatehouseError {}

/** Expired, or already used / decided: 410. */
export class Gone extends GatehouseError {}

/**
 * A well-formed command that cannot be carried out as asked (the item, its state or the caller's
 * role refuses it); nothing changed: 422.
 */
export class Refused extends GatehouseError {}

/** Something on our side, or a dependency, failed; the request may be retried later: 503. */
export class SystemError extends GatehouseError {}

/** A write may or may not have happened downstream; never retried blindly: 500. */
export class AmbiguousOutcome extends GatehouseError {}
