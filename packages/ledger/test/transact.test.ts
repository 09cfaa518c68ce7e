import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { inTransaction, isConnectionFault, transact, type Db, type Trx } from '../src/index.ts';

// ADR 0698: when a transaction's callback throws and its connection has ended meanwhile (a
// terminated backend, a failover), Kysely's ROLLBACK fails too and its connection error replaces
// the callback's. `transact` (and `inTransaction`, which runs on it) keeps the callback's reason.
// Each case first shows that plain Kysely loses the reason in the same situation, so the case
// does exercise a failed rollback.

const REPEAT = 5;

let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase({ migrate: false });
});
afterAll(async () => {
  await t?.drop();
});

/** The callback's own refusal: what the caller must see. */
class Refused extends Error {}

/** Ends the backend running `trx` (from another pooled connection) and waits until it is gone. */
async function endOwnBackend(db: Db, trx: Trx): Promise<void> {
  const { rows } = await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(trx);
  const pid = rows[0]!.pid;
  await sql`select pg_terminate_backend(${pid})`.execute(db);
  for (let i = 0; i < 200; i++) {
    const left = await sql<{ n: number }>`select count(*)::int as n from pg_stat_activity where pid = ${pid}`.execute(db);
    if (left.rows[0]!.n === 0) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`backend ${pid} did not end`);
}

/** A callback that loses its connection, then refuses. */
const refuseAfterLoss =
  (db: Db) =>
  async (trx: Trx): Promise<never> => {
    await endOwnBackend(db, trx);
    throw new Refused('refused by the callback');
  };

describe('a callback error survives a failed rollback', () => {
  it('plain Kysely replaces it with the rollback connection fault (the situation is real)', async () => {
    const err = await t.db
      .transaction()
      .execute(refuseAfterLoss(t.db))
      .catch((e: unknown) => e);
    expect(err).not.toBeInstanceOf(Refused);
    expect(isConnectionFault(err)).toBe(true);
  });

  it(`transact and inTransaction throw the callback error (× ${REPEAT})`, async () => {
    for (let i = 0; i < REPEAT; i++) {
      await expect(transact(t.db, refuseAfterLoss(t.db))).rejects.toBeInstanceOf(Refused);
      await expect(inTransaction(t.db, refuseAfterLoss(t.db))).rejects.toBeInstanceOf(Refused);
    }
  });

  it('a callback that succeeds commits and returns its value; one whose rollback works rethrows as before', async () => {
    await sql`create table if not exists transact_probe (n int)`.execute(t.db);
    expect(await transact(t.db, async (trx) => (await sql`insert into transact_probe values (1)`.execute(trx), 'done'))).toBe('done');
    await expect(
      transact(t.db, async (trx) => {
        await sql`insert into transact_probe values (2)`.execute(trx);
        throw new Refused('plain');
      }),
    ).rejects.toBeInstanceOf(Refused);
    const { rows } = await sql<{ n: number }>`select n from transact_probe order by n`.execute(t.db);
    expect(rows.map((r) => r.n)).toEqual([1]);
  });
});
