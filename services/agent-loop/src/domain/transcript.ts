import type { Db, Trx } from '@gatehouse/ledger';

/** A Responses API input item as stored in `conversation_items.item`. */
export type InputItem = Record<string, unknown>;

/**
 * The whole transcript of a workflow, in order, as Responses API input items (stateless mode:
 * the history is resent each round; `function_call` items carry no server item id). The
 * reasoning items kept with a function call come right before it, in the order received
 * (docs/decisions/0145-reasoning-items-in-the-transcript.md).
 */
export async function loadTranscript(db: Db | Trx, workflowId: string): Promise<InputItem[]> {
  const rows = await db
    .selectFrom('conversation_items')
    .select(['item', 'reasoning'])
    .where('workflow_id', '=', workflowId)
    .orderBy('id')
    .execute();
  return rows.flatMap((r) => [...(r.reasoning ?? []), r.item]);
}

/**
 * Call ids of `function_call` items that have no `function_call_output` yet. The next model
 * request may be made only when this is empty (Responses API call_id pairing rule).
 */
export async function unansweredCalls(trx: Trx, workflowId: string): Promise<string[]> {
  const rows = await trx
    .selectFrom('conversation_items as c')
    .select('c.call_id')
    .where('c.workflow_id', '=', workflowId)
    .where('c.kind', '=', 'function_call')
    .where(({ not, exists, selectFrom }) =>
      not(
        exists(
          selectFrom('conversation_items as o')
            .select('o.id')
            .whereRef('o.workflow_id', '=', 'c.workflow_id')
            .whereRef('o.call_id', '=', 'c.call_id')
            .where('o.kind', '=', 'function_call_output'),
        ),
      ),
    )
    .execute();
  return rows.map((r) => r.call_id as string);
}
