import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { createDb, isConnectionFault, type Db } from '../src/index.ts';
import { createTestDatabase, startHangableProxy as hangable, type HangableProxy, type TestDatabase } from '@gatehouse/test-harness';

// createPool/createDb's optional timeouts (the operator CLI passes them): a Postgres that accepts
// the connection and never answers (SIGSTOPped, wedged) fails the checkout or the statement in
// bounded time. Without them — the services' pools — the wait is as long as Postgres takes.

let t: TestDatabase;
const opened: Array<{ db?: Db; listener: HangableProxy }> = [];
beforeAll(async () => {
  t = await createTestDatabase({ migrate: false });
});
afterEach(async () => {
  for (const o of opened.splice(0)) {
    await o.listener.close();
    await o.db?.destroy().catch(() => undefined);
  }
});
afterAll(async () => {
  await t?.drop();
});

/** Milliseconds `p` takes to settle, and its rejection (undefined when it resolved). */
async function timed(p: Promise<unknown>): Promise<{ ms: number; err: unknown }> {
  const started = Date.now();
  const err = await p.then(
    () => undefined,
    (e: unknown) => e ?? new Error('rejected without a reason'),
  );
  return { ms: Date.now() - started, err };
}

describe('a Postgres that accepts and never answers', () => {
  it('connectTimeoutMs fails the first statement with a connection fault in bounded time', async () => {
    const listener = await hangable();
    const db = createDb(`postgres://postgres@127.0.0.1:${listener.port}/nothing`, 1, undefined, { connectTimeoutMs: 500 });
    opened.push({ db, listener });
    const r = await timed(sql`SELECT 1`.execute(db));
    expect(r.err).toBeInstanceOf(Error);
    expect(isConnectionFault(r.err), String(r.err)).toBe(true);
    expect(r.ms).toBeLessThan(3000);
  }, 30_000); // without the bound it would hang: fail fast instead

  it('without timeouts (the services) the statement keeps waiting', async () => {
    const listener = await hangable();
    const db = createDb(`postgres://postgres@127.0.0.1:${listener.port}/nothing`, 1);
    opened.push({ db, listener });
    let settled = false;
    const pending = sql`SELECT 1`.execute(db).finally(() => (settled = true));
    await new Promise((r) => setTimeout(r, 2000));
    expect(settled).toBe(false);
    await listener.close(); // the connection drops: now the statement fails
    expect(
      isConnectionFault(
        await pending.then(
          () => undefined,
          (e: unknown) => e,
        ),
      ),
    ).toBe(true);
  });

  it('queryTimeoutMs fails a statement that the server stopped answering after it connected', async () => {
    const u = new URL(t.url);
    const listener = await hangable({ host: u.hostname, port: Number(u.port || 5432) });
    u.host = `127.0.0.1:${listener.port}`;
    const db = createDb(u.toString(), 1, undefined, { connectTimeoutMs: 500, queryTimeoutMs: 800 });
    opened.push({ db, listener });
    expect((await sql<{ one: number }>`SELECT 1 AS one`.execute(db)).rows).toEqual([{ one: 1 }]);
    listener.hang();
    const r = await timed(sql`SELECT 1`.execute(db));
    expect(String(r.err)).toContain('Query read timeout');
    expect(r.ms).toBeLessThan(3000);
  }, 30_000); // without the bound it would hang: fail fast instead
});
