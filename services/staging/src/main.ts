import { closeServer, createLogger, installShutdown, listen } from '@gatehouse/platform';
import { createStagingApp } from './app.ts';
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
  const { app } = createStagingApp({ db, delegationSecret: env.GATEHOUSE_DELEGATION_SECRET, log });
  const { server, port } = await listen(app, env.STAGING_PORT);
  installShutdown(log, [() => db.destroy(), () => closeServer(server)]);
  log.info({ port }, 'staging systems listening');
}

main().catch((err: unknown) => {
  createLogger('staging').fatal({ err }, 'staging failed to start');
  process.exit(1);
});
