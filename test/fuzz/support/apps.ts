import { Writable } from 'node:stream';
import type { Server } from 'node:http';
import { Redis } from 'ioredis';
import type { Express } from 'express';
import { loadReleaseManifest } from '@gatehouse/contracts';
import { registerRelease } from '@gatehouse/ledger';
import { closeServer, createLogger, listen, OutboxRelay, QueueRegistry, type Logger } from '@gatehouse/platform';
import { catalogDigest, toolsOfPack, type Pack } from '@gatehouse/tools';
import { createTestDatabase, dropQueuePrefix, testQueuePrefix, TEST_REDIS_URL, type TestDatabase } from '@gatehouse/test-harness';
import { createIntakeApp, WorkflowEventHub, type PackSettings } from '@gatehouse/agent-loop';
import { createApprovalApp } from '@gatehouse/approval';
import { createOpsApp, createQueueBoard } from '@gatehouse/ops';

/** The local HS256 secret the in-process apps verify tokens with (the repository's local default). */
export const SECRET = 'local-auth-secret-change-me';
const AUDIT_KEY = 'fuzz-audit-hmac-key-0123456789abcdef';

/** The three public HTTP surfaces fuzzed in-process. */
export type Surface = 'agent-loop' | 'approval' | 'ops';

/** One service app listening on an ephemeral port, with every log line it wrote. */
export interface RunningApp {
  url: string;
  /** The express app itself (its registered routes are compared with its OpenAPI document). */
  app: Express;
  /** Parsed pino lines written by the app's logger since start. */
  logs: Array<Record<string, unknown>>;
}

/** The apps of one test file over their own database and queue prefix. */
export interface FuzzApps {
  db: TestDatabase;
  apps: Record<Surface, RunningApp>;
  close: () => Promise<void>;
}

/** A pino logger whose lines land in `sink` (so a test can look for `unhandled error`). */
function capturingLogger(service: string, sink: Array<Record<string, unknown>>): Logger {
  const stream = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString('utf8').split('\n')) if (line.trim()) sink.push(JSON.parse(line) as Record<string, unknown>);
      done();
    },
  });
  return createLogger(service, stream);
}

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
 * Builds the intake (agent-loop), approval and ops apps exactly as their processes do, over a
 * fresh test database and a test queue prefix on the shared Redis, each listening on an
 * ephemeral loopback port with a capturing logger. `close()` stops them and drops both.
 * `secureCookie` marks the inbox's and the dashboard's session cookies `Secure`, as production does.
 */
export async function startFuzzApps(opts: { secureCookie?: boolean } = {}): Promise<FuzzApps> {
  const secureCookie = opts.secureCookie ?? false;
  const db = await createTestDatabase();
  const prefix = testQueuePrefix();
  const redis = new Redis(TEST_REDIS_URL, { maxRetriesPerRequest: null });
  const queues = new QueueRegistry(redis, prefix);
  await registerRelease(db.db, 'rel-1', loadReleaseManifest('rel-1'));
  const servers: Server[] = [];
  const verifier = { secret: SECRET };
  const common = { db: db.db, auditHmacKey: AUDIT_KEY, verifier };
  const start = async (service: Surface, build: (log: Logger) => Express): Promise<RunningApp> => {
    const logs: Array<Record<string, unknown>> = [];
    const app = build(capturingLogger(service, logs));
    const { server, port } = await listen(app, 0, '127.0.0.1');
    servers.push(server);
    return { url: `http://127.0.0.1:${port}`, app, logs };
  };
  const relayOf = (log: Logger) => new OutboxRelay(db.db, queues, log);
  const board = createQueueBoard({ db: db.db, redis, queues });
  await board.refresh();
  const apps: Record<Surface, RunningApp> = {
    'agent-loop': await start('agent-loop', (log) =>
      // The event stream route is served (its hub is not started: streams fall back to the ledger poll).
      createIntakeApp({
        ...common,
        relay: relayOf(log),
        release: 'rel-1',
        packs: rel1Packs,
        log,
        events: { hub: new WorkflowEventHub(db.url, log), pollMs: 1000, heartbeatMs: 15_000 },
      }),
    ),
    approval: await start('approval', (log) =>
      createApprovalApp({ ...common, relay: relayOf(log), localSecret: SECRET, secureCookie, log }),
    ),
    ops: await start('ops', (log) => createOpsApp({ ...common, log, board, localSecret: SECRET, secureCookie })),
  };
  return {
    db,
    apps,
    close: async () => {
      await Promise.all(servers.map((s) => closeServer(s)));
      await queues.close();
      redis.disconnect();
      await dropQueuePrefix(TEST_REDIS_URL, prefix);
      await db.drop();
    },
  };
}
