import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DependencyUnavailable } from '@gatehouse/ledger';
import { CLI_REDIS_ANSWER_MS, withRedis } from '@gatehouse/operations';
import {
  createTestDatabase,
  freePort,
  startHangableProxy,
  TEST_REDIS_URL,
  type HangableProxy,
  type TestDatabase,
} from '@gatehouse/test-harness';
import { EXIT } from '../src/commands.ts';
import { runGatehouse, type GatehouseRun } from './support/gatehouse-process.ts';

// Exit 4, "a dependency is unreachable", names the dependency that failed — Postgres, Redis or
// the systems of record — with the server it tried and how to check it, and never another one
// (docs/decisions/0690). Each down (nothing listens) and hung (accepts, never answers).

let t: TestDatabase;
let stateDir: string;
let token: string;
const proxies: HangableProxy[] = [];
beforeAll(async () => {
  t = await createTestDatabase();
  stateDir = mkdtempSync(resolve(tmpdir(), 'gh-cli-deps-'));
  token = (await gatehouse(['token', '--user', 'ops-gus'])).stdout.trim();
});
afterAll(async () => {
  for (const p of proxies) await p.close();
  await t?.drop();
  rmSync(stateDir, { recursive: true, force: true });
});

/** The CLI over this file's database, Redis and state, as ops-gus once signed in; `env` overrides. */
const gatehouse = (args: string[], env: Record<string, string> = {}): Promise<GatehouseRun> =>
  runGatehouse(
    args,
    { DATABASE_URL: t.url, REDIS_URL: TEST_REDIS_URL, GATEHOUSE_STATE_DIR: stateDir, GATEHOUSE_TOKEN: token ?? '', ...env },
    50_000,
  );

async function hung(): Promise<number> {
  const p = await startHangableProxy();
  proxies.push(p);
  return p.port;
}

/** Asserts exit 4 naming `named` (and none of `others`) in one line of stderr. */
function expectUnavailable(r: GatehouseRun, named: RegExp, hint: string, others: RegExp[]): void {
  expect(r.code, `${r.stderr}\n(took ${r.ms} ms)`).toBe(EXIT.unavailable);
  expect(r.stderr).toMatch(named);
  expect(r.stderr).toContain(hint);
  for (const o of others) expect(r.stderr).not.toMatch(o);
}

const POSTGRES = /Postgres/;
const REDIS = /Redis/;
const SYSTEMS = /systems of record/;

describe('exit 4 names what failed, and how to check it', () => {
  it('Postgres down: epoch bump names Postgres, its host:port and pg_isready', async () => {
    const port = await freePort();
    const r = await gatehouse(['epoch', 'bump'], { DATABASE_URL: `postgres://postgres@127.0.0.1:${port}/gatehouse` });
    expectUnavailable(r, new RegExp(`Postgres \\(127\\.0\\.0\\.1:${port}\\) is unreachable`), `pg_isready -h 127.0.0.1 -p ${port}`, [
      REDIS,
      SYSTEMS,
    ]);
  });

  it('Redis down: queues drain names Redis, its host:port and redis-cli, not Postgres', async () => {
    const port = await freePort();
    const r = await gatehouse(['queues', 'drain', '--release', 'rel-1'], { REDIS_URL: `redis://127.0.0.1:${port}` });
    expectUnavailable(r, new RegExp(`Redis \\(127\\.0\\.0\\.1:${port}\\) is unreachable`), `redis-cli -h 127.0.0.1 -p ${port} ping`, [
      POSTGRES,
      SYSTEMS,
    ]);
  });

  it('Redis hung (accepts, never answers): queues drain ends within its bound naming Redis (was: waited for ever)', async () => {
    const port = await hung();
    const r = await gatehouse(['queues', 'drain', '--release', 'rel-1'], { REDIS_URL: `redis://127.0.0.1:${port}` });
    expectUnavailable(r, new RegExp(`Redis \\(127\\.0\\.0\\.1:${port}\\) is unreachable or not answering`), 'check REDIS_URL', [
      POSTGRES,
      SYSTEMS,
    ]);
    expect(r.ms).toBeLessThan(40_000); // the 10 s bound plus the CLI's start-up on a loaded machine
  });

  it('systems of record down: reconcile names them, STAGING_URL and curl, not Postgres (was: exit 1 "fetch failed")', async () => {
    const port = await freePort();
    const r = await gatehouse(['reconcile'], { STAGING_URL: `http://127.0.0.1:${port}` });
    expectUnavailable(
      r,
      new RegExp(`systems of record \\(127\\.0\\.0\\.1:${port}\\) could not be read`),
      `curl -s http://127.0.0.1:${port}/readyz`,
      [POSTGRES, REDIS],
    );
    expect(r.stderr).toContain('ECONNREFUSED');
  });

  it('systems of record hung: reconcile ends naming them', async () => {
    const port = await hung();
    const r = await gatehouse(['reconcile'], { STAGING_URL: `http://127.0.0.1:${port}` });
    expectUnavailable(r, new RegExp(`systems of record \\(127\\.0\\.0\\.1:${port}\\) could not be read`), 'check STAGING_URL', [
      POSTGRES,
      REDIS,
    ]);
  });
});

describe('withRedis: the bound on a Redis that stops answering', () => {
  /** What `withRedis` ends with, and after how long. */
  async function settle(work: Promise<unknown>): Promise<{ err: unknown; ms: number }> {
    const started = Date.now();
    const err = await work.then(
      () => undefined,
      (e: unknown) => e,
    );
    return { err, ms: Date.now() - started };
  }

  it('hung from the start: DependencyUnavailable(redis) once the handshake is past its bound', { timeout: 60_000 }, async () => {
    const port = await hung();
    const { err, ms } = await settle(withRedis(`redis://127.0.0.1:${port}`, (r) => r.ping()));
    expect(err).toBeInstanceOf(DependencyUnavailable);
    expect((err as DependencyUnavailable).dependency).toBe('redis');
    expect((err as Error).message).toContain(`timed out after ${CLI_REDIS_ANSWER_MS} ms`);
    expect(ms).toBeLessThan(CLI_REDIS_ANSWER_MS + 3000);
  });

  it('hung after it answered: the next command ends with DependencyUnavailable(redis) within the bound', { timeout: 60_000 }, async () => {
    const u = new URL(TEST_REDIS_URL);
    const proxy = await startHangableProxy({ host: u.hostname, port: Number(u.port || 6379) });
    proxies.push(proxy);
    const { err, ms } = await settle(
      withRedis(`redis://127.0.0.1:${proxy.port}`, async (r) => {
        expect(await r.ping()).toBe('PONG');
        proxy.hang();
        return r.ping();
      }),
    );
    expect(err).toBeInstanceOf(DependencyUnavailable);
    expect((err as Error).message).toContain('Command timed out');
    expect(ms).toBeLessThan(CLI_REDIS_ANSWER_MS + 3000);
  });
});
