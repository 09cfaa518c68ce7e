import { Kysely, Migrator, NO_MIGRATIONS, PostgresDialect, sql, type Transaction, type MigrationResultSet } from 'kysely';
import pg from 'pg';
import { migrations } from '@gatehouse/migrations';
import type { DB } from './schema.ts';
import { testFaults } from '@gatehouse/contracts';

// bigint (int8) columns come back as strings by default; counts and sequences fit in a JS
// number for this ledger's scale, but we keep them as strings to stay exact and convert at use.

/** A Kysely handle on the ledger plus its pool (close with {@link closeDb}). */
export type Db = Kysely<DB>;
export type Trx = Transaction<DB>;

/**
 * Opens a `pg` pool on `databaseUrl` (at most `max` connections) whose clients cannot end the
 * process: every client the pool opens gets its own `error` listener for its whole life, besides
 * the pool's. node-postgres drops the pool's idle-error listener while a client is checked out (a
 * Kysely transaction, a running statement), and an `error` event with no listener ends the
 * process. A client that loses its connection (server restart, terminated backend) fails the
 * statement that was running, or the next one, with an error {@link isConnectionFault}
 * recognises; the pool discards it on release and opens a new one for the next checkout.
 * `onClientError` (optional) is told about each such error. Every pool of the runtime opens here.
 * `timeouts` (optional, see {@link PoolTimeouts}) bounds the waits on a Postgres that hangs and on
 * a full pool; the services bound only the wait for a connection (docs/decisions/0787), so a
 * statement waits as long as Postgres takes.
 * @throws Error when the test-only switch `GATEHOUSE_TEST_DISABLE_PG_ERROR_HANDLING` is set
 *   outside `GATEHOUSE_ENV=test`.
 */
export function createPool(databaseUrl: string, max: number, onClientError?: (err: Error) => void, timeouts: PoolTimeouts = {}): pg.Pool {
  const pool = new pg.Pool({
    connectionString: databaseUrl,
    max,
    ...(timeouts.connectTimeoutMs ? { connectionTimeoutMillis: timeouts.connectTimeoutMs } : {}),
    ...(timeouts.queryTimeoutMs ? { query_timeout: timeouts.queryTimeoutMs } : {}),
    ...(timeouts.statementTimeoutMs
      ? { statement_timeout: timeouts.statementTimeoutMs, idle_in_transaction_session_timeout: timeouts.statementTimeoutMs }
      : {}),
    ...(timeouts.idleInTransactionTimeoutMs ? { idle_in_transaction_session_timeout: timeouts.idleInTransactionTimeoutMs } : {}),
  });
  if (!pgErrorHandlingDisabled()) {
    const report = (err: Error): void => onClientError?.(err);
    pool.on('error', report); // an idle client died; the pool already removed it
    pool.on('connect', (client) => client.on('error', report));
  }
  return pool;
}

/**
 * Bounds on a Postgres that does not answer or does not finish, ms; unset or 0 is no bound.
 * Client side: a pool checkout or a new connection that gets no answer within `connectTimeoutMs`
 * fails with node-postgres's "timeout exceeded when trying to connect" / "Connection terminated
 * due to connection timeout" ({@link isConnectionFault}); a statement unanswered within
 * `queryTimeoutMs` fails with "Query read timeout" (its connection stays busy, and the server may
 * still run the statement later: close the pool without waiting on it). Server side,
 * `statementTimeoutMs` sets the session's `statement_timeout` and
 * `idle_in_transaction_session_timeout`: Postgres itself cancels a statement that runs (or waits on
 * a lock) longer, SQLSTATE 57014, and ends a session left idle inside a transaction that long,
 * 25P03 — either way the transaction is rolled back and nothing of it lands later.
 */
export interface PoolTimeouts {
  connectTimeoutMs?: number;
  queryTimeoutMs?: number;
  statementTimeoutMs?: number;
  /**
   * Server side, the session's `idle_in_transaction_session_timeout` alone (overrides the one
   * `statementTimeoutMs` sets): a session idle inside a transaction this long is ended by Postgres
   * (25P03, a connection fault), its transaction rolled back and its locks released — the bound
   * on how long a stopped process holds other processes' locks.
   */
  idleInTransactionTimeoutMs?: number;
}

