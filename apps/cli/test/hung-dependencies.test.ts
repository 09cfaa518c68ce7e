import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Redis } from 'ioredis';
import { sql } from 'kysely';
import { DependencyUnavailable } from '@gatehouse/ledger';
import pg from 'pg';
import { createDb, type Db } from '@gatehouse/ledger';
import { bumpEpoch, dropKeysUnder } from '@gatehouse/operations';
import {
  createTestDatabase,
  freePort,
  startHangableProxy,
  TEST_REDIS_URL,
  testQueuePrefix,
  type HangableProxy,
  type TestDatabase,
} from '@gatehouse/test-harness';
import { EXIT } from '../src/commands.ts';
import { runGatehouse, type GatehouseRun } from './support/gatehouse-process.ts';
import { CLIENT_BACKSTOP_MS, closeCliDb, withCliDb } from '../src/cli-db.ts';

// The CLI against a dependency that is down or hung (docs/decisions/0652-cli-dependency-timeouts.md):
// every command ends, exit 4, naming the dependency — never a silent wait. A hung Postgres is a
// TCP listener that accepts and never answers (what a SIGSTOPped server looks like to a client).

let t: TestDatabase;
let stateDir: string;
const listeners: HangableProxy[] = [];
beforeAll(async () => {
  t = await createTestDatabase();
  stateDir = mkdtempSync(resolve(tmpdir(), 'gh-cli-hung-'));
});
afterAll(async () => {
  for (const l of listeners) await l.close();
  await t?.drop();
  rmSync(stateDir, { recursive: true, force: true });
});

/** {@link startHangableProxy}, closed after the file's tests. */
async function hangable(target?: { host: string; port: number }): Promise<HangableProxy> {
  const l = await startHangableProxy(target);
  listeners.push(l);
  return l;
}

/** The CLI over this file's database, Redis and state, with no token; `env` overrides. */
const gatehouse = (args: string[], env: Record<string, string> = {}): Promise<GatehouseRun> =>
  runGatehouse(
    args,
    { DATABASE_URL: t.url, REDIS_URL: TEST_REDIS_URL, GATEHOUSE_STATE_DIR: stateDir, GATEHOUSE_TOKEN: '', ...env },
    60_000,
  );

