import { afterAll, beforeAll } from 'vitest';
import { Redis } from 'ioredis';
import type { Db } from '@gatehouse/ledger';
import { activateRelease } from '@gatehouse/operations';
import { QueueRegistry } from '@gatehouse/platform';
import { createTestDatabase, dropQueuePrefix, testQueuePrefix, TEST_REDIS_URL, type TestDatabase } from '@gatehouse/test-harness';
import { tokenFor } from '@gatehouse/cli';
import { useReleaseDirs, type ReleaseDirs } from './release-dirs.ts';

/** What a release operations test file works on, see {@link useReleaseSuite}. Set in its `beforeAll`. */
export interface ReleaseSuite {
  /** The file's own migrated test database. */
  db: Db;
  /** That database's URL (for the CLI run as a process). */
  url: string;
  /** The file's own BullMQ key prefix. */
  prefix: string;
  /** Queues under `prefix`, on one Redis connection. */
  queues: QueueRegistry;
  /** The file's own releases and policy folders ({@link useReleaseDirs}), with no release written yet. */
  dirs: ReleaseDirs;
}

/**
 * Registers the `beforeAll` and `afterAll` of a test file that activates, rolls back, drains and
 * requeues releases: a fresh test database, a BullMQ queue prefix with a Redis connection and
 * its queue registry, and the file's own releases and policy folders. `afterAll` puts the
 * folders back, closes the queues and the connection, drops the prefix's keys and the database.
 * The returned object is filled when the `beforeAll` has run; the file's own `beforeAll`, if
 * registered after this call, runs after it (writes its releases, activates them).
 */
export function useReleaseSuite(): ReleaseSuite {
  const suite = {} as ReleaseSuite;
  let t: TestDatabase | undefined;
  let redis: Redis | undefined;
  beforeAll(async () => {
    t = await createTestDatabase();
    suite.db = t.db;
    suite.url = t.url;
    suite.prefix = testQueuePrefix();
    redis = new Redis(TEST_REDIS_URL, { maxRetriesPerRequest: null });
    suite.queues = new QueueRegistry(redis, suite.prefix);
    suite.dirs = useReleaseDirs();
  });
  afterAll(async () => {
    suite.dirs?.restore();
    await suite.queues?.close();
    redis?.disconnect();
    if (suite.prefix) await dropQueuePrefix(TEST_REDIS_URL, suite.prefix);
    await t?.drop();
  });
  return suite;
}

/** The operator the release suites act as, with the audit HMAC key their commands take. */
export const RELEASE_OPERATOR = { operator: 'ops-gus', hmacKey: 'test-audit-hmac-key-0123456789' };

/** The local HS256 secret the suites' operator tokens are signed with (the CLI's local mode). */
const LOCAL_AUTH_SECRET = 'local-auth-secret-change-me';

/**
 * The environment of the `gatehouse` CLI run as a process over the suite: its database, queue
 * prefix, releases and policy folders, the operator's audit key and token ({@link RELEASE_OPERATOR}),
 * and no reachable systems of record (release commands read none).
 */
export async function releaseCliEnv(t: ReleaseSuite): Promise<Record<string, string>> {
  return {
    DATABASE_URL: t.url,
    REDIS_URL: TEST_REDIS_URL,
    QUEUE_PREFIX: t.prefix,
    GATEHOUSE_AUDIT_HMAC_KEY: RELEASE_OPERATOR.hmacKey,
    STAGING_URL: 'http://127.0.0.1:9',
    GATEHOUSE_TOKEN: await tokenFor(RELEASE_OPERATOR.operator, LOCAL_AUTH_SECRET),
    RELEASES_DIR: t.dirs.releasesDir,
    POLICY_DIR: t.dirs.policyDir,
  };
}

/**
 * The three releases the canary suites play with, written to the suite's folders: rel-1 activated
 * for everyone (writes on), rel-2 and rel-9 written but not registered (the candidates to open).
 * `descriptions` sets rel-2's and rel-9's manifest descriptions (the test's story for them).
 */
export async function threeReleases(t: ReleaseSuite, descriptions: { rel2: string; rel9: string }): Promise<void> {
  t.dirs.writeRelease('rel-1');
  t.dirs.writeRelease('rel-2', (m) => (m.description = descriptions.rel2));
  t.dirs.writeRelease('rel-9', (m) => (m.description = descriptions.rel9));
  await activateRelease(t.db, 'rel-1', RELEASE_OPERATOR);
}

/** The suite's release rows, id order: what a refused command must leave as it was. */
export function releaseRows(db: Db) {
  return db.selectFrom('releases').select(['id', 'status', 'writes_enabled', 'cohort', 'draining']).orderBy('id').execute();
}

/** How many audit events the suite's ledger holds in its outbox (a refusal adds none). */
export async function auditCount(db: Db): Promise<number> {
  return (await db.selectFrom('audit_outbox').select('id').execute()).length;
}