/**
 * Opens the ledger over a {@link createPool} pool (`max` connections, default 10); a lost
 * connection fails a statement, never the process. `onClientError` is told about each one;
 * `timeouts` as for {@link createPool} (none by default).
 * @throws Error when `GATEHOUSE_TEST_DISABLE_PG_ERROR_HANDLING` is set outside `GATEHOUSE_ENV=test`.
 */
export function createDb(databaseUrl: string, max = 10, onClientError?: (err: Error) => void, timeouts: PoolTimeouts = {}): Db {
  return new Kysely<DB>({ dialect: new PostgresDialect({ pool: createPool(databaseUrl, max, onClientError, timeouts) }) });
}

/**
 * `GATEHOUSE_TEST_DISABLE_PG_ERROR_HANDLING=1` removes the client error handling of
 * {@link createDb} (a control-removed test shows the process dying on a Postgres restart).
 * @throws Error when set outside `GATEHOUSE_ENV=test`.
 */
function pgErrorHandlingDisabled(): boolean {
  return testFaults().disablePgErrorHandling;
}

/** Node socket errors of a refused, reset or unreachable connection. */
const SOCKET_ERRORS = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENOTFOUND', 'EPIPE']);

/** SQLSTATE of a connection refused for want of a slot ("sorry, too many clients already", a role's or database's limit). */
const TOO_MANY_CONNECTIONS = '53300';

/** node-postgres's message for a pool checkout that waited past `connectionTimeoutMillis`. */
const POOL_ACQUIRE_TIMEOUT = 'timeout exceeded when trying to connect';

/** node-postgres's own messages for a lost connection, a dead client and a pool wait timeout. */
const LOST_CONNECTION = new RegExp(`Connection terminated|not queryable|${POOL_ACQUIRE_TIMEOUT}`);

/**
 * True for an error that says a dependency (Postgres, Redis) cannot be reached or is shutting
 * down, not that the statement is wrong — retryable once the dependency answers again: a socket
 * error code, a Postgres class 08 (connection exception), 57P01–57P03 (administrator shutdown,
 * crash shutdown, cannot connect now) or 53300 (too many connections: the server's, a role's or a
 * database's limit, refused before any statement ran; docs/decisions/0737) SQLSTATE, or
 * node-postgres's own lost-connection messages. An `AggregateError` (IPv4 + IPv6 attempts)
 * counts when one of its errors does.
 */
export function isConnectionFault(err: unknown): boolean {
  const e = err as { code?: unknown; message?: unknown; errors?: unknown[] } | null;
  if (!e || typeof e !== 'object') return false;
  const code = typeof e.code === 'string' ? e.code : '';
  if (SOCKET_ERRORS.has(code) || code.startsWith('08') || /^57P0[1-3]$/.test(code) || code === TOO_MANY_CONNECTIONS) return true;
  if (Array.isArray(e.errors) && e.errors.some(isConnectionFault)) return true;
  const message = typeof e.message === 'string' ? e.message : '';
  return LOST_CONNECTION.test(message);
}

/**
 * True for the error of a pool checkout that waited past its bound ({@link PoolTimeouts}
 * `connectTimeoutMs`) for one of the pool's connections to free (docs/decisions/0787): the pool
 * was full, whether Postgres hangs or this process holds every connection (a transaction waiting
 * for a second one). No statement of the waiting caller ran on a connection it did not get; one
 * of {@link isConnectionFault}'s errors.
 */
export function isPoolAcquireTimeout(err: unknown): boolean {
  return err instanceof Error && err.message === POOL_ACQUIRE_TIMEOUT;
}

/** Closes the pool. */
export async function closeDb(db: Db): Promise<void> {
  await db.destroy();
}

/** Runs one migrator step over the project's migrations. @throws Error naming the failing migration. */
async function runMigrator(db: Kysely<unknown>, step: (m: Migrator) => Promise<MigrationResultSet>): Promise<MigrationResultSet> {
  const result = await step(new Migrator({ db, provider: { getMigrations: async () => migrations } }));
  if (result.error) {
    const failed = result.results?.find((r) => r.status === 'Error')?.migrationName ?? 'unknown';
    throw new Error(`migration ${failed} failed: ${String(result.error)}`);
  }
  return result;
}

/**
 * Applies every migration up (or, with `direction: 'down'`, reverts all of them).
 * @throws Error naming the failing migration.
 */
export async function migrate(db: Kysely<unknown>, direction: 'up' | 'down' = 'up'): Promise<MigrationResultSet> {
  return runMigrator(db, (m) => (direction === 'up' ? m.migrateToLatest() : m.migrateTo(NO_MIGRATIONS)));
}

