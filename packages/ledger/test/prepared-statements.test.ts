import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { createDb, createPool, inTransaction, MAX_PREPARED_PER_CONNECTION, type Db } from '../src/index.ts';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { resetTestFaultsForTests } from '@gatehouse/contracts';

// docs/decisions/0440-prepared-statements.md: the ledger's pools prepare each statement once per
// connection; utility commands stay unnamed; a connection prepares a bounded number; a migration
// that changes a prepared statement's result columns costs one failed attempt, not a broken pool.

let t: TestDatabase;
/** One connection, so every statement of a test meets the same backend's prepared statements. */
let db: Db;
beforeAll(async () => {
  t = await createTestDatabase({ migrate: false });
  await sql`create table probe (id int primary key, a text)`.execute(t.db);
  await sql`insert into probe values (1, 'one')`.execute(t.db);
  db = createDb(t.url, 1);
});
afterAll(async () => {
  await db?.destroy();
  await t?.drop();
});

/** The names of the statements prepared on the pool's one connection. */
async function prepared(on: Db = db): Promise<string[]> {
  const r = await sql<{ name: string }>`select name from pg_prepared_statements`.execute(on);
  return r.rows.map((x) => x.name).filter((n) => /_gh\d+_/.test(n));
}

describe('prepared statements (ADR 0440)', () => {
  it('a statement is prepared once per connection and run by name after that; BEGIN and COMMIT are not', async () => {
    const before = await prepared();
    for (let i = 0; i < 3; i++) await sql`select a from probe where id = ${1}`.execute(db);
    await inTransaction(db, async (trx) => sql`select id from probe where id = ${1}`.execute(trx));
    const after = await prepared();
    // the two selects above, each once however often it ran (the listing query was prepared before)
    expect(after.length - before.length).toBe(2);
    expect(after.every((n) => /^SELECT_gh\d+_[0-9a-f]{24}$/.test(n))).toBe(true);
    const statements = await sql<{ statement: string }>`select statement from pg_prepared_statements`.execute(db);
    expect(statements.rows.some((r) => /^\s*(begin|commit)/i.test(r.statement))).toBe(false);
  });

  it("pool.query's callback form is prepared too", async () => {
    const pool = createPool(t.url, 1);
    try {
      for (let i = 0; i < 2; i++) expect((await pool.query('select a from probe where id = $1', [1])).rows).toEqual([{ a: 'one' }]);
      const r = await pool.query<{ name: string }>('select name from pg_prepared_statements where statement = $1', [
        'select a from probe where id = $1',
      ]);
      expect(r.rows).toHaveLength(1);
    } finally {
      await pool.end();
    }
  });

  it(`a connection prepares at most ${MAX_PREPARED_PER_CONNECTION} statements; the others run unnamed`, async () => {
    for (let i = 0; i < MAX_PREPARED_PER_CONNECTION + 20; i++) {
      const r = await sql<{ n: number }>`select ${sql.lit(i)}::int as n from probe where id = ${1}`.execute(db);
      expect(r.rows[0]?.n).toBe(i);
    }
    expect((await prepared()).length).toBe(MAX_PREPARED_PER_CONNECTION);
  });

  it('a migration that changes a result type: the statement fails once, the transaction is retried under a new name', async () => {
    const own = createDb(t.url, 1);
    try {
      const read = (q: Db) =>
        inTransaction(q, async (trx) => (await sql<Record<string, unknown>>`select * from probe where id = ${1}`.execute(trx)).rows[0]);
      expect(await read(own)).toEqual({ id: 1, a: 'one' });
      await sql`alter table probe add column b text default 'bee'`.execute(t.db);
      // the retry inside inTransaction prepares the text again: the caller sees the new column
      expect(await read(own)).toEqual({ id: 1, a: 'one', b: 'bee' });
      // outside a transaction the statement fails once with Postgres's error, then works again
      await sql`alter table probe add column c text default 'sea'`.execute(t.db);
      const once = sql`select * from probe where id = ${1}`;
      await expect(once.execute(own)).rejects.toMatchObject({ code: '0A000' });
      expect((await once.execute(own)).rows[0]).toEqual({ id: 1, a: 'one', b: 'bee', c: 'sea' });
    } finally {
      await own.destroy();
    }
  });

  it('control removed: with GATEHOUSE_TEST_DISABLE_PREPARED_STATEMENTS nothing is prepared', async () => {
    Object.assign(process.env, { GATEHOUSE_ENV: 'test', GATEHOUSE_TEST_DISABLE_PREPARED_STATEMENTS: '1' });
    resetTestFaultsForTests();
    const plain = createDb(t.url, 1);
    try {
      for (let i = 0; i < 3; i++) await sql`select a from probe where id = ${1}`.execute(plain);
      expect(await prepared(plain)).toEqual([]);
    } finally {
      await plain.destroy();
      delete process.env.GATEHOUSE_TEST_DISABLE_PREPARED_STATEMENTS;
      resetTestFaultsForTests();
    }
  });
});
