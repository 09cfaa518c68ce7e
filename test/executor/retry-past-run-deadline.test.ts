import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createAction } from '@gatehouse/testing';
import { processExecution } from '@gatehouse/executor';
import { startHarness, type Harness } from './support/harness.ts';

// docs/product/hard-cases.md#rate-limits-and-5xx-storms: a 429's one retry waits what it asks
// for, "never past the run's deadline" — a wait that would end past it is not waited for
// (`rate_limited_past_deadline`); a 5xx storm's backoff keeps within the run's overall deadline
// too (services/executor/test/idempotent-write-retries.test.ts). The run's deadline is its working-time budget (`budgets.deadline_at`), which can end well
// before the executor's own per-execution bound (10 s here): a refund sent after it is an effect
// of a run whose time was up (docs/decisions/0772-a-write-keeps-within-its-runs-deadline.md).
// Real ledger and staging payments ledger; the effect is asserted at the ledger's read-back.

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(async () => {
  await h?.close();
});

describe("an idempotent write's retries keep within the run's deadline", () => {
  it('429 whose Retry-After ends past the run deadline (but within the execution bound): not waited for, nothing refunded', async () => {
    const orderId = await h.newOrder();
    // The run has 3 s of working time left; the ledger asks for 8 s; the execution bound is 10 s.
    const a = await createAction(h.db, { orderId, amountCents: 2600, budgetMs: 3000 });
    await h.arm({ target: 'payments', mode: 'rate_limit', retryAfterMs: 8000, times: 1 });

    expect(await processExecution(a.job, h.deps())).toMatch(/^failed/);

    expect((await h.requests(orderId)).map((r) => r.status)).toEqual([429]);
    const op = await h.db.selectFrom('operations').select(['status', 'error']).where('key', '=', a.operationKey).executeTakeFirstOrThrow();
    expect(op).toEqual({ status: 'failed', error: 'rate_limited_past_deadline' });
    expect(await h.refunds(orderId)).toEqual([]);
  });

  it('429 whose Retry-After ends within the run deadline: one retry with the same key, one refund', async () => {
    const orderId = await h.newOrder();
    const a = await createAction(h.db, { orderId, amountCents: 2700, budgetMs: 60_000 });
    await h.arm({ target: 'payments', mode: 'rate_limit', retryAfterMs: 200, times: 1 });

    expect(await processExecution(a.job, h.deps())).toBe('succeeded');
    expect((await h.requests(orderId)).map((r) => r.status)).toEqual([429, 201]);
    expect(await h.refunds(orderId)).toHaveLength(1);
  });
});
