import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Server } from 'node:http';
import { signUserToken } from '@gatehouse/credentials';
import { createDb, type Db } from '@gatehouse/ledger';
import { closeServer, listen } from '@gatehouse/platform';
import { createAction, type SeededAction } from '@gatehouse/testing';
import { createTestDatabase, freePort, someoneWaitsOnALock, TcpCut, type TestDatabase } from '@gatehouse/test-harness';
import { SECRET, testApprovalApp } from './support/app.ts';

// The ledger goes away while an approver decides: before the decision reaches it, or with the
// decision's transaction open (it waits for its action's lock when the connection is cut). Either
// way the approver gets 503 dependency_unavailable, nothing is half-decided (the approval stays
// pending, no execution is enqueued), and the same decision sent once the ledger is back approves
// once, with exactly one execution job.

let t: TestDatabase;
let cut: TcpCut;
let viaCut: Db;
let server: Server;
let url: string;

beforeAll(async () => {
  t = await createTestDatabase();
  cut = new TcpCut(await freePort(), { host: '127.0.0.1', port: Number(new URL(t.url).port || 5432) });
  await cut.open();
  const proxied = new URL(t.url);
  proxied.port = String(cut.port);
  viaCut = createDb(proxied.toString(), 2);
  const app = testApprovalApp(viaCut, 'approval-ledger-cut-test', { responseDeadlineMs: 3000 });
  const l = await listen(app, 0, '127.0.0.1');
  server = l.server;
  url = `http://127.0.0.1:${l.port}`;
});
afterAll(async () => {
  await cut?.cut();
  if (server) await closeServer(server);
  await viaCut?.destroy().catch(() => undefined);
  await t?.drop();
});

/** POSTs lead-eli's approval of `a` and returns the status and the error reason, if any. */
async function approve(a: SeededAction): Promise<{ status: number; reason?: string }> {
  const lead = await signUserToken({ sub: 'lead-eli', tenant: 'quillfeather', roles: ['lead'] }, SECRET);
  const r = await fetch(`${url}/v1/approvals/${a.approvalId}/decision`, {
    method: 'POST',
    headers: { authorization: `Bearer ${lead}`, 'content-type': 'application/json' },
    body: JSON.stringify({ decision: 'approve', actionVersion: a.version, actionDigest: a.digest }),
    signal: AbortSignal.timeout(15_000),
  });
  const body = (await r.json()) as { error?: { reason: string } };
  return { status: r.status, reason: body.error?.reason };
}

/** The approval's status and the number of `executions` outbox rows of its workflow, read directly. */
async function ledgerOf(a: SeededAction): Promise<{ status: string; executions: number }> {
  const { status } = await t.db.selectFrom('approvals').select('status').where('id', '=', a.approvalId!).executeTakeFirstOrThrow();
  const rows = await t.db.selectFrom('outbox').select('payload').where('queue', 'like', '%executions%').execute();
  return { status, executions: rows.filter((r) => (r.payload as { workflowId?: string }).workflowId === a.workflowId).length };
}

/** Backends of the test database still connected through the proxy after a cut (their rollback pending). */
async function settled(): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const { rows } = await sql<{ n: number }>`select count(*)::int as n from pg_stat_activity
      where datname = current_database() and state = 'idle in transaction'`.execute(t.db);
    if (rows[0]!.n === 0) return;
    await new Promise((r) => setTimeout(r, 25));
  }
}

describe('the ledger goes away while an approver decides', () => {
  it('ledger unreachable when the decision arrives: 503, the approval stays pending; once back, one approval and one execution', async () => {
    const a = await createAction(t.db, { orderId: 'O-CUT-BEFORE', amountCents: 8000, pendingApproval: {} });
    await cut.cut();
    try {
      expect(await approve(a)).toEqual({ status: 503, reason: 'dependency_unavailable' });
    } finally {
      await cut.open();
    }
    expect(await ledgerOf(a)).toEqual({ status: 'pending', executions: 0 });
    expect((await approve(a)).status).toBe(200);
    expect(await ledgerOf(a)).toEqual({ status: 'approved', executions: 1 });
    // Sent a third time, as after a lost answer: the same answer again, nothing enqueued (ADR 0726).
    expect(await approve(a)).toEqual({ status: 200, reason: undefined });
    expect(await ledgerOf(a)).toEqual({ status: 'approved', executions: 1 });
  }, 60_000);

  it('connection cut with the decision in its transaction: 503, nothing decided or enqueued; the decision sent again approves once (× 3)', async () => {
    for (let i = 0; i < 3; i++) {
      const a = await createAction(t.db, { orderId: `O-CUT-MID-${i}`, amountCents: 8000, pendingApproval: {} });
      const blocker = createDb(t.url, 1);
      let answer: { status: number; reason?: string };
      try {
        answer = await blocker.connection().execute(async (conn) => {
          await sql`begin`.execute(conn);
          await sql`select 1 from actions where id = ${a.actionId} for update`.execute(conn);
          const decision = approve(a);
          expect(await someoneWaitsOnALock(t.db)).toBe(true);
          await cut.cut(); // the decision's connection goes while its transaction is open
          const r = await decision;
          await sql`commit`.execute(conn); // its backend now gets the lock, finds no client, rolls back
          return r;
        });
      } finally {
        await blocker.destroy();
        await cut.open();
      }
      expect(answer).toEqual({ status: 503, reason: 'dependency_unavailable' });
      await settled();
      expect(await ledgerOf(a)).toEqual({ status: 'pending', executions: 0 });
      expect((await approve(a)).status).toBe(200);
      expect(await ledgerOf(a)).toEqual({ status: 'approved', executions: 1 });
    }
  }, 120_000);
});
