import type pg from 'pg';
import { Kysely, PostgresDialect } from 'kysely';
import { createPool, type Db } from '@gatehouse/ledger';

/**
 * A ledger handle over `url` that records the text of every statement its clients send (BEGIN and
 * COMMIT included) into `statements`, for the statement-count guards (docs/decisions/0270 and 0340).
 */
export function countingDb(url: string, statements: string[]): Db {
  const pool: pg.Pool = createPool(url, 4);
  pool.on('connect', (client) => {
    const query = client.query.bind(client) as (...a: unknown[]) => unknown;
    (client as unknown as { query: (...a: unknown[]) => unknown }).query = (...args: unknown[]) => {
      const text = typeof args[0] === 'string' ? args[0] : (args[0] as { text?: string }).text;
      statements.push(String(text));
      return query(...args);
    };
  });
  return new Kysely({ dialect: new PostgresDialect({ pool }) }) as Db;
}
