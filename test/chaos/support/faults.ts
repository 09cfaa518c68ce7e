import { Redis } from 'ioredis';
import { sql } from 'kysely';
import { executionsQueue, queueName } from '@gatehouse/contracts';
import type { ChaosStack } from './chaos-stack.ts';

/** Injects one fault into a loaded stack and returns when the infrastructure is back (the recovery point). */
export interface Fault {
  /** Row label of the report, e.g. `postgres restart -m fast`. */
  name: string;
  /** Runs of load submitted around the fault. */
  runs: number;
  /** Runs that must be in flight (accepted, not terminal) when the fault hits; default half of `runs`. */
  minInFlight?: number;
  /**
   * Runs in flight to wait for before injecting (default `minInFlight`, else half of `runs`). A
   * fault that lasts (termination waves, audit down) starts as soon as the load does, so the
   * rest of the load arrives during it.
   */
  startAtInFlight?: number;
  /**
   * The fault kills the executor: an effect it was sending may be left unknown (dispatch mark
   * written, outcome not), which reconciliation then owns by design; such items of this fault's
   * runs are reported in the notes, not as failures (`checkReconciliation`).
   */
  killsExecutor?: boolean;
  /** Runs before the load starts (e.g. stop audit so that executions are held from the first). */
  prepare?: (s: ChaosStack) => Promise<void>;
  /**
   * Waits for the fault's own precondition (e.g. an execution held in the delayed set), calls
   * `ctx.atFault` just before it breaks the infrastructure, repairs it and returns notes for the report.
   * @throws Error when a precondition is not met within its deadline.
   */
  inject: (s: ChaosStack, ctx: FaultContext) => Promise<string[]>;
}

/** What the runner offers a fault while it runs. */
export interface FaultContext {
  /** Call just before breaking the infrastructure: the runner counts the runs in flight then. */
  atFault: () => Promise<void>;
  /** This fault's runs that are accepted and not terminal. */
  inFlight: () => Promise<number>;
}

const sleep = (ms: number): Promise<void> => new Promise((done) => setTimeout(done, ms));

/** `pg_ctl restart -m fast` of the ledger's cluster: every connection is cut, the server is back in seconds. */
export function postgresRestart(runs: number): Fault {
  return {
    name: 'postgres restart -m fast',
    runs,
    startAtInFlight: 3,
    minInFlight: 1,
    inject: async (s, { atFault }) => {
      await atFault();
      const t0 = Date.now();
      await s.pg.restart({ mode: 'fast' });
      return [`cluster back after ${Date.now() - t0} ms`];
    },
  };
}

/** `pg_terminate_backend` on every backend of the ledger database every `everyMs` for `forMs`. */
export function backendTerminationWaves(runs: number, everyMs = 2000, forMs = 20_000): Fault {
  return {
    name: `pg_terminate_backend every ${everyMs / 1000} s for ${forMs / 1000} s`,
    runs,
    startAtInFlight: 1,
    minInFlight: 1,
    inject: async (s, { atFault }) => {
      await atFault();
      let terminated = 0;
      let waves = 0;
      for (const until = Date.now() + forMs; Date.now() < until; waves++) {
        terminated += await s.pg.terminateBackends({ database: s.dbName });
        await sleep(everyMs);
      }
      return [`${waves} waves, ${terminated} backends terminated`];
    },
  };
}

/** Reads the executions queue's delayed set (held executions wait there). */
async function withDelayedSet<T>(s: ChaosStack, fn: (r: Redis, key: string) => Promise<T>): Promise<T> {
  const r = new Redis(s.redis.url, { maxRetriesPerRequest: 1 });
  r.on('error', () => {});
  try {
    return await fn(r, `${s.prefix}:${queueName(executionsQueue.base, 'rel-1')}:delayed`);
  } finally {
    r.disconnect();
  }
}

/** Jobs in the delayed set of the executions queue. */
const delayedExecutions = (s: ChaosStack): Promise<number> => withDelayedSet(s, (r, key) => r.zcard(key));

