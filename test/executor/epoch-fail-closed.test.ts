import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { createAction } from '@gatehouse/testing';
import { processExecution } from '@gatehouse/executor';
import { startHarness, type Harness } from './support/harness.ts';

// docs/decisions/0170-delegated-credentials-bind-the-operation.md: no delegated token is minted
// without the revocation epoch. The step is held as a dependency fault (nothing claimed, nothing
// consumed, no downstream call) instead of running with an epoch the executor made up.

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(async () => {
  await h?.close();
});

const status = async (a: { actionId: string; approvalId: string | null; operationKey: string }) => ({
  action: (await h.db.selectFrom('actions').select('status').where('id', '=', a.actionId).executeTakeFirstOrThrow()).status,
  approval: (
    await h.db
      .selectFrom('approvals')
      .select('status')
      .where('id', '=', a.approvalId ?? '')
      .executeTakeFirst()
  )?.status,
  dispatched:
    (await h.db.selectFrom('operations').select('dispatched_at').where('key', '=', a.operationKey).executeTakeFirst())?.dispatched_at ??
    null,
});

describe('executor: the revocation epoch fails closed', () => {
  it('without the epoch row, then without the table: held (DependencyUnavailable), zero downstream calls; with it back the refund runs once', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { orderId, amountCents: 6400 });
    const held = { name: 'DependencyUnavailable', dependency: 'postgres' };

    const row = await h.db.selectFrom('credential_epochs').selectAll().where('id', '=', 1).executeTakeFirstOrThrow();
    await h.db.deleteFrom('credential_epochs').where('id', '=', 1).execute();
    try {
      await expect(processExecution(a.job, h.deps())).rejects.toMatchObject(held);
      await sql`alter table credential_epochs rename to credential_epochs_away`.execute(h.db);
      try {
        await expect(processExecution(a.job, h.deps())).rejects.toMatchObject(held);
      } finally {
        await sql`alter table credential_epochs_away rename to credential_epochs`.execute(h.db);
      }
    } finally {
      await h.db.insertInto('credential_epochs').values(row).execute();
    }
    expect(await h.requests(orderId)).toHaveLength(0);
    expect(await status(a)).toEqual({ action: 'approved', approval: 'approved', dispatched: null });

    expect(await processExecution(a.job, h.deps())).toBe('succeeded');
    expect(await h.refunds(orderId)).toHaveLength(1);
    expect(await h.requests(orderId)).toHaveLength(1);
  });

  it('without the table past the outage ceiling: the call is refused with the stop of its run (dependency_unavailable), zero downstream calls, the approval unused', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { orderId, amountCents: 6600 });
    // the job has been held on Postgres for longer than the harness's 15-minute ceiling
    const job = { ...a.job, outage: { dependency: 'postgres' as const, sinceMs: Date.now() - 16 * 60_000 } };
    await sql`alter table credential_epochs rename to credential_epochs_away`.execute(h.db);
    let result: string;
    try {
      result = await processExecution(job, h.deps());
    } finally {
      await sql`alter table credential_epochs_away rename to credential_epochs`.execute(h.db);
    }
    // the call is answered with the stop the agent loop applies to the run (not held forever)
    expect(result).toBe('refused:dependency_unavailable');
    expect(await h.requests(orderId)).toHaveLength(0);
    expect(await status(a)).toMatchObject({ approval: 'approved', dispatched: null });
  });

  it('control removed: minting with epoch 0 when the epoch is unreadable sends the call downstream', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { orderId, amountCents: 6500 });
    const row = await h.db.selectFrom('credential_epochs').selectAll().where('id', '=', 1).executeTakeFirstOrThrow();
    await h.db.deleteFrom('credential_epochs').where('id', '=', 1).execute();
    try {
      const deps = h.deps();
      await processExecution(a.job, { ...deps, hooks: { ...deps.hooks, epochFailOpen: true } });
    } finally {
      await h.db.insertInto('credential_epochs').values(row).execute();
    }
    // Staging fails closed too (503 epoch_unavailable), but the call went out.
    expect(await h.requests(orderId)).not.toHaveLength(0);
  });
});
