import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { sql } from 'kysely';
import { repoRoot } from '@gatehouse/contracts';
import { createDb } from '@gatehouse/ledger';
import { newDelegationKeyPair } from '@gatehouse/credentials';
import { freePort, startPrivatePostgres, type PrivatePostgres } from '@gatehouse/test-harness';

// The staging systems of record started while their Postgres is down wait for it, as every
// Gatehouse service does (docs/decisions/0653, 0690): the process stays up and is not ready,
// then creates its schema once Postgres answers, becomes ready and serves. It used to exit 1.

let pg0: PrivatePostgres;
let dir: string;
let child: ChildProcess | undefined;
let logs = '';
let exit: { code: number | null; signal: string | null } | undefined;

beforeAll(async () => {
  pg0 = await startPrivatePostgres();
  const admin = createDb(`${pg0.url}/postgres`, 1);
  await sql`CREATE DATABASE staging_boot`.execute(admin);
  await admin.destroy();
  dir = mkdtempSync(resolve(tmpdir(), 'gh-staging-boot-'));
  writeFileSync(resolve(dir, 'jwks.json'), JSON.stringify((await newDelegationKeyPair()).jwks));
}, 120_000);
afterAll(async () => {
  if (child && !exit) {
    child.kill('SIGKILL');
    await new Promise((done) => child!.once('exit', done));
  }
  await pg0?.destroy();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const get = (url: string) =>
  fetch(url, { signal: AbortSignal.timeout(3000) }).then(
    async (r) => ({ status: r.status, body: (await r.json()) as Record<string, unknown> }),
    () => null,
  );

describe('staging started while its Postgres is down', () => {
  it('stays up and not ready, then is ready and serves once Postgres is back', { timeout: 180_000 }, async () => {
    await pg0.stop();
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    child = spawn(process.execPath, [resolve(repoRoot, 'synthetic/staging/src/main.ts')], {
      cwd: repoRoot,
      env: {
        ...process.env,
        GATEHOUSE_ENV: 'test',
        LOG_LEVEL: 'info',
        DATABASE_URL: `${pg0.url}/staging_boot`,
        STAGING_PORT: String(port),
        GATEHOUSE_DELEGATION_JWKS_PATH: resolve(dir, 'jwks.json'),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stdout!.on('data', (d: Buffer) => (logs += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (logs += d.toString()));
    child.once('exit', (code, signal) => (exit = { code, signal }));

    // It reaches its schema step and waits there (or, on the old code, exits 1).
    await vi.waitFor(() => expect(exit !== undefined || /"msg":"boot step waits for a dependency"/.test(logs), logs).toBe(true), {
      timeout: 60_000,
      interval: 200,
    });
    expect(exit, logs).toBeUndefined();
    // Several tries later it is still up, and not ready (it has no schema to serve from).
    await sleep(3000);
    expect(exit, logs).toBeUndefined();
    expect((await get(`${url}/readyz`))?.status ?? 0).not.toBe(200);

    await pg0.start();
    let ready: Awaited<ReturnType<typeof get>> = null;
    for (const until = Date.now() + 60_000; ready?.status !== 200 && Date.now() < until;) {
      ready = await get(`${url}/readyz`);
      if (ready?.status !== 200) await sleep(250);
    }
    expect(ready?.status, logs).toBe(200);
    expect(exit, logs).toBeUndefined();
    // It serves from its schema: the request log answers (empty), and the world's orders were seeded.
    expect(await get(`${url}/requests`)).toEqual({ status: 200, body: { requests: [] } });
    const db = createDb(`${pg0.url}/staging_boot`, 1);
    try {
      const { rows } = await sql<{ n: string }>`SELECT count(*) AS n FROM staging.orders`.execute(db);
      expect(Number(rows[0]!.n)).toBeGreaterThan(0);
    } finally {
      await db.destroy();
    }
    expect(logs).toMatch(/"msg":"boot step done after the outage"/);
  });
});
