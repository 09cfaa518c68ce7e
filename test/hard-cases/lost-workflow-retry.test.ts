import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { startHuntStack, fixtures, fc, msg, submit, waitFor, settled, refunds, summary, type HuntStack } from './helpers.ts';

/**
 * A ledger promote that lost commits (docs/decisions/0775) forgets a run whose refund the payments
 * ledger already paid; the requester's documented retry — the same ticket id again — is a new
 * run. Its refund must present the lost run's operation key, so the payments ledger replays the
 * stored refund (or refuses other parameters) instead of paying a second time
 * (docs/decisions/0789-operation-keys-from-the-ticket.md).
 */
let s: HuntStack;
beforeAll(async () => {
  s = await startHuntStack();
});
afterAll(async () => {
  await s?.close();
});

/**
 * What a lossy promote leaves of a run: no row of it in the ledger (every public table with a
 * `workflow_id`, then the run), while the systems of record keep their effects. Foreign keys and
 * triggers are bypassed (`session_replication_role = replica`), as a lost timeline bypasses them.
 */
async function forgetRun(workflowId: string): Promise<void> {
  await s.db.db.transaction().execute(async (trx) => {
    await sql`set local session_replication_role = replica`.execute(trx);
    const tables = await sql<{ table_name: string }>`select table_name from information_schema.columns
      where table_schema = 'public' and column_name = 'workflow_id'`.execute(trx);
    for (const { table_name } of tables.rows) {
      await sql`delete from ${sql.table(table_name)} where workflow_id::text = ${workflowId}`.execute(trx);
    }
    await sql`delete from workflows where id = ${workflowId}`.execute(trx);
  });
  expect((await s.db.db.selectFrom('workflows').select('id').where('id', '=', workflowId).execute()).length).toBe(0);
}

const refund = (amount: string) => fc(['issue_refund', { orderId: 'O-1007', amount, reason: 'damaged' }]);
const done = (v: { state: string; actions: Array<{ status: string }> }) =>
  settled(v) && v.actions.every((a) => !['approved', 'running', 'pending_approval'].includes(a.status));

describe('the same ticket again after its run was lost', () => {
  it('replays the paid refund at the payments ledger: one refund, the same operation key', { timeout: 180_000 }, async () => {
    await fixtures(s, 'H-lost-1', [refund('30.00'), msg()]);
    const first = await submit(s, 'rep-ana', 'H-lost-1', 'refund 30 on O-1007');
    const v1 = await waitFor(s, first.token, first.workflowId, done);
    const paid = v1.actions.find((a) => a.tool === 'issue_refund');
    expect(paid?.status, JSON.stringify(summary(v1))).toBe('succeeded');
    expect(await refunds(s, 'O-1007')).toHaveLength(1);

    await forgetRun(first.workflowId);
    await fixtures(s, 'H-lost-1', [refund('30.00'), msg()]);
    const retry = await submit(s, 'rep-ana', 'H-lost-1', 'refund 30 on O-1007');
    expect(retry.workflowId).not.toBe(first.workflowId);
    const v2 = await waitFor(s, retry.token, retry.workflowId, done);
    const replayed = v2.actions.find((a) => a.tool === 'issue_refund');
    expect(replayed?.status, JSON.stringify(summary(v2))).toBe('succeeded');
    const ledger = await refunds(s, 'O-1007');
    expect(ledger).toHaveLength(1);
    expect(replayed?.operationKey).toBe(paid?.operationKey);
    expect(ledger[0]).toMatchObject({ amountCents: 3000, idempotencyKey: paid?.operationKey });
  });

  it('refuses a retried refund of another amount under the lost key: nothing paid again', { timeout: 180_000 }, async () => {
    await fixtures(s, 'H-lost-2', [fc(['issue_refund', { orderId: 'O-1008', amount: '20.00', reason: 'damaged' }]), msg()]);
    const first = await submit(s, 'rep-ana', 'H-lost-2', 'refund 20 on O-1008');
    const v1 = await waitFor(s, first.token, first.workflowId, done);
    expect(v1.actions.find((a) => a.tool === 'issue_refund')?.status, JSON.stringify(summary(v1))).toBe('succeeded');

    await forgetRun(first.workflowId);
    await fixtures(s, 'H-lost-2', [fc(['issue_refund', { orderId: 'O-1008', amount: '25.00', reason: 'damaged' }]), msg()]);
    const retry = await submit(s, 'rep-ana', 'H-lost-2', 'refund 25 on O-1008');
    const v2 = await waitFor(s, retry.token, retry.workflowId, done);
    const refused = v2.actions.find((a) => a.tool === 'issue_refund');
    expect((await refunds(s, 'O-1008')).map((r) => r.amountCents)).toEqual([2000]);
    expect(refused?.status, JSON.stringify(summary(v2))).toBe('failed');
  });
});
