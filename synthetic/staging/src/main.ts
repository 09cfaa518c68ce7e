import { bootStep, closeServer, createLogger, installShutdown, listen } from '@gatehouse/platform';
import { readDelegationJwks } from '@gatehouse/credentials';
import { startTelemetry } from '@gatehouse/telemetry';
import { createStagingApp } from './app.ts';
import { readTokenBindingSwitch } from './http/token-binding.ts';
import { openStagingDatabase } from './db/staging.database.ts';
import { loadStagingEnv } from './env.ts';
import { ensureStagingSchema } from './schema.ts';

/**
 * Process entry of the staging systems: env → pool → schema (idempotent; a Postgres down or
 * unreachable at start is waited for through `bootStep`, docs/decisions/0690) → HTTP on
 * `STAGING_PORT` on `GATEHOUSE_BIND_HOST` (loopback unless set, as every service; containers set
 * 0.0.0.0) → graceful shutdown (server first, then the pool). Telemetry as every service: its
 * server spans continue the caller's trace from the `traceparent` header (ADR 0260).
 */
async function main(): Promise<void> {
  const telemetry = startTelemetry('staging', process.env.GATEHOUSE_RELEASE ?? 'rel-1');
  const log = createLogger('staging');
  const env = loadStagingEnv();
  const { db } = openStagingDatabase(env.DATABASE_URL, {
    onConnectionError: (err) => log.warn({ err: err.message }, 'database connection lost'),
  });
  try {
    // Started during a Postgres outage, it waits for it here (not listening) rather than exit,
    // as every Gatehouse service does at its boot steps (ADR 0653, 0690).
    await bootStep(log, 'create the staging schema', () => ensureStagingSchema(db));
  } catch (err) {
    await db.destroy();
    throw err;
  }
  const delegationJwks = readDelegationJwks(env.GATEHOUSE_DELEGATION_JWKS_PATH);
  const tokenBindingDisabled = readTokenBindingSwitch(process.env);
  // The revocation epoch lives in the ledger's database; a separate pool when staging has its own.
  const epoch = env.GATEHOUSE_EPOCH_DATABASE_URL
    ? openStagingDatabase(env.GATEHOUSE_EPOCH_DATABASE_URL, { maxConnections: 4 }).db
    : undefined;
  const { app } = createStagingApp({ db, delegationJwks, epochDb: epoch, tokenBindingDisabled, log });
  const { server, port } = await listen(app, env.STAGING_PORT);
  // Closers run last first: telemetry flushes after the server and pools are closed.
  installShutdown(log, [() => telemetry.shutdown(), () => db.destroy(), async () => epoch?.destroy(), () => closeServer(server)]);
  log.info({ port }, 'staging systems listening');
}

main().catch((err: unknown) => {
  createLogger('staging').fatal({ err }, 'staging failed to start');
  process.exit(1);
});
