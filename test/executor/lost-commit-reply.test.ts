import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type pg from 'pg';
import { Kysely, PostgresDialect, sql } from 'kysely';
import { createAction } from '@gatehouse/testing';
import { createPool, isConnectionFault, type Db } from '@gatehouse/ledger';
import { processExecution } from '@gatehouse/executor';
import { startHarness, type Harness } from './support/harness.ts';

// A Postgres restart can end a connection between the server's COMMIT and its reply: the
// transaction is committed, the executor sees a connection error and the job is held, then
// delivered again. Candidates for the chaos report of ADR 0672 (a refund at the payments ledger,
// its action still `running`), ruled out here: after a lost reply to the claim's COMMIT or to the
// record's, the redelivery ends with one refund and the action's status equal to its operation's.
//
// docs/decisions/0696-the-fenced-record-outlives-a-lost-connection.md: the effect's result is
// known only to the executor that called the system of record. A connection lost while it
// records that result (a terminated backend, as in the chaos suite's pg_terminate_backend waves)
// must not lose it: the fenced record is written again on a new connection while the lease lasts.
// Without that, the step waits for its lease to expire and is reclaimed, and an effect with no
// read-back (a customer email) can then only end failed_unknown.

let h: Harness;
const extra: Db[] = [];
beforeAll(async () => {
  h = await startHarness({ poolSize: 6 });
});
afterAll(async () => {
  for (const db of extra) await db.destroy();
  await h?.close();
});

/**
 * A ledger handle whose first transaction that sends a statement matching `marker` loses the
 * reply to its COMMIT: the COMMIT runs on the server, then the connection is dropped and the
 * caller sees node-postgres's lost-connection error.
 */
function lostCommitReplyDb(url: string, marker: RegExp): Db {
  const pool: pg.Pool = createPool(url, 4);
  let armed = true;
  pool.on('connect', (client) => {
    let marked = false;
    const query = client.query.bind(client) as (...a: unknown[]) => Promise<unknown>;
    (client as unknown as { query: (...a: unknown[]) => Promise<unknown> }).query = async (...args: unknown[]) => {
      const text = String(typeof args[0] === 'string' ? args[0] : (args[0] as { text?: string }).text);
      if (armed && marker.test(text)) marked = true;
      const result = await query(...args);
      if (marked && /^commit$/i.test(text.trim())) {
        armed = false;
        marked = false;
        (client as unknown as { connection: { stream: { destroy: () => void } } }).connection.stream.destroy();
        throw new Error('Connection terminated unexpectedly');
      }
      return result;
    };
  });
  const db = new Kysely({ dialect: new PostgresDialect({ pool }) }) as Db;
  extra.push(db);
  return db;
}

/**
 * A ledger handle whose statements matching `marker` have their backend terminated
 * (`pg_terminate_backend`, from another connection) just before they are sent — the first
 * `times` such statements (every one with `Infinity`). The statement then fails with a
 * connection fault and its transaction never commits.
 */
function terminatingDb(url: string, marker: RegExp, times: number): { db: Db; terminated: () => number } {
  const pool: pg.Pool = createPool(url, 4);
  let terminated = 0;
  pool.on('connect', (client) => {
    const query = client.query.bind(client) as (...a: unknown[]) => Promise<unknown>;
    (client as unknown as { query: (...a: unknown[]) => Promise<unknown> }).query = async (...args: unknown[]) => {
      const text = String(typeof args[0] === 'string' ? args[0] : (args[0] as { text?: string }).text);
      if (terminated < times && marker.test(text)) {
        terminated++;
        const pid = (client as unknown as { processID: number }).processID;
        await sql`SELECT pg_terminate_backend(${pid})`.execute(h.db);
      }
      return query(...args);
    };
  });
  const db = new Kysely({ dialect: new PostgresDialect({ pool }) }) as Db;
  extra.push(db);
  return { db, terminated: () => terminated };
}

/** The action's status, its operation's status and fencing token, and the refunds of its order. */
async function outcome(a: { actionId: string; operationKey: string }, orderId: string) {
  const action = await h.db.selectFrom('actions').select('status').where('id', '=', a.actionId).executeTakeFirstOrThrow();
  const op = await h.db
    .selectFrom('operations')
    .select(['status', 'fencing_token'])
    .where('key', '=', a.operationKey)
    .executeTakeFirstOrThrow();
  return { action: action.status, operation: op.status, fence: op.fencing_token, refunds: (await h.refunds(orderId)).length };
}

