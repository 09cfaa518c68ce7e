import { randomBytes } from 'node:crypto';
import type { Server } from 'node:http';
import pg from 'pg';
import { sql } from 'kysely';
import { closeServer, createLogger, listen } from '@gatehouse/platform';
import { mintDelegatedToken, type DelegatedClaims } from '@gatehouse/credentials';
import { createStagingApp } from '../../src/app.ts';
import { openStagingDatabase, type StagingDb } from '../../src/db/staging.database.ts';
import type { FaultBoard } from '../../src/faults/fault-board.service.ts';
import { ensureStagingSchema } from '../../src/schema.ts';

/** Secret shared by the test "executor" (minting) and the staging app (verifying). */
export const TEST_SECRET = 'staging-test-delegation-secret';

const ADMIN_URL = process.env.STAGING_TEST_ADMIN_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

/** A running staging app over its own throw-away database. */
export interface StagingHarness {
  db: StagingDb;
  faults: FaultBoard;
  server: Server;
  /** `http://127.0.0.1:<port>` of the real server. */
  baseUrl: string;
  /** Sets the revocation epoch in `public.credential_epochs` (creates the table on first use). */
  setEpoch(epoch: number): Promise<void>;
  /** Closes the server and pool, then drops the database (`WITH (FORCE)`). */
  stop(): Promise<void>;
}

async function admin<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: ADMIN_URL });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

/** Creates database `staging_test_<random>`, the schema, and a listening staging app. */
export async function startStaging(): Promise<StagingHarness> {
  const name = `staging_test_${randomBytes(6).toString('hex')}`;
  await admin((c) => c.query(`CREATE DATABASE ${name}`));
  const url = new URL(ADMIN_URL);
  url.pathname = `/${name}`;
  const { db } = openStagingDatabase(url.toString(), { maxConnections: 30 });
  await ensureStagingSchema(db);
  const log = createLogger('staging-test');
  log.level = 'silent';
  const { app, faults } = createStagingApp({ db, delegationSecret: TEST_SECRET, log });
  const { server, port } = await listen(app, 0);
  return {
    db,
    faults,
    server,
    baseUrl: `http://127.0.0.1:${port}`,
    async setEpoch(epoch) {
      await sql`CREATE TABLE IF NOT EXISTS public.credential_epochs (id int PRIMARY KEY, epoch int NOT NULL)`.execute(db);
      await sql`INSERT INTO public.credential_epochs (id, epoch) VALUES (1, ${epoch})
        ON CONFLICT (id) DO UPDATE SET epoch = EXCLUDED.epoch`.execute(db);
    },
    async stop() {
      server.closeAllConnections();
      await closeServer(server);
      await db.destroy();
      await admin((c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`));
    },
  };
}

/**
 * Mints a delegated token as the executor would: rep-ana of quillfeather acting through the
 * agent, ceiling 50000 cents, epoch 0, for the payments ledger unless overridden.
 */
export async function token(overrides: Partial<DelegatedClaims> = {}, secret = TEST_SECRET): Promise<string> {
  const claims: DelegatedClaims = {
    sub: 'rep-ana',
    act: { sub: 'agent-support' },
    aud: 'payments',
    scope: 'refund:create',
    tenant: 'quillfeather',
    ceiling: 50_000,
    epoch: 0,
    op: 'wf-1:action:1',
    fence: 1,
    ...overrides,
  };
  return mintDelegatedToken(claims, secret);
}

/** A fresh idempotency key, unique per call. */
export function newKey(prefix = 'wf'): string {
  return `${prefix}-${randomBytes(6).toString('hex')}:action:1`;
}
