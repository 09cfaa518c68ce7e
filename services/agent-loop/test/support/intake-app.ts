import type { Server } from 'node:http';
import { afterAll, beforeAll } from 'vitest';
import { loadReleaseManifest } from '@gatehouse/contracts';
import { registerRelease, type Db } from '@gatehouse/ledger';
import { closeServer, createLogger, listen, type OutboxRelay } from '@gatehouse/platform';
import { catalogDigest, toolsOfPack, type Pack } from '@gatehouse/tools';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { createIntakeApp, type PackSettings } from '../../src/index.ts';

/** The local user-token secret the intake app of {@link intakeFixture} verifies with. */
export const SECRET = 'local-auth-secret-change-me';

/** Pack settings of release rel-1 as the agent-loop computes them at boot. */
function rel1Packs(): Record<Pack, PackSettings> {
  const m = loadReleaseManifest('rel-1');
  const of = (pack: Pack): PackSettings => ({
    policyRevision: m.policy[pack],
    catalogDigest: catalogDigest(toolsOfPack(pack)),
    budgets: m.budgets[pack],
  });
  return { support: of('support'), change: of('change') };
}

/**
 * A test file's intake app (the agent-loop's HTTP API) over its own database, with release rel-1
 * registered, listening on an ephemeral loopback port: started before the file's tests, closed
 * and its database dropped after. Outbox rows are written, never published. `db()` and `url()`
 * are read inside tests (they exist once the file's `beforeAll` ran).
 */
export function intakeFixture(logName: string): { db: () => Db; url: () => string } {
  let t: TestDatabase;
  let server: Server | undefined;
  let url = '';
  beforeAll(async () => {
    t = await createTestDatabase();
    await registerRelease(t.db, 'rel-1', loadReleaseManifest('rel-1'));
    const app = createIntakeApp({
      db: t.db,
      relay: { publish: async () => undefined } as unknown as OutboxRelay,
      release: 'rel-1',
      auditHmacKey: 'local-audit-hmac-key-change-me',
      packs: rel1Packs,
      verifier: { secret: SECRET },
      log: createLogger(logName),
    });
    const l = await listen(app, 0, '127.0.0.1');
    server = l.server;
    url = `http://127.0.0.1:${l.port}`;
  });
  afterAll(async () => {
    if (server) await closeServer(server);
    await t?.drop();
  });
  return { db: () => t.db, url: () => url };
}
