import type { ZodType } from 'zod';
import { UserError } from '@gatehouse/platform';

/**
 * Parses a query string object with a zod schema.
 * @throws UserError(`invalid_query`, 400) listing every issue.
 */
export function parseQuery<T>(schema: ZodType<T>, value: unknown): T {
  const r = schema.safeParse(value);
  if (!r.success) {
    throw new UserError('invalid_query', 'query parameters failed validation', {
      details: r.error.issues.map((i) => ({ path: i.path.join('.'), message: i.message })),
    });
  }
  return r.data;
}
