import { sql } from 'kysely';
import type { Db } from './db.ts';

/**
 * What the ledger's Postgres says of its replication, read by {@link readLedgerReplication}:
 * whether it is itself a standby, the commit setting of the services' role and database
 * (`synchronous_commit`, as a new session of the same URL gets it), `synchronous_standby_names`,
 * and each standby streaming from it (`pg_stat_replication`).
 */
export interface LedgerReplication {
  /** `pg_is_in_recovery()`: the URL reaches a standby, where nothing can be written. */
  inRecovery: boolean;
  /** `off`, `local`, `remote_write`, `on` or `remote_apply`. */
  synchronousCommit: string;
  /** The primary's `synchronous_standby_names` ('' when no standby is synchronous). */
  synchronousStandbyNames: string;
  standbys: StandbyState[];
}

/** One row of `pg_stat_replication`. */
export interface StandbyState {
  /** The standby's `application_name` (its `cluster_name`, or `walreceiver`). */
  name: string;
  /** `streaming`, `catchup`, `startup`, `backup` or `stopping`; null when the role may not see it. */
  state: string | null;
  /** `sync`, `quorum`, `potential` or `async`; null when the role may not see it (grant pg_monitor). */
  syncState: string | null;
  /** How far its replay is behind, ms (`replay_lag`); null when idle or unknown. */
  replayLagMs: number | null;
}

/**
 * The verdict of {@link judgeReplication}, by docs/decisions/0775 (a promote must lose nothing
 * the services acknowledged):
 * - `synchronous`: every commit waits for a synchronous standby, and one is streaming;
 * - `no_standby`: nothing streams and none is required: there is no standby to promote (a restore
 *   from a backup is data loss, handled by the same procedure);
 * - `asynchronous`: a standby streams but a commit does not wait for it, or `synchronous_commit`
 *   lets a commit be acknowledged before it is safe: a promote (or, with `off`, a crash) can lose
 *   acknowledged commits;
 * - `waiting`: a synchronous standby is required and none is streaming: every commit waits;
 * - `standby`: the URL reaches a standby;
 * - `unknown`: the role may not see the standbys' sync state (grant it pg_monitor).
 */
export type ReplicationVerdict = {
  kind: 'synchronous' | 'no_standby' | 'asynchronous' | 'waiting' | 'standby' | 'unknown';
  /** One sentence: why, and what to change when it is not safe. */
  why: string;
};

/** The `synchronous_commit` values that make a commit wait until a synchronous standby flushed it (ADR 0775). */
const WAITS_FOR_STANDBY = new Set(['on', 'remote_apply']);

/**
 * Reads {@link LedgerReplication} in one statement on `db` (any role: the standbys' states are
 * null without pg_monitor or superuser).
 * @throws the driver's error when Postgres is unreachable (a connection fault).
 */
export async function readLedgerReplication(db: Db): Promise<LedgerReplication> {
  const r = await sql<{
    in_recovery: boolean;
    synchronous_commit: string;
    names: string;
    standbys: Array<{ name: string; state: string | null; sync_state: string | null; replay_lag_ms: number | null }>;
  }>`SELECT pg_is_in_recovery() AS in_recovery,
            current_setting('synchronous_commit') AS synchronous_commit,
            current_setting('synchronous_standby_names') AS names,
            coalesce((SELECT json_agg(json_build_object(
                        'name', application_name, 'state', state, 'sync_state', sync_state,
                        'replay_lag_ms', round(extract(epoch FROM replay_lag) * 1000)) ORDER BY application_name)
                        FROM pg_stat_replication), '[]'::json) AS standbys`.execute(db);
  const row = r.rows[0]!;
  return {
    inRecovery: row.in_recovery,
    synchronousCommit: row.synchronous_commit,
    synchronousStandbyNames: row.names,
    standbys: row.standbys.map((s) => ({ name: s.name, state: s.state, syncState: s.sync_state, replayLagMs: s.replay_lag_ms })),
  };
}

/**
 * Judges {@link LedgerReplication} against docs/decisions/0775: a standby must be synchronous
 * (`synchronous_standby_names` naming it, `synchronous_commit` `on` or `remote_apply`) for a
 * promote to lose nothing acknowledged. `synchronous_commit = off` is judged unsafe with or
 * without a standby: the primary itself may acknowledge a commit a crash then loses.
 */
export function judgeReplication(r: LedgerReplication): ReplicationVerdict {
  if (r.inRecovery) return { kind: 'standby', why: 'the URL reaches a standby (in recovery): point DATABASE_URL at the primary' };
  if (r.synchronousCommit === 'off')
    return {
      kind: 'asynchronous',
      why: 'synchronous_commit is off: a crash of the primary itself can lose commits it acknowledged; set it to on',
    };
  const required = r.synchronousStandbyNames.trim() !== '';
  if (!required && r.standbys.length === 0)
    return { kind: 'no_standby', why: 'no standby streams and none is required: there is nothing to promote' };
  if (r.standbys.some((s) => s.syncState === null))
    return { kind: 'unknown', why: "this role may not see the standbys' sync state: grant it pg_monitor, or run the check as a superuser" };
  const streamingSync = r.standbys.filter((s) => s.state === 'streaming' && (s.syncState === 'sync' || s.syncState === 'quorum'));
  if (!required)
    return {
      kind: 'asynchronous',
      why: `${names(r.standbys)} stream${r.standbys.length === 1 ? 's' : ''} asynchronously: synchronous_standby_names is empty; name the standby there`,
    };
  if (streamingSync.length === 0)
    return {
      kind: 'waiting',
      why: `synchronous_standby_names is "${r.synchronousStandbyNames}" and no synchronous standby is streaming: every commit waits until one is`,
    };
  if (!WAITS_FOR_STANDBY.has(r.synchronousCommit))
    return {
      kind: 'asynchronous',
      why: `synchronous_commit is ${r.synchronousCommit}: a commit is acknowledged before the standby flushed it; set it to on or remote_apply`,
    };
  const others = r.standbys.filter((s) => !streamingSync.includes(s));
  return {
    kind: 'synchronous',
    why: `${names(streamingSync)} confirm${streamingSync.length === 1 ? 's' : ''} every commit${
      others.length ? `; promote only ${streamingSync.length === 1 ? 'it' : 'one of them'}, not ${names(others)} (not synchronous)` : ''
    }`,
  };
}

const names = (standbys: StandbyState[]): string => standbys.map((s) => s.name).join(', ');
