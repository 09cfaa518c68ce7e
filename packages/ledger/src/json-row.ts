import type { Selectable } from 'kysely';
import type { WorkflowsTable } from './schema.ts';

/**
 * A row as `to_jsonb(t)` returns it (a column of a query whose own columns are another table's),
 * revived to the types `selectAll()` gives: the `timestamps` columns as `Date` (null stays null)
 * and the `bigints` columns as decimal strings, as node-postgres returns `bigint` (exact up to
 * 2^53: JSON carries them as numbers; a fencing token never gets near). Text,
 * integers, booleans and jsonb come through JSON as they are.
 * @throws TypeError when `json` is not an object (the query selected no row).
 */
export function reviveJsonRow<T>(json: unknown, columns: { timestamps: ReadonlyArray<keyof T>; bigints?: ReadonlyArray<keyof T> }): T {
  if (typeof json !== 'object' || json === null) throw new TypeError('expected a table row as JSON');
  const row = { ...(json as Record<string, unknown>) };
  for (const c of columns.timestamps) {
    const v = row[c as string];
    row[c as string] = v === null || v === undefined ? null : new Date(String(v));
  }
  for (const c of columns.bigints ?? []) row[c as string] = String(row[c as string]);
  return row as T;
}

/** A `workflows` row from `to_jsonb(w)` ({@link reviveJsonRow}). @throws TypeError when `json` is not a row. */
export function reviveWorkflow(json: unknown): Selectable<WorkflowsTable> {
  return reviveJsonRow<Selectable<WorkflowsTable>>(json, { timestamps: ['created_at', 'updated_at'] });
}
