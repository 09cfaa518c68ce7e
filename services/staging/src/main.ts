import { closeServer, createLogger, installShutdown, listen } from '@gatehouse/platform';
import { loadDelegationJwks } from '@gatehouse/credentials';
import { createStagingApp } from './app.ts';
import { readTokenBindingSwitch } from './http/token-binding.ts';
import { openStagingDatabase } from './db/staging.database.ts';
import { loadStagingEnv } from './env.ts';
import { ensureStagingSchema } from './schema.ts';

/**
 * Process entry of the staging systems: env → pool → schema (idempotent) → HTTP on
 * `STAGING_PORT` on `GATEHOUSE_BIND_HOST` (loopback unless set, as every service; containers set
 * 0.0.0.0) → graceful shutdown (server first, then the pool).
 */
async function main(): Promise<void> {
  const log = createLogger('staging');
  const env = loadStagingEnv();
  const { db } = openStagingDatabase(env.DATABASE_URL, {
    onConnectionError: (err) => log.warn({ err: err.message }, 'database connection lost'),
  });
  try {
    await ensureStagingSchema(db);
  } catch (err) {
    await db.destroy();
    throw err;
  }
  const delegationKeys = loadDelegationJwks(env.GATEHOUSE_DELEGATION_JWKS_PATH);
  const tokenBindingDisabled = readTokenBindingSwitch(process.env);
  // The revocation epoch lives in the ledger's database; a separate pool when staging has its own.
  const epoch = env.GATEHOUSE_EPOCH_DATABASE_URL
    ? openStagingDatabase(env.GATEHOUSE_EPOCH_DATABASE_URL, { maxConnections: 4 }).db
    : undefined;
  const { app } = createStagingApp({ db, delegationKeys, epochDb: epoch, tokenBindingDisabled, log });
  const { server, port } = await listen(app, env.STAGING_PORT);
  installShutdown(log, [() => db.destroy(), async () => epoch?.destroy(), () => closeServer(server)]);
  log.info({ port }, 'staging systems listening');
}

main().catch((err: unknown) => {
  createLogger('staging').fatal({ err }, 'staging failed to start');
  process.exit(1);
});
