import type { Selectable } from 'kysely';
import type { WorkflowsTable } from './schema.ts';

/**
 * A `workflows` row as `to_jsonb(w)` returns it (a column of a query whose own columns are
 * another table's), revived to the types `selectAll()` gives: the timestamps as `Date`. The
 * other columns are text and integers, which JSON keeps as they are.
 * @throws TypeError when `json` is not an object (the query selected no workflow).
 */
export function reviveWorkflow(json: unknown): Selectable<WorkflowsTable> {
  if (typeof json !== 'object' || json === null) throw new TypeError('expected a workflows row as JSON');
  const w = json as Selectable<WorkflowsTable>;
  return { ...w, created_at: new Date(String(w.created_at)), updated_at: new Date(String(w.updated_at)) };
}
