import { createServer, type Server } from 'node:http';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { mintDelegatedToken } from '../../packages/credentials/src/index.ts';
import { createAction } from '@gatehouse/testing';
import { freePort } from '@gatehouse/test-harness';
import { executionsQueue, jobOptionsFor, resetTestFaultsForTests } from '@gatehouse/contracts';
import {
  breakerFor,
  CircuitState,
  BREAKER_CONSECUTIVE_FAILURES,
  BREAKER_HALF_OPEN_AFTER_MS,
  issueRefund,
  processExecution,
  type TestHooks,
} from '@gatehouse/executor';
import type { SupportBundle } from '../../packages/policy/src/index.ts';
import { BUNDLES, EXECUTIONS_QUEUE, RESULTS_QUEUE, startHarness, waitFor, type Harness } from '../executor/support/harness.ts';
import { executorEnv, startExecutor, type ExecutorProcess } from '../executor/support/processes.ts';
import { TcpCut } from '@gatehouse/test-harness';

// Downstream controls shown load-bearing (issue #17): the idempotency key the payments adapter
// sends, and the payments ledger's own ceiling — each run as designed and with the control
// removed by a test-only switch. Then coded paths no test reached: an expired delegated token,
// the payments circuit breaker through open, shedding, half-open and closed, and a refused
// connection (nothing sent: held and repeated, never failed_unknown). Effects are read back from
// the payments ledger and its request log; the executor is the real processExecution over a
// test database, staging the real app on a port.

let h: Harness;
const savedEnv = process.env.GATEHOUSE_ENV;
const running: ExecutorProcess[] = [];
beforeAll(async () => {
  h = await startHarness();
});
afterEach(async () => {
  await fetch(`${h.stagingUrl}/faults`, { method: 'DELETE' });
  delete process.env.GATEHOUSE_TEST_DISABLE_DOWNSTREAM_CEILING;
  if (savedEnv === undefined) delete process.env.GATEHOUSE_ENV;
  else process.env.GATEHOUSE_ENV = savedEnv;
  resetTestFaultsForTests();
});
afterAll(async () => {
  await Promise.all(running.map((p) => p.stop(2000)));
  await h?.close();
});

const hooks = (over: Partial<TestHooks>): TestHooks => ({ ...h.deps().hooks, ...over });

describe('control: the downstream idempotency key', () => {
  it('designed: the payments ledger commits and the response is lost; the retry carries the same key — one refund', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { orderId, amountCents: 2100 });
    await h.arm({ target: 'payments', mode: 'commit_then_lose_response', times: 1 });
    expect(await processExecution(a.job, h.deps())).toBe('succeeded');
    const posts = await h.requests(orderId);
    expect(posts.map((r) => [r.status, r.reason])).toEqual([
      [201, 'fault:commit_then_lose_response'],
      [200, 'idempotent_replay'],
    ]);
    expect(await h.refunds(orderId)).toEqual([expect.objectContaining({ idempotencyKey: a.operationKey, amountCents: 2100 })]);
  });

  it('control removed (GATEHOUSE_TEST_DISABLE_IDEMPOTENCY_KEY): a fresh key per attempt pays the lost-response refund twice', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { orderId, amountCents: 2100 });
    await h.arm({ target: 'payments', mode: 'commit_then_lose_response', times: 1 });
    expect(await processExecution(a.job, h.deps({ hooks: hooks({ disableIdempotencyKey: true }) }))).toBe('succeeded');
    const paid = await h.refunds(orderId);
    expect(paid).toHaveLength(2);
    expect(paid.map((r) => r.amountCents)).toEqual([2100, 2100]);
    expect(new Set(paid.map((r) => r.idempotencyKey)).size).toBe(2);
    expect((await h.requests(orderId)).map((r) => r.status)).toEqual([201, 201]);
  });
});

/** The active support bundle with its per-refund maximum raised past the user's 50000 ceiling: a wrong policy. */
const wrongPolicy = (): typeof BUNDLES => {
  const support = structuredClone(BUNDLES.support) as SupportBundle;
  support.limits.maxRefundCents = 500_000;
  return { ...BUNDLES, support };
};

