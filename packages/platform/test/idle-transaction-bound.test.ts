import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import type { TestDatabase } from '@gatehouse/test-harness';
import type { ServiceContext } from '../src/service-context.ts';
import { probeContext, type ProbeContext } from './support/probe-context.ts';

// A replica stopped inside a transaction (SIGSTOP, a frozen VM) kept its locks for as long as it
// was stopped: an on-call helper SIGSTOPped one audit replica of two while it held the chain lock,
// and the other replica waited on `pg_advisory_xact_lock` with the whole chain frozen behind it,
// while `stack status` showed that replica ready (the supervisor does not kill a ready process
// that hangs, ADR 0739). A service's session idle in a transaction is now ended by Postgres after
// POSTGRES_IDLE_IN_TRANSACTION_TIMEOUT_MS, so the peer gets the lock (ADR 0748). Here the stopped
// replica is a transaction of the service's pool whose process does nothing more: to Postgres, the
// same thing as a SIGSTOPped process.

const LOCK = 748_748;
let probe: ProbeContext;
let t: TestDatabase;
let ctx: ServiceContext<unknown>;

beforeAll(async () => {
  probe = await probeContext('idle-probe', { env: { POSTGRES_IDLE_IN_TRANSACTION_TIMEOUT_MS: '1000' } });
  ({ t, ctx } = probe);
});
afterAll(() => probe?.close());

describe('a service stopped inside a transaction', () => {
  it('releases its advisory lock to another replica within the bound, and its own pool goes on', async () => {
    let resume!: () => void;
    const stopped = new Promise<void>((done) => (resume = done));
    let locked!: () => void;
    const holding = new Promise<void>((done) => (locked = done));
    const stoppedReplica = ctx.db.transaction().execute(async (trx) => {
      await sql`SELECT pg_advisory_xact_lock(${LOCK})`.execute(trx);
      locked();
      await stopped; // the process is stopped: nothing more reaches Postgres
      await sql`SELECT 1`.execute(trx);
    });
    const outcome = stoppedReplica.then(
      () => 'committed',
      () => 'rolled back',
    );
    await holding;

    // The other replica: its own pool (the test database's), waiting at most 8 s for the lock.
    const t0 = Date.now();
    await t.db.transaction().execute(async (trx) => {
      await sql`SET LOCAL lock_timeout = '8s'`.execute(trx);
      await sql`SELECT pg_advisory_xact_lock(${LOCK})`.execute(trx); // throws on lock_timeout without the bound
    });
    expect(Date.now() - t0).toBeLessThan(8000);

    resume();
    expect(await outcome).toBe('rolled back');
    // The pool discarded the ended session: the service's next statement runs.
    const r = await sql<{ one: number }>`SELECT 1 AS one`.execute(ctx.db);
    expect(r.rows[0]?.one).toBe(1);
  }, 30_000);
});
