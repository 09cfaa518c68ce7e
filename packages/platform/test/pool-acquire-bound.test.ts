import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { isConnectionFault } from '@gatehouse/ledger';
import type { ServiceContext } from '../src/service-context.ts';
import { probeContext, type ProbeContext } from './support/probe-context.ts';

// A transaction that, while it holds one of the pool's connections, waits for a second one from
// the same pool (a read through the pool instead of the transaction: ADR 0786) deadlocks once as
// many of them run as the pool has connections: each holds one and waits for one that never
// frees. node-postgres frees a checked-out slot only on release, so Postgres ending the idle
// sessions (ADR 0748) does not help: the service hangs for good. The services' pools now bound the
// wait for a connection (POSTGRES_POOL_ACQUIRE_TIMEOUT_MS, ADR 0787): the waiting checkout fails
// with a connection fault, each transaction rolls back, and the pool serves again.

const POOL = 10; // createServiceContext's pool size
const BOUND_MS = 1000;
/** Longer than this and the nested checkouts hang: the bound is 1 s. */
const HANG_MS = 8000;
let probe: ProbeContext;
let ctx: ServiceContext<unknown>;

beforeAll(async () => {
  probe = await probeContext('pool-acquire-probe', { env: { POSTGRES_POOL_ACQUIRE_TIMEOUT_MS: String(BOUND_MS) } });
  ctx = probe.ctx;
});
// Bounded: without the bound the hung transactions never release their connections.
afterAll(() => probe?.close(5000));

describe('transactions that each wait for a second connection of a full pool', () => {
  it('fail with a connection fault within the bound, roll back, and the pool serves again', async () => {
    await sql`CREATE TABLE IF NOT EXISTS pool_probe (n int)`.execute(ctx.db);
    let arrived = 0;
    let allHolding!: () => void;
    const barrier = new Promise<void>((done) => (allHolding = done));
    const t0 = Date.now();
    const outcomes = Array.from({ length: POOL }, (_, n) =>
      ctx.db
        .transaction()
        .execute(async (trx) => {
          await sql`INSERT INTO pool_probe VALUES (${n})`.execute(trx);
          if (++arrived === POOL) allHolding();
          await barrier; // every connection of the pool is now held by one of these transactions
          await sql`SELECT 1`.execute(ctx.db); // the mistake: the pool, not trx
        })
        .then(
          () => 'committed',
          (err: unknown) => (isConnectionFault(err) ? 'connection fault' : `other: ${(err as Error).message}`),
        ),
    );
    const hung = new Promise<string[]>((done) => setTimeout(() => done(['hung']), HANG_MS).unref());
    expect(await Promise.race([Promise.all(outcomes), hung])).toEqual(Array(POOL).fill('connection fault'));
    expect(Date.now() - t0).toBeLessThan(HANG_MS);
    // Rolled back, and the pool's connections are free again.
    const rows = await sql<{ count: string }>`SELECT count(*) FROM pool_probe`.execute(ctx.db);
    expect(rows.rows[0]?.count).toBe('0');
  }, 30_000);
});
