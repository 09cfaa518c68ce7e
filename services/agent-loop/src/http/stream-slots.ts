/** Which limit refused a new event stream. */
export type StreamScope = 'user' | 'tenant';

/** Caps on the event streams one agent-loop process holds open at once. */
export interface StreamLimits {
  /** Open streams per user (`sub`), across all their workflows. */
  perUser: number;
  /** Open streams per tenant, all its users together. */
  perTenant: number;
}

/** Default caps on open streams per process: a user's few tabs and apps; a tenant's whole support floor. */
export const DEFAULT_STREAM_LIMITS: StreamLimits = { perUser: 20, perTenant: 500 };

/** A stream admitted by {@link StreamSlots.take}: `release` frees its slot (idempotent). */
export interface StreamSlot {
  release: () => void;
}

/**
 * Counts the Server-Sent Event streams this process holds open, by user and by tenant, so one
 * user or one tenant cannot hold every connection and ledger poll of a replica
 * (docs/decisions/0250-pushed-workflow-events.md, "Stream limits"). Each open stream keeps a
 * socket, two timers and a ledger re-read every poll interval. The counts are per process: N
 * replicas admit up to N × the limits, and each replica's own load stays bounded.
 */
export class StreamSlots {
  readonly #byUser = new Map<string, number>();
  readonly #byTenant = new Map<string, number>();
  /** The caps in force. */
  readonly limits: StreamLimits;
  constructor(limits: StreamLimits) {
    this.limits = limits;
  }

  /**
   * Takes a slot for `user` of `tenant`, or names the limit that refuses it (nothing counted then).
   * Callers must release the slot when the stream closes, whichever way it ends.
   */
  take(tenant: string, user: string): StreamSlot | { refused: StreamScope; limit: number } {
    if ((this.#byTenant.get(tenant) ?? 0) >= this.limits.perTenant) return { refused: 'tenant', limit: this.limits.perTenant };
    const userKey = `${tenant}\u0000${user}`;
    if ((this.#byUser.get(userKey) ?? 0) >= this.limits.perUser) return { refused: 'user', limit: this.limits.perUser };
    bump(this.#byTenant, tenant, 1);
    bump(this.#byUser, userKey, 1);
    let held = true;
    return {
      release: () => {
        if (!held) return;
        held = false;
        bump(this.#byTenant, tenant, -1);
        bump(this.#byUser, userKey, -1);
      },
    };
  }

  /** Open streams of a tenant in this process. */
  openFor(tenant: string): number {
    return this.#byTenant.get(tenant) ?? 0;
  }
}

/** Adds `by` to a count, deleting it at zero so idle tenants and users hold no entry. */
function bump(counts: Map<string, number>, key: string, by: number): void {
  const next = (counts.get(key) ?? 0) + by;
  if (next > 0) counts.set(key, next);
  else counts.delete(key);
}