/**
 * Reverts the latest applied migration only (Kysely `migrateDown`), the operator's `migrate down`.
 * Returns the reverted migration's name, or null when none is applied.
 * @throws Error naming the migration whose `down` failed.
 */
export async function migrateOneDown(db: Kysely<unknown>): Promise<string | null> {
  return (await runMigrator(db, (m) => m.migrateDown())).results?.[0]?.migrationName ?? null;
}

const RETRYABLE = new Set(['40001', '40P01']);

/**
 * `db.transaction().execute(fn)`, except that when `fn` throws and the ROLLBACK then fails too
 * (its connection ended: a terminated backend, a failover), `fn`'s error is thrown rather than
 * the rollback's connection error. Nothing commits either way; the caller answers with the reason
 * `fn` gave (a refusal, a conflict, `epoch_unavailable`), which Kysely alone would replace with an
 * opaque connection fault (docs/decisions/0698-epoch-unavailable-wrote-nothing.md).
 * @throws `fn`'s error; the database's when BEGIN or COMMIT fails.
 */
export async function transact<D, T>(db: Kysely<D>, fn: (trx: Transaction<D>) => Promise<T>): Promise<T> {
  let thrown: { err: unknown } | undefined;
  try {
    return await db.transaction().execute(async (trx) => {
      try {
        return await fn(trx);
      } catch (err) {
        thrown = { err };
        throw err;
      }
    });
  } catch (err) {
    throw thrown ? thrown.err : err;
  }
}

/**
 * Runs `fn` in one transaction ({@link transact}: `fn`'s error survives a failed rollback),
 * retrying serialization failures and deadlocks (SQLSTATE 40001, 40P01) up to `attempts` times
 * (default 5) with bounded jittered backoff (≤ 200 ms). Kysely releases the connection whether
 * COMMIT succeeds or fails.
 * @throws `fn`'s error, or the database's (BEGIN, COMMIT), after the last attempt.
 */
export async function inTransaction<T>(db: Db, fn: (trx: Trx) => Promise<T>, attempts = 5): Promise<T> {
  for (let i = 1; ; i++) {
    try {
      return await transact(db, fn);
    } catch (err) {
      const code = (err as { code?: string }).code;
      if (!code || !RETRYABLE.has(code) || i >= attempts) throw err;
      await new Promise((r) => setTimeout(r, Math.random() * Math.min(200, 10 * 2 ** i)));
    }
  }
}

/** Names of every migration this code knows, in apply order (the schema versions a release may name). */
export function knownMigrations(): string[] {
  return Object.keys(migrations).sort();
}

/**
 * The newest migration this code knows (the last of {@link knownMigrations}): the schema version
 * a release of this code names (docs/product/releases.md). Returns the migration's name, such as
 * `20261203000100-LockedRefundSums`.
 * @throws Error when the code knows no migration.
 */
export function newestMigration(): string {
  const newest = knownMigrations().at(-1);
  if (newest === undefined) throw new Error('this code knows no migration: no schema version to name');
  return newest;
}

/**
 * What keeps this code from running on `db` as release `schemaVersion` says
 * (docs/product/releases.md: the schema version is the newest migration the release needs):
 * a `schemaVersion` other than this code's newest migration, and every migration of this code
 * not applied (`gatehouse migrate up` applies them). Empty when the schema is what the code needs.
 * @throws the database error when `db` does not answer; {@link newestMigration}'s when the code
 *   knows no migration.
 */
export async function schemaProblems(db: Db, schemaVersion: string): Promise<string[]> {
  const known = knownMigrations();
  const newest = newestMigration();
  const problems: string[] = [];
  if (schemaVersion !== newest) problems.push(`schemaVersion ${schemaVersion} is not the newest migration of this code (${newest})`);
  const applied = new Set(await appliedMigrations(db));
  const missing = known.filter((m) => !applied.has(m));
  if (missing.length) problems.push(`migration(s) not applied: ${missing.join(', ')} (run gatehouse migrate up)`);
  return problems;
}

/** Names of the migrations applied to the database `db` (Kysely's migration table). */
export async function appliedMigrations(db: Db): Promise<string[]> {
  const r = await sql<{ name: string }>`SELECT name FROM kysely_migration ORDER BY name`.execute(db);
  return r.rows.map((x) => x.name);
}