describe('control: the payments ledger’s own ceiling', () => {
  it('designed: a wrong policy lets an approved 60000 refund through; the payments ledger refuses it (403 ceiling_exceeded), nothing paid', async () => {
    const orderId = await h.newOrder(100_000);
    const a = await createAction(h.db, { orderId, amountCents: 60_000 });
    expect(await processExecution(a.job, h.deps({ bundles: wrongPolicy() }))).toBe('failed');
    expect((await h.requests(orderId)).map((r) => [r.status, r.reason])).toEqual([[403, 'ceiling_exceeded']]);
    expect(await h.refunds(orderId)).toEqual([]);
    const action = await h.db.selectFrom('actions').select('status').where('id', '=', a.actionId).executeTakeFirstOrThrow();
    expect(action.status).toBe('denied');
  });

  it('control removed (GATEHOUSE_TEST_DISABLE_DOWNSTREAM_CEILING): the same wrong policy pays 60000, above the 50000 ceiling', async () => {
    // Staging runs in this process: the switches are read once (reset here), and only with GATEHOUSE_ENV=test.
    Object.assign(process.env, { GATEHOUSE_ENV: 'test', GATEHOUSE_TEST_DISABLE_DOWNSTREAM_CEILING: '1' });
    resetTestFaultsForTests();
    const orderId = await h.newOrder(100_000);
    const a = await createAction(h.db, { orderId, amountCents: 60_000 });
    expect(await processExecution(a.job, h.deps({ bundles: wrongPolicy() }))).toBe('succeeded');
    expect(await h.refunds(orderId)).toEqual([expect.objectContaining({ amountCents: 60_000 })]);
  });
});

