import { randomBytes } from 'node:crypto';
import type { Server } from 'node:http';
import pg from 'pg';
import { sql } from 'kysely';
import { closeServer, createLogger, listen } from '@gatehouse/platform';
import { mintDelegatedToken, newDelegationKeyPair, type DelegationGrant, type DelegationSigningKey } from '@gatehouse/credentials';
import { createStagingApp } from '../../src/app.ts';
import { openStagingDatabase, type StagingDb } from '../../src/db/staging.database.ts';
import type { FaultBoard } from '../../src/faults/fault-board.service.ts';
import { ensureStagingSchema } from '../../src/schema.ts';

/** The test "executor's" key pair: it mints with the private key, the staging app verifies with the JWKS. */
const KEYS = await newDelegationKeyPair();

const ADMIN_URL = process.env.STAGING_TEST_ADMIN_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';

/** A running staging app over its own throw-away database. */
export interface StagingHarness {
  db: StagingDb;
  faults: FaultBoard;
  server: Server;
  /** `http://127.0.0.1:<port>` of the real server. */
  baseUrl: string;
  /** Connection string of the staging database. */
  url: string;
  /** Database holding the revocation epoch: `db` unless started with `epochDatabase: 'separate'`. */
  epochDb: StagingDb;
  /** Connection string of {@link epochDb}. */
  epochUrl: string;
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

/**
 * Creates database `staging_test_<random>`, the schema, the revocation epoch (0, in
 * `public.credential_epochs`: staging fails closed without one), and a listening staging app.
 * `tokenBinding: false` switches off the request binding of tokens (op, target digest, fence,
 * single-use jti) for files testing the systems' own semantics with reusable tokens; the binding
 * itself is tested in `test/credentials/delegated-tokens.test.ts`. `epochDatabase: 'separate'`
 * keeps the epoch in a second database, as `GATEHOUSE_EPOCH_DATABASE_URL` does (default: the
 * staging database). `maxConnections` sizes the staging database's pool (default 30).
 */
export async function startStaging(
  opts: { tokenBinding?: boolean; epochDatabase?: 'same' | 'separate'; maxConnections?: number } = {},
): Promise<StagingHarness> {
  const name = `staging_test_${randomBytes(6).toString('hex')}`;
  const epochName = opts.epochDatabase === 'separate' ? `${name}_epoch` : name;
  await admin((c) => c.query(`CREATE DATABASE ${name}`));
  if (epochName !== name) await admin((c) => c.query(`CREATE DATABASE ${epochName}`));
  const urlOf = (db: string): string => Object.assign(new URL(ADMIN_URL), { pathname: `/${db}` }).toString();
  const { db } = openStagingDatabase(urlOf(name), { maxConnections: opts.maxConnections ?? 30 });
  const epochDb = epochName === name ? db : openStagingDatabase(urlOf(epochName), { maxConnections: 8 }).db;
  await ensureStagingSchema(db);
  const log = createLogger('staging-test');
  log.level = 'silent';
  const { app, faults } = createStagingApp({
    db,
    delegationJwks: KEYS.jwks,
    epochDb,
    tokenBindingDisabled: opts.tokenBinding === false,
    log,
  });
  const { server, port } = await listen(app, 0);
  await setEpochOf(epochDb, 0);
  return {
    db,
    faults,
    server,
    baseUrl: `http://127.0.0.1:${port}`,
    url: urlOf(name),
    epochDb,
    epochUrl: urlOf(epochName),
    setEpoch: (epoch) => setEpochOf(epochDb, epoch),
    async stop() {
      server.closeAllConnections();
      await closeServer(server);
      await db.destroy();
      if (epochDb !== db) await epochDb.destroy();
      for (const n of new Set([name, epochName])) await admin((c) => c.query(`DROP DATABASE IF EXISTS ${n} WITH (FORCE)`));
    },
  };
}

async function setEpochOf(db: StagingDb, epoch: number): Promise<void> {
  await sql`CREATE TABLE IF NOT EXISTS public.credential_epochs (id int PRIMARY KEY, epoch int NOT NULL)`.execute(db);
  await sql`INSERT INTO public.credential_epochs (id, epoch) VALUES (1, ${epoch})
    ON CONFLICT (id) DO UPDATE SET epoch = EXCLUDED.epoch`.execute(db);
}

/** A key pair staging does not know (a token it signs must be refused). */
export async function strangerKey(): Promise<DelegationSigningKey> {
  return (await newDelegationKeyPair()).signing;
}

/**
 * Mints a delegated token as the executor would: rep-ana of quillfeather acting through the
 * agent, ceiling 50000 cents, epoch 0, for the payments ledger unless overridden (target `{}`
 * unless given: only a harness with the binding switched off accepts it for a real request).
 */
export async function token(overrides: Partial<DelegationGrant> = {}, signing: DelegationSigningKey = KEYS.signing): Promise<string> {
  const claims: DelegationGrant = {
    sub: 'rep-ana',
    act: { sub: 'agent-support' },
    aud: 'payments',
    scope: 'refund:create',
    tenant: 'quillfeather',
    ceiling: 50_000,
    epoch: 0,
    op: 'wf-1:action:1',
    fence: 1,
    target: {},
    ...overrides,
  };
  return mintDelegatedToken(claims, signing);
}

/** A fresh idempotency key, unique per call. */
export function newKey(prefix = 'wf'): string {
  return `${prefix}-${randomBytes(6).toString('hex')}:action:1`;
}
