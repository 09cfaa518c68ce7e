import { z, type ZodType } from 'zod';
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

/** Paging of a whole-table read-back listing: `?limit=1..1000[&after=<id>]` (ids, by id); absent: the whole listing. */
export const PageQuery = {
  after: z.string().min(1).max(128).optional(),
  limit: z.coerce.number().int().min(1).max(1000).optional(),
};

/** The page asked for, or undefined for the whole listing; `next` names the last id of a full page (null: the last page). */
export function pageOf(q: { after?: string; limit?: number }): { after?: string; limit: number } | undefined {
  return q.limit === undefined ? undefined : { ...(q.after !== undefined ? { after: q.after } : {}), limit: q.limit };
}
