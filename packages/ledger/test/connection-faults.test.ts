import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { createDb, isConnectionFault, type Db } from '../src/index.ts';
import { createTestDatabase, startPrivatePostgres, type PrivatePostgres, type TestDatabase } from '@gatehouse/test-harness';
import { resetTestFaultsForTests } from '@gatehouse/contracts';

// Postgres restarts and terminated backends under clients of createDb: node-postgres drops the
// pool's error listener while a client is checked out, so without createDb's own listener the
// process dies of an unhandled `error` event. With it, the running statement or transaction
// fails with a connection fault (retryable) and the next query works.

let pg: PrivatePostgres;
let t: TestDatabase;
beforeAll(async () => {
  pg = await startPrivatePostgres();
  t = await createTestDatabase({ server: pg.url, migrate: false });
});
afterAll(async () => {
  await t?.db.destroy();
  await pg?.destroy();
});

const FIXTURE = fileURLToPath(new URL('./fixtures/hold-client.ts', import.meta.url));

interface Outcome {
  code: number | null;
  reports: Array<Record<string, unknown>>;
  stderr: string;
}

/** Runs the fixture in `mode`, restarts Postgres (fast) once it holds its client, and collects what it says. */
async function restartUnder(mode: 'idle' | 'active', env: Record<string, string> = {}): Promise<Outcome> {
  const child: ChildProcess = spawn(process.execPath, [FIXTURE, mode], {
    env: { ...process.env, DATABASE_URL: t.url, GATEHOUSE_ENV: 'test', ...env },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const reports: Array<Record<string, unknown>> = [];
  const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
  for await (const line of createInterface({ input: child.stdout! })) {
    const report = JSON.parse(line) as Record<string, unknown>;
    reports.push(report);
    if (report.held) {
      await pg.restart({ mode: 'fast' });
      child.stdin!.write('go\n');
    }
  }
  return { code: await exited, reports, stderr };
}

describe('a checked-out client survives a Postgres restart', () => {
  for (const mode of ['idle', 'active'] as const) {
    it(`${mode === 'idle' ? 'an open transaction between statements' : 'a running statement'}: fails retryably, the process lives, the next query works`, async () => {
      const out = await restartUnder(mode);
      expect(out.stderr).not.toContain("Unhandled 'error' event");
      expect(out.code).toBe(0);
      const tx = out.reports.find((r) => 'txError' in r);
      expect(tx?.txError).toEqual(expect.any(String));
      expect(tx?.fault).toBe(true);
      expect(out.reports.at(-1)).toEqual({ nextQuery: 'ok' });
    });
  }

  it('control removed (GATEHOUSE_TEST_DISABLE_PG_ERROR_HANDLING=1): the same restart kills the process', async () => {
    const out = await restartUnder('idle', { GATEHOUSE_TEST_DISABLE_PG_ERROR_HANDLING: '1' });
    expect(out.code).not.toBe(0);
    expect(out.stderr).toContain("Unhandled 'error' event");
    expect(out.reports.some((r) => 'nextQuery' in r)).toBe(false);
  });

  it('the switch is refused outside GATEHOUSE_ENV=test', () => {
    const saved = { ...process.env };
    process.env.GATEHOUSE_TEST_DISABLE_PG_ERROR_HANDLING = '1';
    process.env.GATEHOUSE_ENV = 'production';
    resetTestFaultsForTests();
    try {
      expect(() => createDb(t.url)).toThrow(/only be set with GATEHOUSE_ENV=test/);
    } finally {
      process.env.GATEHOUSE_TEST_DISABLE_PG_ERROR_HANDLING = saved.GATEHOUSE_TEST_DISABLE_PG_ERROR_HANDLING;
      process.env.GATEHOUSE_ENV = saved.GATEHOUSE_ENV;
      if (saved.GATEHOUSE_TEST_DISABLE_PG_ERROR_HANDLING === undefined) delete process.env.GATEHOUSE_TEST_DISABLE_PG_ERROR_HANDLING;
      if (saved.GATEHOUSE_ENV === undefined) delete process.env.GATEHOUSE_ENV;
      resetTestFaultsForTests();
    }
  });
});

/** Transactions that hold their client across an await, then write: the shape services use. */
async function oneTransaction(db: Db, i: number): Promise<void> {
  await db.transaction().execute(async (trx) => {
    await sql`SELECT pg_sleep(0.02)`.execute(trx);
    await new Promise((r) => setTimeout(r, 10));
    await sql`INSERT INTO wave_probe (n) VALUES (${i})`.execute(trx);
  });
}

describe('backend-termination waves on the pool', () => {
  it('every failure is a connection fault, nothing is unhandled, and the pool serves again afterwards', async () => {
    const db = createDb(t.url, 5);
    await sql`CREATE TABLE IF NOT EXISTS wave_probe (n int)`.execute(db);
    const uncaught: unknown[] = [];
    const onUncaught = (err: unknown): void => void uncaught.push(err);
    process.on('uncaughtException', onUncaught);
    const failures: unknown[] = [];
    let done = 0;
    let stop = false;
    const load = Array.from({ length: 8 }, async (_, w) => {
      for (let i = 0; !stop; i++) {
        await oneTransaction(db, w * 100_000 + i).then(
          () => void done++,
          (err: unknown) => void failures.push(err),
        );
      }
    });
    try {
      let terminated = 0;
      for (let wave = 0; wave < 10; wave++) {
        const before = done + failures.length;
        // Wait until the load has moved on since the last wave (no timing: a condition).
        for (let d = Date.now() + 30_000; done + failures.length < before + 5 && Date.now() < d;)
          await new Promise((r) => setTimeout(r, 20));
        terminated += await pg.terminateBackends({ database: t.name });
      }
      stop = true;
      await Promise.all(load);
      expect(terminated).toBeGreaterThan(0);
      expect(failures.length).toBeGreaterThan(0);
      expect(failures.filter((e) => !isConnectionFault(e)).map((e) => (e as Error).message)).toEqual([]);
      expect(uncaught).toEqual([]);
      await oneTransaction(db, -1);
      const r = await sql<{ n: number }>`SELECT count(*)::int AS n FROM wave_probe WHERE n = -1`.execute(db);
      expect(r.rows[0]?.n).toBe(1);
    } finally {
      stop = true;
      process.off('uncaughtException', onUncaught);
      await db.destroy();
    }
  });
});
