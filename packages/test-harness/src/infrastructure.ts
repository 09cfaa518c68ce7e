/**
 * Per-test-file infrastructure: a migrated database of its own, a queue prefix, free ports and
 * their clean-up (the shared test servers, or a private one from {@link startPrivatePostgres}).
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { Kysely, PostgresDialect } from 'kysely';
import { createDb, migrate, type Db } from '@gatehouse/ledger';

/** Base URL of the Postgres server tests use (`TEST_DATABASE_URL`'s server, default local). */
const SERVER = process.env.TEST_PG_SERVER ?? 'postgres://postgres@127.0.0.1:5432';
/** Redis URL tests use. */
export const TEST_REDIS_URL = process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';

/** A database of one test file: migrated, dropped by `drop()`. */
export interface TestDatabase {
  url: string;
  name: string;
  db: Db;
  drop: () => Promise<void>;
}

async function admin<T>(fn: (c: pg.Client) => Promise<T>, server = SERVER): Promise<T> {
  const c = new pg.Client({ connectionString: `${server}/postgres` });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

/**
 * Creates a fresh database `gh_test_<random>` and applies every migration (`migrate: false`
 * skips them). Never assumes a clean server: names are random and `drop()` removes it with
 * `WITH (FORCE)`. `server` (`postgres://user@host:port`, default the shared test server) selects
 * another cluster, e.g. a {@link startPrivatePostgres} one.
 */
export async function createTestDatabase(opts: { migrate?: boolean; server?: string } = {}): Promise<TestDatabase> {
  const server = opts.server ?? SERVER;
  const name = `gh_test_${randomBytes(6).toString('hex')}`;
  await admin((c) => c.query(`CREATE DATABASE ${name}`), server);
  const url = `${server}/${name}`;
  if (opts.migrate !== false) {
    const k = new Kysely<unknown>({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: url, max: 1 }) }) });
    await migrate(k);
    await k.destroy();
  }
  const db = createDb(url, 5);
  return {
    url,
    name,
    db,
    drop: async () => {
      await db.destroy();
      await admin((c) => c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`), server);
    },
  };
}

/** A BullMQ key prefix unique to one test file. */
export function testQueuePrefix(): string {
  return `ghtest-${randomBytes(5).toString('hex')}`;
}

/** Lowest and highest port handed to test services: below Linux's ephemeral range (32768+). */
const PORT_MIN = 15_000;
const PORT_MAX = 32_000;
/**
 * Slices of that range, one per vitest worker: maxWorkers is 2 here, and a run with up to 8
 * (`--maxWorkers 8` on a larger machine) still gives every worker its own 2,125 ports. Worker 9
 * would share worker 1's slice.
 */
const PORT_SLICES = 8;
const handedOut = new Set<number>();

/**
 * This process's part of the test port range, `[min, max)`. Each vitest worker (`VITEST_POOL_ID`,
 * 1-based) gets its own slice: a port checked free here stays unbound until its service starts,
 * seconds later, and a worker beside this one must not pick it meanwhile — the check cannot see
 * a port another process has chosen but not yet bound. Outside vitest: the whole range.
 */
export function testPortRange(poolId = process.env.VITEST_POOL_ID): { min: number; max: number } {
  const id = Number(poolId);
  if (!Number.isInteger(id) || id < 1) return { min: PORT_MIN, max: PORT_MAX };
  const width = Math.floor((PORT_MAX - PORT_MIN) / PORT_SLICES);
  const min = PORT_MIN + ((id - 1) % PORT_SLICES) * width;
  return { min, max: min + width };
}

async function canBind(port: number): Promise<boolean> {
  const { createServer } = await import('node:net');
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

/**
 * A port for a test service: random below the kernel's ephemeral range (so no outgoing
 * connection can take it between now and the service's bind), in this worker's slice of it
 * ({@link testPortRange}), checked free by binding it, and never handed out twice by this process.
 */
export async function freePort(): Promise<number> {
  const { min, max } = testPortRange();
  for (let i = 0; i < 200; i++) {
    const port = min + Math.floor(Math.random() * (max - min));
    if (handedOut.has(port) || !(await canBind(port))) continue;
    handedOut.add(port);
    return port;
  }
  throw new Error('no free port found for a test service');
}

/** Removes every Redis key under `prefix` (end of a test file). */
export async function dropQueuePrefix(redisUrl: string, prefix: string): Promise<void> {
  const { Redis } = await import('ioredis');
  const r = new Redis(redisUrl);
  try {
    let cursor = '0';
    do {
      const [next, keys] = await r.scan(cursor, 'MATCH', `${prefix}:*`, 'COUNT', 500);
      cursor = next;
      if (keys.length) await r.del(...keys);
    } while (cursor !== '0');
  } finally {
    r.disconnect();
  }
}

/** Drops the database `name` of the test server if it exists, closing its connections first. */
export async function dropDatabase(name: string): Promise<void> {
  await admin((c) => c.query(`DROP DATABASE IF EXISTS ${c.escapeIdentifier(name)} WITH (FORCE)`));
}