describe('a hung Postgres', () => {
  it('audit verify ends with exit 4 naming Postgres within the default bound (10 s connect)', async () => {
    const hung = await hangable();
    const r = await gatehouse(['audit', 'verify'], { DATABASE_URL: `postgres://postgres@127.0.0.1:${hung.port}/gatehouse` });
    expect(r.code, r.stderr).toBe(EXIT.unavailable);
    expect(r.stderr).toContain(`Postgres (127.0.0.1:${hung.port}) is unreachable or not answering`);
    expect(r.stderr).toContain('no answer to the connection within 10000 ms, CLI_POSTGRES_CONNECT_TIMEOUT_MS');
    // 10 s of connect timeout plus the CLI's start-up (slow on a loaded machine); a hang is killed at 60 s.
    expect(r.ms).toBeLessThan(45_000);
  });

  it('CLI_POSTGRES_CONNECT_TIMEOUT_MS sets the bound: migrate (its admin connection) and an ops command end, exit 4', async () => {
    const hung = await hangable();
    const env = { DATABASE_URL: `postgres://postgres@127.0.0.1:${hung.port}/gatehouse`, CLI_POSTGRES_CONNECT_TIMEOUT_MS: '1000' };
    const token = (await gatehouse(['token', '--user', 'ops-gus'])).stdout.trim();
    const [migrate, epoch] = await Promise.all([
      gatehouse(['migrate'], env),
      gatehouse(['epoch', 'bump'], { ...env, GATEHOUSE_TOKEN: token }),
    ]);
    for (const r of [migrate, epoch]) {
      expect(r.code, r.stderr).toBe(EXIT.unavailable);
      expect(r.stderr).toContain(`Postgres (127.0.0.1:${hung.port})`);
      expect(r.stderr).toContain('no answer to the connection within 1000 ms');
      expect(r.ms).toBeLessThan(45_000);
    }
  });

  it('a statement Postgres stops answering after the connection: DependencyUnavailable(postgres) and the pool closes in bounded time', async () => {
    const u = new URL(t.url);
    const proxy = await hangable({ host: u.hostname, port: Number(u.port || 5432) });
    u.host = `127.0.0.1:${proxy.port}`;
    process.env.CLI_POSTGRES_QUERY_TIMEOUT_MS = '800';
    try {
      const started = Date.now();
      const err = await withCliDb(u.toString(), 1, async (db) => {
        await sql`SELECT 1`.execute(db);
        proxy.hang();
        await sql`SELECT 1`.execute(db);
      }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(DependencyUnavailable);
      expect((err as DependencyUnavailable).dependency).toBe('postgres');
      expect((err as Error).message).toContain(
        `Query read timeout; no answer to a statement within ${800 + CLIENT_BACKSTOP_MS} ms, CLI_POSTGRES_QUERY_TIMEOUT_MS (800 ms) + ${CLIENT_BACKSTOP_MS} ms`,
      );
      expect(Date.now() - started).toBeLessThan(5_000);
    } finally {
      delete process.env.CLI_POSTGRES_QUERY_TIMEOUT_MS;
    }
  }, 30_000); // without the bound it would hang: fail fast instead
});

describe('a CLI statement that waits on a lock a service holds (docs/decisions/0670-cli-statements-end-on-the-server.md)', () => {
  /** A session that holds `audit_outbox` exclusively, as a long transaction of a service would; `end` commits and closes it. */
  async function holdAuditOutbox(): Promise<{ end: () => Promise<void> }> {
    const c = new pg.Client({ connectionString: t.url });
    await c.connect();
    await c.query('BEGIN');
    await c.query('LOCK TABLE audit_outbox IN ACCESS EXCLUSIVE MODE');
    return {
      end: async () => {
        await c.query('COMMIT');
        await c.end();
      },
    };
  }

  /** Whether a fresh session can lock the epoch row at once (a waiting CLI transaction that bumped it still holds it). */
  async function epochRowFree(): Promise<boolean> {
    const c = new pg.Client({ connectionString: t.url });
    await c.connect();
    try {
      await c.query('BEGIN');
      // The bump locks the table first (ADR 0685); NOWAIT of a row lock does not cover the table's.
      await c.query('LOCK TABLE credential_epochs IN ROW SHARE MODE NOWAIT');
      await c.query('SELECT 1 FROM credential_epochs WHERE id = 1 FOR UPDATE NOWAIT');
      return true;
    } catch (err) {
      if ((err as { code?: string }).code === '55P03') return false; // lock_not_available
      throw err;
    } finally {
      await c.query('ROLLBACK').catch(() => undefined);
      await c.end();
    }
  }

  const bump = (db: Db): Promise<number> => bumpEpoch(db, 'ops-gus', 'k'.repeat(32));

  it('Postgres cancels it at CLI_POSTGRES_QUERY_TIMEOUT_MS: exit-4 error, its transaction rolled back and its locks freed at once', async () => {
    const before = await epochOf();
    const blocker = await holdAuditOutbox();
    process.env.CLI_POSTGRES_QUERY_TIMEOUT_MS = '800';
    try {
      const err = await withCliDb(t.url, 1, bump).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(DependencyUnavailable);
      expect((err as Error).message).toContain('did not finish a statement of this command within 800 ms, CLI_POSTGRES_QUERY_TIMEOUT_MS');
      expect((err as Error).message).toContain('rolled its transaction back');
      expect(await epochRowFree()).toBe(true); // the bump's row lock went with the cancel
    } finally {
      delete process.env.CLI_POSTGRES_QUERY_TIMEOUT_MS;
      await blocker.end();
    }
    expect(await epochOf()).toBe(before);
  }, 30_000);

  it('control: with the client-side bound alone (as before) the command gives up while its transaction keeps the row locked', async () => {
    const blocker = await holdAuditOutbox();
    const db = createDb(t.url, 1, undefined, { queryTimeoutMs: 800 });
    try {
      const err = await bump(db).catch((e: unknown) => e);
      expect((err as Error).message).toContain('Query read timeout');
      expect(await epochRowFree()).toBe(false); // the orphaned transaction still holds it: services' epoch writes would wait
    } finally {
      await blocker.end();
      await closeCliDb(db);
    }
  }, 30_000);
});

/** The credential epoch in the test database. */
async function epochOf(): Promise<number> {
  const c = new pg.Client({ connectionString: t.url });
  await c.connect();
  try {
    return Number((await c.query<{ epoch: number }>('SELECT epoch FROM credential_epochs WHERE id = 1')).rows[0]!.epoch);
  } finally {
    await c.end();
  }
}

describe('demo with a dependency down', () => {
  const demoEnv = { DEMO_DATABASE: 'gatehouse_demo_hung_test', DEMO_QUEUE_PREFIX: 'gh-demo-hung-test' };

  it('Redis unreachable: exit 4 naming Redis, after saying what it was doing (was: a silent hang)', async () => {
    const r = await gatehouse(['demo'], { ...demoEnv, REDIS_URL: `redis://127.0.0.1:${await freePort()}` });
    expect(r.code, r.stderr).toBe(EXIT.unavailable);
    expect(r.stdout).toContain('emptying the demo queues');
    expect(r.stderr).toMatch(/Redis \(127\.0\.0\.1:\d+\) is unreachable/);
    expect(r.ms).toBeLessThan(45_000); // a hang is killed at 60 s
  });

  it('Postgres hung: exit 4 naming Postgres, after saying it prepares the demo database', async () => {
    const hung = await hangable();
    const r = await gatehouse(['demo'], {
      ...demoEnv,
      DATABASE_URL: `postgres://postgres@127.0.0.1:${hung.port}/gatehouse`,
      CLI_POSTGRES_CONNECT_TIMEOUT_MS: '1000',
    });
    expect(r.code, r.stderr).toBe(EXIT.unavailable);
    expect(r.stdout).toContain(`preparing a fresh demo database (gatehouse_demo_hung_test on Postgres 127.0.0.1:${hung.port})`);
    expect(r.stderr).toContain(`Postgres (127.0.0.1:${hung.port}) is unreachable or not answering`);
    expect(r.stderr).toContain('no answer to the connection within 1000 ms');
    expect(r.ms).toBeLessThan(45_000); // a hang is killed at 60 s
  });
});

describe('dropKeysUnder (the demo empties its queue prefix)', () => {
  it('deletes every key under the prefix with SCAN, the prefix matched literally, and nothing else', async () => {
    const base = testQueuePrefix();
    const redis = new Redis(TEST_REDIS_URL);
    try {
      const prefix = `${base}[a]`; // glob characters: must not match `${base}a`
      const keys = Array.from({ length: 2500 }, (_, i) => `${prefix}:k${i}`);
      for (let i = 0; i < keys.length; i += 500) await redis.mset(...keys.slice(i, i + 500).flatMap((k) => [k, '1']));
      await redis.set(`${base}a:keep`, '1');
      await redis.set(`${base}[a]x:keep`, '1');
      expect(await dropKeysUnder(redis, prefix, 300)).toBe(2500);
      expect(await redis.exists(...keys.slice(0, 10))).toBe(0);
      expect(await redis.exists(`${base}a:keep`, `${base}[a]x:keep`)).toBe(2);
    } finally {
      await dropKeysUnder(redis, `${base}[a]`);
      await redis.del(`${base}a:keep`, `${base}[a]x:keep`);
      redis.disconnect();
    }
  });
});
