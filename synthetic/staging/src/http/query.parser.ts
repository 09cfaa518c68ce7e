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

/**
 * The start of a read-back window: `?since=<ISO 8601 time>` (inclusive), e.g.
 * `2026-12-08T00:00:00.000Z`; anything `Date.parse` cannot read is refused (400 `invalid_query`).
 */
export const SinceQuery = z
  .string()
  .min(1)
  .max(64)
  .refine((v) => !Number.isNaN(Date.parse(v)), 'an ISO 8601 time');

/** The page asked for, or undefined for the whole listing; `next` names the last id of a full page (null: the last page). */
export function pageOf(q: { after?: string; limit?: number }): { after?: string; limit: number } | undefined {
  return q.limit === undefined ? undefined : { ...(q.after !== undefined ? { after: q.after } : {}), limit: q.limit };
}

/**
 * The body of a listing under `key`: `{[key]: rows}` for the whole listing, or with a page asked
 * for `{[key]: rows, next}`, where `next` is the id (`idOf`) of the last row of a full page — the
 * cursor of the following page — and null on the last page.
 */
export function listingBody<T>(
  key: string,
  rows: T[],
  page: { limit: number } | undefined,
  idOf: (row: T) => string,
): Record<string, T[] | string | null> {
  if (!page) return { [key]: rows };
  const last = rows.at(-1);
  return { [key]: rows, next: rows.length === page.limit && last !== undefined ? idOf(last) : null };
}
