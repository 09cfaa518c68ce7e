import pg from 'pg';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAction } from '@gatehouse/testing';
import { WorkflowEventSchema } from '@gatehouse/contracts';
import { createTestDatabase, someoneWaitsOnALock, type TestDatabase } from '@gatehouse/test-harness';
import { grantLease, inTransaction, lockActionAndReserve, readActionsView, readWorkflowEvents } from '../src/index.ts';

// docs/decisions/0620-the-claim-in-two-statements.md, against a real ledger: the checks' statement
// locks the run before the action (ADR 0014), and the run's move to `executing` rides on the
// grant, its event showing the action as the grant left it.

let tdb: TestDatabase;
beforeAll(async () => {
  tdb = await createTestDatabase();
});
afterAll(async () => {
  await tdb?.drop();
});

/** A client of its own, for a transaction that holds a row lock while the test goes on. */
async function connect(): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: tdb.url });
  await c.connect();
  return c;
}

/** An approved refund whose run is in `state`, a state the claim moves to `executing` from. */
async function inState(orderId: string, state: 'investigating' | 'awaiting_approval') {
  const a = await createAction(tdb.db, { orderId });
  await tdb.db.updateTable('workflows').set({ state }).where('id', '=', a.workflowId).execute();
  return a;
}

describe('the claim in two statements (ADR 0620)', () => {
  it('the checks lock the run first: while the run is held elsewhere, the action stays free (× 5)', async () => {
    for (let trial = 0; trial < 5; trial++) {
      const a = await createAction(tdb.db, { orderId: `O-2S-${trial}` });
      const holder = await connect();
      const bystander = await connect();
      try {
        await holder.query('begin');
        await holder.query('select 1 from workflows where id = $1 for update', [a.workflowId]);
        const claim = inTransaction(tdb.db, (trx) =>
          lockActionAndReserve(trx, a.actionId, { version: 1, statuses: ['approved'] }, { lockRun: a.workflowId }),
        );
        expect(await someoneWaitsOnALock(tdb.db)).toBe(true);
        // Were the action locked before the run, this would fail with "could not obtain lock".
        await bystander.query('begin');
        await expect(bystander.query('select 1 from actions where id = $1 for update nowait', [a.actionId])).resolves.toBeDefined();
        await expect(bystander.query('select 1 from operations where key = $1', [a.operationKey])).resolves.toMatchObject({ rowCount: 0 });
        await bystander.query('rollback');
        await holder.query('commit');
        const locked = await claim;
        expect(locked?.run).toMatchObject({ state: 'executing', writesEnabled: true, followedUp: false });
        expect(locked?.op).toMatchObject({ key: a.operationKey, status: 'pending' });
      } finally {
        await holder.end();
        await bystander.end();
      }
    }
  });

  it('a run that does not exist: nothing is locked or reserved', async () => {
    const a = await createAction(tdb.db, { orderId: 'O-2S-none' });
    const none = await inTransaction(tdb.db, (trx) =>
      lockActionAndReserve(trx, a.actionId, { version: 1, statuses: ['approved'] }, { lockRun: '00000000-0000-4000-8000-000000000000' }),
    );
    expect(none).toBeNull();
    expect(await tdb.db.selectFrom('operations').select('key').where('key', '=', a.operationKey).execute()).toEqual([]);
  });

  it('an action named with another run: nothing is locked or reserved, so no claim moves a run it did not lock', async () => {
    const a = await createAction(tdb.db, { orderId: 'O-2S-other-a' });
    const b = await createAction(tdb.db, { orderId: 'O-2S-other-b' });
    const none = await inTransaction(tdb.db, (trx) =>
      lockActionAndReserve(trx, a.actionId, { version: 1, statuses: ['approved'] }, { lockRun: b.workflowId }),
    );
    expect(none).toBeNull();
    expect(await tdb.db.selectFrom('operations').select('key').where('key', '=', a.operationKey).execute()).toEqual([]);
  });

  it('a grant fenced out takes no limit lock: the read in its select list runs only on a granted row', async () => {
    const a = await createAction(tdb.db, { orderId: 'O-2S-fenced' });
    const held = await inTransaction(tdb.db, async (trx) => {
      const locked = await lockActionAndReserve(trx, a.actionId, undefined, { lockRun: a.workflowId });
      const stale = { ...locked!.op!, fencing_token: '99' };
      const read = sql`(select to_jsonb(s) from refund_limit_sums_locked(array[424242]::bigint[], 'quillfeather', 'O-2S-fenced', 'rep-ana',
        now() - interval '1 day', now() - interval '1 hour', array['running']::text[], null::uuid) s)`;
      await expect(
        grantLease(trx, stale, { owner: 'test', leaseMs: 60_000, actionStatus: 'approved', workflow: { nextStep: null }, read }),
      ).rejects.toThrow();
      const { rows } = await sql<{ n: number }>`select count(*)::int as n from pg_locks
        where locktype = 'advisory' and pid = pg_backend_pid()`.execute(trx);
      return rows[0]!.n;
    });
    expect(held).toBe(0);
    // the same read on a granted row takes the lock, for the rest of the transaction
    const taken = await inTransaction(tdb.db, async (trx) => {
      const locked = await lockActionAndReserve(trx, a.actionId, undefined, { lockRun: a.workflowId });
      const read = sql`(select to_jsonb(s) from refund_limit_sums_locked(array[424242]::bigint[], 'quillfeather', 'O-2S-fenced', 'rep-ana',
        now() - interval '1 day', now() - interval '1 hour', array['running']::text[], ${a.actionId}::uuid) s)`;
      const granted = await grantLease(trx, locked!.op!, {
        owner: 'test',
        leaseMs: 60_000,
        actionStatus: 'approved',
        workflow: { nextStep: null },
        read,
      });
      expect(granted.read).toMatchObject({ order_cents: 0 });
      const { rows } = await sql<{ n: number }>`select count(*)::int as n from pg_locks
        where locktype = 'advisory' and pid = pg_backend_pid()`.execute(trx);
      return rows[0]!.n;
    });
    expect(taken).toBe(1);
  });

  it("the run's move rides on the grant: one event, whose actions view shows the action running as the API reads it", async () => {
    const a = await inState('O-2S-ride', 'investigating');
    const before = (await readWorkflowEvents(tdb.db, a.workflowId, 0)).length;
    const states: string[] = [];
    await inTransaction(tdb.db, async (trx) => {
      const locked = await lockActionAndReserve(trx, a.actionId, undefined, { lockRun: a.workflowId });
      const granted = await grantLease(trx, locked!.op!, {
        owner: 'test',
        leaseMs: 60_000,
        baseline: null,
        actionStatus: 'approved',
        workflow: { nextStep: null, lockedFrom: locked!.run!.state },
        read: sql`(select 41 + 1)`,
      });
      expect(granted.read).toBe(42);
      states.push(
        ...(await sql<{ state: string }>`select state from workflows where id = ${a.workflowId}`.execute(trx)).rows.map((r) => r.state),
      );
    });
    expect(states).toEqual(['executing']);
    const events = (await readWorkflowEvents(tdb.db, a.workflowId, 0))
      .slice(before)
      .map((e) => WorkflowEventSchema.parse(JSON.parse(e.json)));
    expect(events).toHaveLength(1);
    expect(events[0]).toMatchObject({ state: 'executing', previousState: 'investigating' });
    const view = await readActionsView(tdb.db, a.workflowId);
    expect(view.actions.map((x) => x.status)).toEqual(['running']);
    const summary = ({ actionId, tool, target, version, decision, ruleId, status }: (typeof view.actions)[number]) => ({
      actionId,
      tool,
      target,
      version,
      decision,
      ruleId,
      status,
    });
    expect(events[0]!.actions).toEqual(view.actions.map(summary));
  });

  it('a stale locked state does not ride: the transition writer reads it again and moves once', async () => {
    const a = await inState('O-2S-stale', 'awaiting_approval');
    const before = (await readWorkflowEvents(tdb.db, a.workflowId, 0)).length;
    await inTransaction(tdb.db, async (trx) => {
      const locked = await lockActionAndReserve(trx, a.actionId, undefined, { lockRun: a.workflowId });
      // the claim believes the run is investigating: the riding UPDATE matches no row
      await grantLease(trx, locked!.op!, {
        owner: 'test',
        leaseMs: 60_000,
        baseline: null,
        actionStatus: 'approved',
        workflow: { nextStep: null, lockedFrom: 'investigating' },
      });
    });
    const wf = await tdb.db.selectFrom('workflows').select('state').where('id', '=', a.workflowId).executeTakeFirstOrThrow();
    expect(wf.state).toBe('executing');
    const events = (await readWorkflowEvents(tdb.db, a.workflowId, 0))
      .slice(before)
      .map((e) => WorkflowEventSchema.parse(JSON.parse(e.json)));
    expect(events).toMatchObject([{ state: 'executing', previousState: 'awaiting_approval' }]);
    expect(events[0]!.actions.map((x) => x.status)).toEqual(['running']);
  });
});