/** Approved (not yet used) approvals whose execution job sits in the delayed set. */
async function approvedDelayed(s: ChaosStack): Promise<number> {
  const approved = await s.db
    .selectFrom('approvals')
    .select(['workflow_id', 'action_id', 'action_version', 'id', 'release_id'])
    .where('status', '=', 'approved')
    .execute();
  const ids = approved.map((a) =>
    executionsQueue.jobId({
      release: a.release_id,
      workflowId: a.workflow_id,
      actionId: a.action_id,
      actionVersion: a.action_version,
      approvalId: a.id,
    }),
  );
  return withDelayedSet(s, async (r, key) => (await Promise.all(ids.map((id) => r.zscore(key, id)))).filter((x) => x !== null).length);
}

/**
 * Waits until the executor's audit gate must see audit as unhealthy: the last heartbeat older
 * than the stack's `AUDIT_HEALTH_MAX_HEARTBEAT_AGE_MS` (plus a margin), by the database's clock.
 */
async function auditStale(s: ChaosStack): Promise<void> {
  const gateMs = Number(s.env.AUDIT_HEALTH_MAX_HEARTBEAT_AGE_MS ?? 10_000) + 500;
  for (const until = Date.now() + 60_000; ; await sleep(250)) {
    const r = await sql<{
      age: number | null;
    }>`select extract(epoch from now() - beat_at) * 1000 as age from audit_heartbeat where id = 1`.execute(s.db);
    if (Number(r.rows[0]?.age ?? Infinity) > gateMs) return;
    if (Date.now() > until) throw new Error('the audit heartbeat did not go stale with audit stopped');
  }
}

/**
 * Redis restarted empty (no persistence) while `minInFlight` runs are in flight and an approved
 * execution sits in the delayed set: audit is stopped before the load (the executor holds
 * consequential steps while audit is unhealthy, re-queued with a delay) and started again once
 * Redis is back.
 */
export function redisRestart(runs: number, minInFlight: number): Fault {
  return {
    name: 'redis restart, no persistence',
    runs,
    minInFlight,
    prepare: async (s) => {
      await s.kill('audit');
      await auditStale(s);
    },
    inject: async (s, { atFault, inFlight }) => {
      const state = async (): Promise<{ delayed: number; approvedDelayed: number; inFlight: number }> => ({
        delayed: await delayedExecutions(s),
        approvedDelayed: await approvedDelayed(s),
        inFlight: await inFlight(),
      });
      for (const until = Date.now() + 120_000; ; await sleep(250)) {
        const now = await state();
        if (now.approvedDelayed > 0 && now.inFlight >= minInFlight) break;
        if (Date.now() > until) throw new Error(`no approved execution held with ${minInFlight} runs in flight: ${JSON.stringify(now)}`);
      }
      const delayed = await delayedExecutions(s);
      const approved = await approvedDelayed(s);
      await atFault();
      await s.redis.restart();
      await s.restart('audit');
      return [`${delayed} execution(s) in the delayed set when Redis restarted, ${approved} of them approved`];
    },
  };
}

/** `kill -9` of one service under load; the stack's supervisor starts it again, as Kubernetes would. */
export function killService(service: string, runs: number): Fault {
  return {
    name: `kill -9 ${service}`,
    runs,
    killsExecutor: service === 'executor',
    inject: async (s, { atFault }) => {
      await atFault();
      const t0 = Date.now();
      const before = s.restarts(service);
      await s.kill(service, { keepDown: false });
      await s.supervised(service, before);
      return [`${service} restarted by the supervisor and ready after ${Date.now() - t0} ms`];
    },
  };
}

/** The audit service down for `downMs` (killed, then started again). */
export function auditDown(runs: number, downMs = 30_000): Fault {
  return {
    name: `audit down ${downMs / 1000} s`,
    runs,
    startAtInFlight: 1,
    minInFlight: 1,
    inject: async (s, { atFault }) => {
      await atFault();
      await s.kill('audit');
      await sleep(downMs);
      await s.restart('audit');
      return [];
    },
  };
}