describe('coded path: an expired delegated token is refused downstream', () => {
  /** A delegated token for `orderId`'s refund of 1000 under `key`, minted as if the clock read `at` (a slow clock: skew). */
  async function tokenMintedAt(at: number, key: string, orderId: string): Promise<string> {
    const { epoch } = await h.db.selectFrom('credential_epochs').select('epoch').where('id', '=', 1).executeTakeFirstOrThrow();
    return mintDelegatedToken(
      {
        sub: 'rep-ana',
        act: { sub: 'support-agent' },
        aud: 'payments',
        scope: 'refund:create',
        tenant: 'quillfeather',
        ceiling: 50_000,
        epoch,
        op: key,
        fence: 1,
        target: { orderId, amountCents: 1000 },
      },
      h.delegationKeys.signing,
      at,
    );
  }

  const post = (token: string, orderId: string, key: string): Promise<Response> =>
    fetch(`${h.stagingUrl}/ledger/refunds`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}`, 'idempotency-key': key, 'x-fencing-token': '1' },
      body: JSON.stringify({ orderId, amountCents: 1000, reason: 'expired token test' }),
    });

  it('a token minted 61 s ago (60 s lifetime; or a minting clock 61 s slow) is 401 invalid_token:ERR_JWT_EXPIRED, no refund; a fresh one is accepted', async () => {
    const orderId = await h.newOrder();
    const key = `expired-${orderId}`;
    const stale = await post(await tokenMintedAt(Date.now() - 61_000, key, orderId), orderId, key);
    expect(stale.status).toBe(401);
    expect(((await stale.json()) as { error: { reason: string } }).error.reason).toBe('invalid_token:ERR_JWT_EXPIRED');
    expect(await h.refunds(orderId)).toEqual([]);
    // The same request with a token minted now is paid: the refusal above was the expiry alone.
    const fresh = await post(await tokenMintedAt(Date.now(), key, orderId), orderId, key);
    expect(fresh.status).toBe(201);
    expect((await h.requests(orderId)).map((r) => [r.status, r.reason])).toEqual([
      [401, 'invalid_token:ERR_JWT_EXPIRED'],
      [201, null],
    ]);
    expect(await h.refunds(orderId)).toHaveLength(1);
  });
});

describe('coded path: the payments circuit breaker under a 5xx storm', () => {
  it('opens after consecutive 5xx, sheds calls while open (no request sent), half-opens after its delay and closes on a success', async () => {
    const breaker = breakerFor('payments', 'quillfeather');
    expect(breaker.state).toBe(CircuitState.Closed);
    const changes: CircuitState[] = [];
    const sub = breaker.onStateChange((s) => changes.push(s));
    try {
      await h.arm({ target: 'payments', mode: 'server_error', times: 1000, status: 503 });
      // 1st execution: its 4 capped attempts all 503; 2nd: one more 503 reaches the threshold (5).
      const stormA = await h.newOrder();
      const a1 = await createAction(h.db, { orderId: stormA, amountCents: 1100 });
      expect(await processExecution(a1.job, h.deps())).toBe('failed');
      expect((await h.requests(stormA)).map((r) => r.status)).toEqual([503, 503, 503, 503]);
      const stormB = await h.newOrder();
      const a2 = await createAction(h.db, { orderId: stormB, amountCents: 1100 });
      expect(await processExecution(a2.job, h.deps())).toBe('failed');
      expect(await h.requests(stormB)).toHaveLength(BREAKER_CONSECUTIVE_FAILURES - 4);
      expect(breaker.state).toBe(CircuitState.Open);
      const openedAt = Date.now();

      // Open: the next execution is shed — not one request reaches the payments ledger.
      const shed = await h.newOrder();
      const a3 = await createAction(h.db, { orderId: shed, amountCents: 1100 });
      expect(await processExecution(a3.job, h.deps())).toBe('failed');
      expect(await h.requests(shed)).toEqual([]);
      const op = await h.db
        .selectFrom('operations')
        .select(['status', 'error'])
        .where('key', '=', a3.operationKey)
        .executeTakeFirstOrThrow();
      expect(op).toEqual({ status: 'failed', error: 'circuit_open' });

      // The storm ends; once the half-open delay has passed, one probe goes through and closes it.
      await fetch(`${h.stagingUrl}/faults`, { method: 'DELETE' });
      await waitFor('the half-open delay', async () => Date.now() - openedAt > BREAKER_HALF_OPEN_AFTER_MS, 60_000, 200);
      const probe = await h.newOrder();
      const a4 = await createAction(h.db, { orderId: probe, amountCents: 1100 });
      expect(await processExecution(a4.job, h.deps())).toBe('succeeded');
      expect(await h.refunds(probe)).toHaveLength(1);
      expect(changes).toEqual([CircuitState.Open, CircuitState.HalfOpen, CircuitState.Closed]);
      expect(await h.refunds(stormA)).toEqual([]);
      expect(await h.refunds(stormB)).toEqual([]);
      expect(await h.refunds(shed)).toEqual([]);
    } finally {
      sub.dispose();
    }
  });
});

/**
 * A payments ledger stand-in: 503 for `O-STORM`, 201 with a refund id for any other order; counts
 * the requests per order. Stands in for a downstream failing one tenant's calls only (a shard of
 * its own, say), which the synthetic ledger's fault board cannot target.
 */
async function stormForOneOrder(): Promise<{ url: string; seen: Map<string, number>; server: Server }> {
  const seen = new Map<string, number>();
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      const orderId = String((JSON.parse(body) as { orderId: string }).orderId);
      seen.set(orderId, (seen.get(orderId) ?? 0) + 1);
      const [status, answer] = orderId === 'O-STORM' ? [503, { error: { reason: 'storm' } }] : [201, { refundId: `rf-${orderId}` }];
      res.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(answer));
    });
  });
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  const { port } = server.address() as { port: number };
  return { url: `http://127.0.0.1:${port}`, seen, server };
}

describe('control: the circuit breaker is per tenant (ADR 0763)', () => {
  it("one tenant's 5xx storm opens its own breaker and sheds its calls; another tenant's refund to the same downstream is still sent and paid", async () => {
    const ledger = await stormForOneOrder();
    const refund = (tenant: string, orderId: string, n: number) =>
      issueRefund({
        stagingUrl: ledger.url,
        ledger: h.db,
        workflow: { id: `wf-storm-${tenant}`, tenant },
        args: { orderId, amountCents: 1000, reason: 'storm' },
        operationKey: `wf-storm-${tenant}:action:${n}`,
        fencingToken: 1,
        token: async () => 'unused',
        deadlineMs: Date.now() + 20_000,
        baseline: null,
      });
    try {
      // northwind: 4 capped attempts, then 1 more — five consecutive 503s open its breaker.
      expect((await refund('northwind', 'O-STORM', 1)).status).toBe('failed');
      expect((await refund('northwind', 'O-STORM', 2)).status).toBe('failed');
      expect(ledger.seen.get('O-STORM')).toBe(BREAKER_CONSECUTIVE_FAILURES);
      expect(breakerFor('payments', 'northwind').state).toBe(CircuitState.Open);
      // Open: northwind's next call is shed, nothing sent (not even for an order that would be paid).
      expect(await refund('northwind', 'O-NW-CALM', 3)).toMatchObject({ status: 'failed', reason: 'circuit_open' });
      expect(ledger.seen.get('O-NW-CALM')).toBeUndefined();
      // quillfeather's refund meanwhile is sent once and paid: one breaker per downstream would shed it.
      expect(await refund('quillfeather', 'O-QF-CALM', 1)).toMatchObject({ status: 'succeeded', evidenceRef: 'rf-O-QF-CALM' });
      expect(ledger.seen.get('O-QF-CALM')).toBe(1);
      expect(breakerFor('payments', 'quillfeather').state).toBe(CircuitState.Closed);
    } finally {
      ledger.server.close();
    }
  });
});

describe('coded path: a refused connection sent nothing — safe to repeat, not failed_unknown', () => {
  it('the payments adapter against a closed port: retry_safe after its capped attempts', async () => {
    const closed = `http://127.0.0.1:${await freePort()}`;
    const result = await issueRefund({
      stagingUrl: closed,
      ledger: h.db,
      workflow: { id: 'wf-refused', tenant: 'quillfeather' },
      args: { orderId: 'O-1002', amountCents: 1000, reason: 'refused' },
      operationKey: 'wf-refused:action:1',
      fencingToken: 1,
      token: async () => 'unused',
      deadlineMs: Date.now() + 20_000,
      baseline: null,
    });
    expect(result).toMatchObject({ status: 'retry_safe', reason: 'connection_refused' });
  });

  it('refusals do not open the circuit breaker: three refused writes in a row (12 attempts) are each retry_safe, none shed as failed', async () => {
    const closed = `http://127.0.0.1:${await freePort()}`;
    const outcomes: string[] = [];
    for (let n = 1; n <= 3; n++) {
      const r = await issueRefund({
        stagingUrl: closed,
        ledger: h.db,
        workflow: { id: 'wf-refused', tenant: 'quillfeather' },
        args: { orderId: 'O-1002', amountCents: 1000, reason: 'refused' },
        operationKey: `wf-refused:action:${n}`,
        fencingToken: 1,
        token: async () => 'unused',
        deadlineMs: Date.now() + 20_000,
        baseline: null,
      });
      outcomes.push(`${r.status} ${r.attempts}`);
    }
    expect(outcomes).toEqual(['retry_safe 4', 'retry_safe 4', 'retry_safe 4']);
    expect(breakerFor('payments', 'quillfeather').state).toBe(CircuitState.Closed);
  });

  /**
   * Starts an executor process (concurrency 1) that blocks 3 s after its claim, before it
   * dispatches, against the staging app through a TCP proxy; queues `a`'s job, cuts the proxy
   * inside that block and waits until the refused dispatch is released as safe to repeat. The
   * caller opens `proxy` again when it wants the repeat, and cuts it at the end.
   */
  async function refusedAfterClaim(a: Awaited<ReturnType<typeof createAction>>, orderId: string) {
    const proxy = new TcpCut(await freePort(), { host: '127.0.0.1', port: Number(new URL(h.stagingUrl).port) });
    await proxy.open();
    const ex = startExecutor(
      executorEnv(
        { databaseUrl: h.tdb.url, prefix: h.prefix, stagingUrl: `http://127.0.0.1:${proxy.port}`, signingKeyPath: h.delegationKeyPath },
        { EXECUTOR_CONCURRENCY: '1', GATEHOUSE_TEST_BLOCK_BEFORE_DISPATCH_MS: '3000', EXECUTOR_LOCK_MS: '30000', LEASE_MS: '30000' },
      ),
    );
    running.push(ex);
    await ex.ready;
    await h.queues.get(EXECUTIONS_QUEUE).add(executionsQueue.jobName, a.job, { ...jobOptionsFor(EXECUTIONS_QUEUE), jobId: a.jobId });
    const opRow = () =>
      h.db.selectFrom('operations').select(['status', 'error', 'fencing_token']).where('key', '=', a.operationKey).executeTakeFirst();
    await waitFor('the claim', async () => (await opRow())?.status === 'running', 60_000, 20);
    await proxy.cut();
    const held = await waitFor(
      'the refused dispatch to be released as safe to repeat',
      async () => {
        const o = await opRow();
        return o && o.status !== 'running' ? o : null;
      },
      60_000,
    ).catch(async (e: unknown) => {
      throw new Error(`${(e as Error).message}\n${JSON.stringify(await opRow())}\n${ex.output().slice(-3000)}`);
    });
    expect(held).toMatchObject({ status: 'pending', error: 'connection_refused' });
    expect(await h.requests(orderId)).toEqual([]); // nothing was sent
    return { proxy, ex, opRow };
  }

  it(
    'the payments port closes between the claim and the dispatch: the step is held, then repeated once the port is back — one refund, succeeded',
    { timeout: 120_000 },
    async () => {
      const orderId = await h.newOrder();
      const a = await createAction(h.db, { orderId, amountCents: 1300 });
      const { proxy, ex, opRow } = await refusedAfterClaim(a, orderId);
      try {
        await proxy.open();
        const done = await waitFor(
          'the repeat to succeed',
          async () => {
            const o = await opRow();
            return o?.status === 'succeeded' || o?.status === 'failed_unknown' || o?.status === 'failed' ? o : null;
          },
          90_000,
        ).catch((e: unknown) => {
          throw new Error(`${(e as Error).message}\n${ex.output().slice(-2000)}`);
        });
        expect(done.status).toBe('succeeded');
        expect(await h.refunds(orderId)).toEqual([expect.objectContaining({ idempotencyKey: a.operationKey, amountCents: 1300 })]);
      } finally {
        await proxy.cut();
      }
    },
  );

  it(
    'held so, it does not run on its used approval once that approval passed its maximum age (ADR 0707): approval_expired, nothing sent',
    { timeout: 120_000 },
    async () => {
      const orderId = await h.newOrder();
      // 60.00 needs a lead's approval (R7); the seeded approval is approved, and the claim consumes it.
      const a = await createAction(h.db, { orderId, amountCents: 6000 });
      const { proxy, ex } = await refusedAfterClaim(a, orderId);
      try {
        const approval = h.db.selectFrom('approvals').select(['status']).where('id', '=', a.approvalId!);
        expect(await approval.executeTakeFirstOrThrow()).toEqual({ status: 'used' });
        // The hold outlives the approval's maximum age (shortened here); then the port is back.
        await h.db
          .updateTable('approvals')
          .set({ expires_at: new Date(Date.now() - 1000) })
          .where('id', '=', a.approvalId!)
          .execute();
        await proxy.open();
        const result = await waitFor(
          'the repeat to answer the call',
          async () => (await h.queues.get(RESULTS_QUEUE).getJob(`result_${a.workflowId}_${a.callId}`)) ?? null,
          90_000,
        ).catch((e: unknown) => {
          throw new Error(`${(e as Error).message}\n${ex.output().slice(-2000)}`);
        });
        expect(JSON.stringify(result.data)).toContain('approval_expired');
        // Zero calls downstream on the stale approval.
        expect(await h.requests(orderId)).toEqual([]);
        expect(await h.refunds(orderId)).toEqual([]);
      } finally {
        await proxy.cut();
      }
    },
  );
});

describe('the test-only switches of these controls', () => {
  it('are refused outside GATEHOUSE_ENV=test', async () => {
    const { ceilingCheckRemoved } = await import('@gatehouse/staging');
    expect(() => ceilingCheckRemoved({ GATEHOUSE_TEST_DISABLE_DOWNSTREAM_CEILING: '1', GATEHOUSE_ENV: 'production' })).toThrow(
      /GATEHOUSE_ENV=test/,
    );
    expect(ceilingCheckRemoved({ GATEHOUSE_TEST_DISABLE_DOWNSTREAM_CEILING: '1', GATEHOUSE_ENV: 'test' })).toBe(true);
    expect(ceilingCheckRemoved({})).toBe(false);
  });
});