describe('executor: a COMMIT whose reply is lost (committed on the server, an error at the client)', () => {
  it('the record committed: its repeat (ADR 0696) writes nothing, the redelivery replays it; action and operation both succeeded, one refund', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { orderId, amountCents: 3000 });
    const db = lostCommitReplyDb(h.tdb.url, /"fenced" as/);
    // The record is written again after the lost connection: fenced out, since the first landed.
    expect(await processExecution(a.job, h.deps({ db }))).toBe('fenced_out');
    expect(await outcome(a, orderId)).toEqual({ action: 'succeeded', operation: 'succeeded', fence: '1', refunds: 1 });
    expect(await processExecution(a.job, h.deps())).toBe('replay:succeeded');
    expect(await outcome(a, orderId)).toEqual({ action: 'succeeded', operation: 'succeeded', fence: '1', refunds: 1 });
    const results = await h.db.selectFrom('outbox').select('job_id').where('job_id', '=', `result_${a.workflowId}_${a.callId}`).execute();
    expect(results.length).toBeGreaterThanOrEqual(1);
  });

  it('the claim committed: busy while its lease lives, then reclaimed and sent again under the same key; one refund', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { orderId, amountCents: 3000 });
    const db = lostCommitReplyDb(h.tdb.url, /"granted" as/);
    const err = await processExecution(a.job, h.deps({ db, leaseMs: 400 })).catch((e: unknown) => e);
    expect(isConnectionFault(err)).toBe(true);
    expect(await outcome(a, orderId)).toEqual({ action: 'running', operation: 'running', fence: '1', refunds: 0 });
    await new Promise((r) => setTimeout(r, 500));
    expect(await processExecution(a.job, h.deps())).toBe('succeeded');
    expect(await outcome(a, orderId)).toEqual({ action: 'succeeded', operation: 'succeeded', fence: '2', refunds: 1 });
  });
});

/** The record's statement: the fenced UPDATE of the operation (ADR 0540). */
const RECORD = /"fenced" as/;

describe('executor: the connection is lost while the result is recorded', () => {
  it('the record is written again on a new connection: one refund, recorded by the executor that made it (× 3)', async () => {
    for (let i = 0; i < 3; i++) {
      const orderId = await h.newOrder();
      const a = await createAction(h.db, { orderId, amountCents: 3000 });
      const cut = terminatingDb(h.tdb.url, RECORD, 1 + i); // one, two, three lost connections in a row
      expect(await processExecution(a.job, h.deps({ db: cut.db }))).toBe('succeeded');
      expect(cut.terminated()).toBe(1 + i);
      expect(await outcome(a, orderId)).toEqual({ action: 'succeeded', operation: 'succeeded', fence: '1', refunds: 1 });
      const results = await h.db.selectFrom('outbox').select('job_id').where('job_id', '=', `result_${a.workflowId}_${a.callId}`).execute();
      expect(results).toHaveLength(1);
    }
  });

  it('control removed (one try): the result is lost with the connection and the step waits, running, for its lease to expire', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { orderId, amountCents: 3000 });
    const cut = terminatingDb(h.tdb.url, RECORD, 1);
    const deps = h.deps({ db: cut.db });
    const err = await processExecution(a.job, { ...deps, hooks: { ...deps.hooks, disableRecordRetry: true } }).catch((e: unknown) => e);
    expect(isConnectionFault(err)).toBe(true);
    expect(await outcome(a, orderId)).toEqual({ action: 'running', operation: 'running', fence: '1', refunds: 1 });
  });

  it('a ledger that stays unreachable: the record gives up when the lease ends (it returns) and throws the connection fault', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { orderId, amountCents: 3000 });
    const cut = terminatingDb(h.tdb.url, RECORD, Infinity);
    const err = await processExecution(a.job, h.deps({ db: cut.db, leaseMs: 600 })).catch((e: unknown) => e);
    expect(isConnectionFault(err)).toBe(true);
    expect(cut.terminated()).toBeGreaterThanOrEqual(3); // tried again before giving up
    expect(await outcome(a, orderId)).toMatchObject({ action: 'running', operation: 'running', refunds: 1 });
  });
});
