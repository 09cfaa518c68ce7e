import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { createDb, closeDb, inTransaction, readWorkflowEvents, recordWorkflowEvent } from '@gatehouse/ledger';
import { createLogger } from '@gatehouse/platform';
import { createAction } from '@gatehouse/testing';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { WorkflowEventHub } from '../src/domain/event-hub.ts';

/**
 * The live path of the event streams against real Postgres (docs/decisions/0250): a transaction
 * on another connection (another replica) commits an event and the hub hears it — at commit, not
 * before; a lost listening connection comes back and tells every stream to re-read.
 */
let t: TestDatabase;
const log = createLogger('event-hub-test');
beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(async () => {
  await t?.drop();
});

const wait = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('WorkflowEventHub (LISTEN/NOTIFY)', () => {
  it("hears another connection's event at commit, with its seq, and only for the subscribed workflow", async () => {
    const hub = new WorkflowEventHub(t.url, log);
    await hub.start();
    const a = await createAction(t.db, {
      tool: 'reship_order',
      orderId: 'O-1001',
      release: 'rel-1',
      decision: 'ALLOW',
      ruleId: 'ALL',
      approved: true,
      workflowState: 'executing',
    });
    const b = await createAction(t.db, {
      tool: 'reship_order',
      orderId: 'O-1002',
      release: 'rel-1',
      decision: 'ALLOW',
      ruleId: 'ALL',
      approved: true,
      workflowState: 'executing',
    });
    const heard: number[] = [];
    const off = hub.subscribe(a.workflowId, (seq) => heard.push(seq));
    const other = createDb(t.url, 2); // another replica's pool
    let before: number[] = [];
    await inTransaction(other, async (trx) => {
      await recordWorkflowEvent(trx, a.workflowId, 'executing');
      await wait(200);
      before = [...heard]; // not yet committed: nothing heard
    });
    await inTransaction(other, (trx) => recordWorkflowEvent(trx, b.workflowId, 'executing'));
    await inTransaction(other, (trx) => recordWorkflowEvent(trx, a.workflowId, 'executing'));
    for (let i = 0; i < 50 && heard.length < 2; i++) await wait(50);
    expect(before).toEqual([]);
    expect(heard).toEqual([1, 2]);
    expect((await readWorkflowEvents(t.db, a.workflowId, 1)).map((e) => e.seq)).toEqual([2]);
    off();
    expect(hub.subscriptions).toBe(0);
    await closeDb(other);
    await hub.close();
  });

  it('a terminated listening connection reconnects and makes every stream re-read (seq 0); close ends streams (-1)', async () => {
    const hub = new WorkflowEventHub(t.url, log);
    await hub.start();
    const a = await createAction(t.db, {
      tool: 'reship_order',
      orderId: 'O-1003',
      release: 'rel-1',
      decision: 'ALLOW',
      ruleId: 'ALL',
      approved: true,
      workflowState: 'executing',
    });
    const heard: number[] = [];
    hub.subscribe(a.workflowId, (seq) => heard.push(seq));
    await sql`SELECT pg_terminate_backend(pid) FROM pg_stat_activity
      WHERE datname = current_database() AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()`.execute(t.db);
    for (let i = 0; i < 100 && !heard.includes(0); i++) await wait(50);
    expect(heard).toContain(0);
    await inTransaction(t.db, (trx) => recordWorkflowEvent(trx, a.workflowId, 'executing'));
    for (let i = 0; i < 50 && !heard.includes(1); i++) await wait(50);
    expect(heard).toContain(1);
    await hub.close();
    expect(heard.at(-1)).toBe(-1);
  });
});
