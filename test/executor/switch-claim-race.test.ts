import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { setSwitch } from '@gatehouse/operations';
import { effectsAfterSwitchOff } from '@gatehouse/ledger';
import { createAction } from '@gatehouse/testing';
import { processExecution } from '@gatehouse/executor';
import { AUDIT_HMAC_KEY, startHarness, waitFor, type Harness } from './support/harness.ts';

// docs/product/hard-cases.md#tool-switched-off-mid-run, docs/decisions/0683-switch-off-serializes-with-the-claim.md:
// a switch-off that commits after the executor read the switch (with the action) but before its
// claim must still hold the step — no effect may start after the switch-off committed.

/**
 * A proxy in front of staging that holds the order read of the re-evaluation (GET /orders/…)
 * while armed: the barrier between the executor's containment check and its claim.
 */
function barrierProxy(target: string) {
  let armed: { reached: () => void; release: Promise<void> } | null = null;
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', async () => {
      const gate = req.method === 'GET' && req.url?.startsWith('/orders/') ? armed : null;
      if (gate) {
        armed = null;
        gate.reached();
        await gate.release;
      }
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string' && k !== 'host') headers[k] = v;
      const body = chunks.length ? Buffer.concat(chunks) : undefined;
      try {
        const up = await fetch(`${target}${req.url}`, { method: req.method, headers, body });
        const text = Buffer.from(await up.arrayBuffer());
        const out: Record<string, string> = {};
        up.headers.forEach((v, k) => {
          if (!['content-length', 'transfer-encoding', 'connection', 'content-encoding'].includes(k)) out[k] = v;
        });
        res.writeHead(up.status, out).end(text);
      } catch {
        res.destroy();
      }
    });
  });
  return {
    listen: () =>
      new Promise<string>((resolve) =>
        server.listen(0, '127.0.0.1', () => {
          const a = server.address();
          resolve(`http://127.0.0.1:${typeof a === 'object' && a ? a.port : 0}`);
        }),
      ),
    /** Arms the barrier: returns when the read reached it, and the function that lets it through. */
    arm: () => {
      let reached!: () => void;
      let release!: () => void;
      const at = new Promise<void>((r) => (reached = r));
      armed = { reached, release: new Promise<void>((r) => (release = r)) };
      return { at, release };
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}

let h: Harness;
let proxy: ReturnType<typeof barrierProxy>;
let proxyUrl: string;
beforeAll(async () => {
  h = await startHarness();
  proxy = barrierProxy(h.stagingUrl);
  proxyUrl = await proxy.listen();
});
afterAll(async () => {
  await proxy?.close();
  await h?.close();
});

describe('containment: a switch-off between the switch check and the claim', () => {
  it('holds the step every time (barrier, 6 rounds): paused, nothing claimed or sent, approval unused; switch on runs it once', async () => {
    const deps = h.deps({ stagingUrl: proxyUrl });
    for (let round = 0; round < 6; round++) {
      const orderId = await h.newOrder();
      const a = await createAction(h.db, { orderId, amountCents: 6100 + round });
      const gate = proxy.arm();
      const run = processExecution(a.job, deps);
      await gate.at; // the executor read the switch (on) with the action and is reading the order
      await setSwitch(h.db, 'issue_refund', false, 'ops-gus', AUDIT_HMAC_KEY);
      gate.release();
      expect(await run, `round ${round}`).toBe('held:tool_disabled');
      expect(await h.requests(orderId)).toHaveLength(0);
      const wf = await h.db.selectFrom('workflows').select('state').where('id', '=', a.workflowId).executeTakeFirstOrThrow();
      expect(wf.state).toBe('paused');
      const act = await h.db.selectFrom('actions').select('status').where('id', '=', a.actionId).executeTakeFirstOrThrow();
      expect(act.status).toBe('approved');
      const ap = await h.db.selectFrom('approvals').select('status').where('id', '=', a.approvalId!).executeTakeFirstOrThrow();
      expect(ap.status).toBe('approved');
      // nothing reserved: the held claim rolled its transaction back, the reservation with it
      const op = await h.db.selectFrom('operations').select('status').where('key', '=', a.operationKey).executeTakeFirst();
      expect(op).toBeUndefined();
      expect(await effectsAfterSwitchOff(h.db)).toEqual([]);

      const rows = await setSwitch(h.db, 'issue_refund', true, 'ops-gus', AUDIT_HMAC_KEY);
      const mine = rows.find((r) => (r.payload as { actionId: string }).actionId === a.actionId);
      expect(mine).toBeDefined();
      expect(await processExecution(mine!.payload as typeof a.job, deps)).toBe('succeeded');
      expect(await h.refunds(orderId)).toHaveLength(1);
    }
  });

  it('a switch-off racing executions with no barrier (20 rounds): every effect was claimed before the switch-off committed', async () => {
    const deps = h.deps();
    for (let round = 0; round < 20; round++) {
      const orderId = await h.newOrder();
      const a = await createAction(h.db, { orderId, amountCents: 3000 + round });
      const [outcome] = await Promise.all([
        processExecution(a.job, deps),
        new Promise((r) => setTimeout(r, round % 5)).then(() => setSwitch(h.db, 'issue_refund', false, 'ops-gus', AUDIT_HMAC_KEY)),
      ]);
      const sw = await h.db.selectFrom('tool_switches').select('changed_at').where('tool', '=', 'issue_refund').executeTakeFirstOrThrow();
      const op = await h.db.selectFrom('operations').selectAll().where('key', '=', a.operationKey).executeTakeFirst();
      if (outcome === 'held:tool_disabled') {
        expect(await h.requests(orderId)).toHaveLength(0);
        expect(op).toBeUndefined();
      } else {
        expect(outcome).toBe('succeeded');
        // the claim (the operation's grant) committed before the switch-off was written
        expect(new Date(op!.created_at).getTime()).toBeLessThanOrEqual(new Date(sw.changed_at).getTime());
      }
      await setSwitch(h.db, 'issue_refund', true, 'ops-gus', AUDIT_HMAC_KEY);
    }
  });

  it('a switch-on committing while the executor pauses a held step (barrier on the outbox, 4 rounds): no error, the run is not paused, the refund runs once', async () => {
    const deps = h.deps();
    const lockWaiters = async () =>
      (
        await sql<{ n: number }>`select count(*)::int as n from pg_stat_activity
          where datname = current_database() and wait_event_type in ('Lock', 'advisory') and state = 'active'`.execute(h.db)
      ).rows[0]!.n;
    for (let round = 0; round < 4; round++) {
      const orderId = await h.newOrder();
      const a = await createAction(h.db, { orderId, amountCents: 3100 + round });
      await setSwitch(h.db, 'issue_refund', false, 'ops-gus', AUDIT_HMAC_KEY);
      let release!: () => void;
      const released = new Promise<void>((r) => (release = r));
      let locked!: () => void;
      const holding = new Promise<void>((r) => (locked = r));
      // The switch-on locks the run (to resume it, were it paused) and then waits on the outbox.
      const blocker = h.db.transaction().execute(async (trx) => {
        await sql`lock table outbox in exclusive mode`.execute(trx);
        locked();
        await released;
      });
      // The outbox is locked before the switch-on starts: on a loaded machine the switch-on could
      // otherwise write its rows first and commit, and nothing would ever wait on the outbox.
      await holding;
      const on = setSwitch(h.db, 'issue_refund', true, 'ops-gus', AUDIT_HMAC_KEY);
      await waitFor('switch-on waits on the outbox', async () => (await lockWaiters()) >= 1, 20_000);
      const held = processExecution(a.job, deps); // read the switch off before the switch-on commits
      await waitFor('the pause waits behind the switch-on', async () => (await lockWaiters()) >= 2, 20_000);
      release();
      await blocker;
      const rows = await on;
      // Not paused after all: the step ran (or its resumed job runs it), never an error.
      expect(await held, `round ${round}`).toMatch(/^(succeeded|busy)$/);
      for (const r of rows.filter((x) => (x.payload as { actionId: string }).actionId === a.actionId))
        await processExecution(r.payload as typeof a.job, deps);
      const wf = await h.db.selectFrom('workflows').select(['state', 'next_step']).where('id', '=', a.workflowId).executeTakeFirstOrThrow();
      expect(wf.state, `round ${round}: ${wf.next_step}`).not.toBe('paused');
      expect(await h.refunds(orderId)).toHaveLength(1);
    }
  });
});
