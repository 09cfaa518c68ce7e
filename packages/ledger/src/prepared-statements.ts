import { createHash } from 'node:crypto';
import type pg from 'pg';
import { testFaults } from '@gatehouse/contracts';

/**
 * Most statements one connection prepares (named statements it keeps on the server for its whole
 * life). Past it, new statement texts run unnamed, as before: the bound keeps a backend's plan
 * cache small when a caller builds texts that vary (a list of `n` placeholders).
 */
export const MAX_PREPARED_PER_CONNECTION = 128;

/** Statements Postgres can prepare (docs: PREPARE): queries and data-modifying statements, not utility commands. */
const PREPARABLE = /^\s*\(?\s*(select|insert|update|delete|with|values)\b/i;

/** SQLSTATE 0A000 with this message: a prepared statement's result columns changed under it (a migration). */
const RESULT_TYPE_CHANGED = 'cached plan must not change result type';

/**
 * True for the error Postgres raises when a prepared statement's result row type changed since it
 * was prepared — a migration added, dropped or retyped a column that `select *` or `returning *`
 * returns (SQLSTATE 0A000, "cached plan must not change result type"). Running it again under a
 * new name prepares it against the new table.
 */
export function isResultTypeChanged(err: unknown): boolean {
  const e = err as { code?: unknown; message?: unknown } | null;
  return Boolean(e && e.code === '0A000' && typeof e.message === 'string' && e.message.includes(RESULT_TYPE_CHANGED));
}

/**
 * The name of `text`'s prepared statement in generation `generation`: its first keyword, `gh`
 * and the generation, and 24 hex digits of the text's SHA-1 (`SELECT_gh0_…`). The keyword keeps
 * the statement's kind readable where the name stands for it (the pg instrumentation names its
 * span after it; `pg_prepared_statements`).
 */
export function statementName(text: string, generation: number): string {
  const keyword = (/^\s*\(?\s*([a-z]+)/i.exec(text)?.[1] ?? 'query').toUpperCase();
  return `${keyword}_gh${generation}_${createHash('sha1').update(text).digest('hex').slice(0, 24)}`;
}

/** The pool-wide generation of statement names: bumped when a migration changed a result type under them. */
interface Generation {
  value: number;
}

type Query = (...args: unknown[]) => unknown;

/**
 * Makes every statement the clients of `pool` send as `query(text, values)` — Kysely's form — or
 * `query(text, values, callback)` — `pool.query`'s — a
 * named (prepared) statement, so Postgres parses, analyses and plans its text once per
 * connection, not on every run (docs/decisions/0440-prepared-statements.md). The name is
 * {@link statementName}'s; node-postgres sends the Parse message only the
 * first time a connection meets it. Utility commands (BEGIN, COMMIT, SAVEPOINT, SET…), calls in
 * another form and texts past {@link MAX_PREPARED_PER_CONNECTION} distinct ones per connection
 * run unnamed. When a statement fails with {@link isResultTypeChanged}, the pool's generation
 * moves on, so every connection prepares its statements again under new names (the failed
 * statement's transaction is retried by `inTransaction`; a statement outside one fails once).
 * `GATEHOUSE_TEST_DISABLE_PREPARED_STATEMENTS=1` leaves every statement unnamed (the
 * control-removed test of this module only).
 * @throws Error when that switch is set outside `GATEHOUSE_ENV=test`.
 */
export function prepareStatements(pool: pg.Pool): void {
  if (testFaults().disablePreparedStatements) return;
  const generation: Generation = { value: 0 };
  pool.on('connect', (client) => {
    const named = new Set<string>();
    const query = client.query.bind(client) as Query;
    (client as unknown as { query: Query }).query = (...args: unknown[]) => {
      const [text, values, callback] = args;
      const form = args.length === 2 || (args.length === 3 && typeof callback === 'function');
      if (!form || typeof text !== 'string' || !Array.isArray(values) || !PREPARABLE.test(text)) return query(...args);
      const name = statementName(text, generation.value);
      if (!named.has(name)) {
        if (named.size >= MAX_PREPARED_PER_CONNECTION) return query(...args);
        named.add(name);
      }
      const at = generation.value;
      const noteFailure = (err: unknown): void => {
        if (isResultTypeChanged(err) && generation.value === at) generation.value++;
      };
      if (typeof callback === 'function')
        return query({ name, text, values }, (err: unknown, result: unknown) => {
          if (err) noteFailure(err);
          (callback as (e: unknown, r: unknown) => void)(err, result);
        });
      return (query({ name, text, values }) as Promise<unknown>).catch((err: unknown) => {
        noteFailure(err);
        throw err;
      });
    };
  });
}
