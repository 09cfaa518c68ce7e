import { Kysely, Migrator, NO_MIGRATIONS, PostgresDialect, sql, type Transaction, type MigrationResultSet } from 'kysely';
import pg from 'pg';
import { migrations } from '@gatehouse/migrations';
import type { DB } from './schema.ts';

// bigint (int8) columns come back as strings by default; counts and sequences fit in a JS
// number for this ledger's scale, but we keep them as strings to stay exact and convert at use.

/** A Kysely handle on the ledger plus its pool (close with {@link closeDb}). */
export type Db = Kysely<DB>;
export type Trx = Transaction<DB>;

/** Opens a pooled connection to `databaseUrl` (`max` connections, default 10). */
export function createDb(databaseUrl: string, max = 10): Db {
  const pool = new pg.Pool({ connectionString: databaseUrl, max });
  pool.on('error', () => {
    // An idle client lost its connection (e.g. the server restarted); the pool replaces it.
  });
  return new Kysely<DB>({ dialect: new PostgresDialect({ pool }) });
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
 * Runs `fn` in one transaction, retrying serialization failures and deadlocks (SQLSTATE 40001,
 * 40P01) up to `attempts` times (default 5) with bounded jittered backoff (≤ 200 ms).
 * Kysely releases the connection whether COMMIT succeeds or fails.
 */
export async function inTransaction<T>(db: Db, fn: (trx: Trx) => Promise<T>, attempts = 5): Promise<T> {
  for (let i = 1; ; i++) {
    try {
      return await db.transaction().execute(fn);
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

/** Names of the migrations applied to the database `db` (Kysely's migration table). */
export async function appliedMigrations(db: Db): Promise<string[]> {
  const r = await sql<{ name: string }>`SELECT name FROM kysely_migration ORDER BY name`.execute(db);
  return r.rows.map((x) => x.name);
}
