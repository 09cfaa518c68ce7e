import pg from 'pg';
import { Kysely, PostgresDialect } from 'kysely';
import { createPool, migrate } from '@gatehouse/ledger';
import { asPostgresFault, cliPostgresTimeouts } from './cli-db.ts';

/** Splits a Postgres URL into the admin URL (database `postgres`) and the database name. */
export function splitDatabaseUrl(url: string): { adminUrl: string; name: string } {
  const u = new URL(url);
  const name = decodeURIComponent(u.pathname.replace(/^\//, ''));
  if (!/^[a-z0-9_]+$/.test(name)) throw new Error(`database name ${name} must be lower-case letters, digits and _`);
  u.pathname = '/postgres';
  return { adminUrl: u.toString(), name };
}

/**
 * Creates the database named in `url` when it does not exist (or drops and recreates it with
 * `fresh`), then applies every migration. A Postgres that does not answer the connection within
 * `CLI_POSTGRES_CONNECT_TIMEOUT_MS` ends it; the migrations' statements themselves are not bounded.
 * @throws DependencyUnavailable(`postgres`) when Postgres cannot be reached or does not answer;
 *   Error naming a failing migration.
 */
export async function prepareDatabase(url: string, opts: { fresh?: boolean } = {}): Promise<void> {
  const { adminUrl, name } = splitDatabaseUrl(url);
  const timeouts = cliPostgresTimeouts({ migration: true });
  const admin = new pg.Client({ connectionString: adminUrl, connectionTimeoutMillis: timeouts.connectTimeoutMs });
  admin.on('error', () => {}); // a lost connection also rejects the query that was running: that error is reported
  try {
    await admin.connect();
  } catch (err) {
    throw asPostgresFault(err, url, timeouts);
  }
  try {
    if (opts.fresh) await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    const exists = await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
    if (!exists.rowCount) await admin.query(`CREATE DATABASE ${name}`);
  } catch (err) {
    throw asPostgresFault(err, url, timeouts);
  } finally {
    await admin.end();
  }
  const db = new Kysely<unknown>({ dialect: new PostgresDialect({ pool: createPool(url, 1, undefined, timeouts) }) });
  try {
    await migrate(db);
  } catch (err) {
    throw asPostgresFault(err, url, timeouts);
  } finally {
    await db.destroy();
  }
}
