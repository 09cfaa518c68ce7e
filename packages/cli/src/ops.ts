import { sql } from 'kysely';
import { executionsQueue, loadWorld } from '@gatehouse/contracts';
import { actorHash, enqueueInTransaction, inTransaction, recordAudit, type Db, type OutboxRow } from '@gatehouse/ledger';
import { findTool } from '@gatehouse/tools';

/**
 * The operator named by `--as` (a user of world.json with role `operator`).
 * @throws Error when the user is unknown or not an operator.
 */
export function requireOperator(userId: string): { id: string; tenant: string } {
  const u = loadWorld().users.find((x) => x.id === userId);
  if (!u || u.role !== 'operator') throw new Error(`${userId} is not an operator`);
  return { id: u.id, tenant: u.tenant };
}

/**
 * `gatehouse switch on|off TOOL`: read by the executor at the moment of execution (SPEC §6).
 * Switching on re-enqueues, through the outbox, every approved action of that tool not yet
 * claimed in a live workflow (the held ones), with a fresh job id. Returns the rows to publish.
 */
export async function setSwitch(db: Db, tool: string, enabled: boolean, operator: string, hmacKey: string): Promise<OutboxRow[]> {
  if (!findTool(tool)) throw new Error(`unknown tool ${tool}`);
  return inTransaction(db, async (trx) => {
    await trx
      .insertInto('tool_switches')
      .values({ tool, enabled, changed_by: operator })
      .onConflict((oc) => oc.column('tool').doUpdateSet({ enabled, changed_by: operator, changed_at: new Date() }))
      .execute();
    await recordAudit(trx, {
      type: 'switch.changed',
      service: 'cli',
      runId: null,
      actorHash: actorHash(hmacKey, operator),
      tool,
      outcome: enabled ? 'on' : 'off',
    });
    if (!enabled) return [];
    const held = await trx
      .selectFrom('actions as a')
      .innerJoin('workflows as w', 'w.id', 'a.workflow_id')
      .leftJoin('approvals as p', (j) => j.onRef('p.action_id', '=', 'a.id').on('p.status', '=', 'approved'))
      .select(['a.id', 'a.version', 'a.workflow_id', 'a.release_id', 'p.id as approval_id'])
      .leftJoin('operations as o', 'o.action_id', 'a.id')
      .where('a.tool', '=', tool)
      .where('a.status', '=', 'approved')
      .where('w.state', 'not in', ['completed', 'stopped', 'needs_reconciliation'])
      .where((eb) => eb.or([eb('o.key', 'is', null), eb('o.status', '=', 'pending')]))
      .execute();
    const rows: OutboxRow[] = [];
    for (const a of held) {
      await trx
        .updateTable('workflows')
        .set({ state: 'executing', next_step: null, updated_at: new Date() })
        .where('id', '=', a.workflow_id)
        .where('state', '=', 'paused')
        .execute();
      rows.push(
        await enqueueInTransaction(trx, executionsQueue, {
          release: a.release_id,
          workflowId: a.workflow_id,
          actionId: a.id,
          actionVersion: a.version,
          approvalId: a.approval_id,
          resumeSeq: Date.now(),
        }),
      );
    }
    return rows;
  });
}

/** `gatehouse epoch bump`: raises the revocation epoch; every outstanding delegated token dies. */
export async function bumpEpoch(db: Db, operator: string, hmacKey: string): Promise<number> {
  return inTransaction(db, async (trx) => {
    const row = await trx
      .updateTable('credential_epochs')
      .set({ epoch: sql`epoch + 1`, changed_by: operator, changed_at: new Date() })
      .where('id', '=', 1)
      .returning('epoch')
      .executeTakeFirstOrThrow();
    await recordAudit(trx, {
      type: 'epoch.bumped',
      service: 'cli',
      runId: null,
      actorHash: actorHash(hmacKey, operator),
      outcome: String(row.epoch),
    });
    return row.epoch;
  });
}
