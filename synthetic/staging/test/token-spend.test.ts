import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { sql } from 'kysely';
import { newKey, startStaging, token, type StagingHarness } from './support/staging.harness.ts';

// ADR 0764: a request's token spend (its fence and its jti) and its effect commit in one
// transaction; an effect that fails returns to a savepoint, and the spend commits alone.

let h: StagingHarness;
beforeAll(async () => {
  h = await startStaging();
});
afterAll(async () => {
  await h?.stop();
});

/**
 * Counts the durable commits the process makes while `fn` runs: every COMMIT, and every write
 * statement sent outside a transaction (each is a transaction of its own). Counted at the driver,
 * as the benchmark's round-trip hook does; the staging app runs in this process.
 */
async function commitsDuring(fn: () => Promise<void>): Promise<number> {
  const query = pg.Client.prototype.query;
  const open = new WeakSet<object>();
  let commits = 0;
  pg.Client.prototype.query = function (this: object, ...args: unknown[]) {
    const first = args[0] as string | { text?: string } | undefined;
    const text = (typeof first === 'string' ? first : (first?.text ?? '')).trimStart().toLowerCase();
    if (text.startsWith('begin')) open.add(this);
    else if (text.startsWith('commit')) {
      open.delete(this);
      commits++;
    } else if (text.startsWith('rollback') && !text.startsWith('rollback to')) open.delete(this);
    else if (!open.has(this) && /^(insert|update|delete|with)\b/.test(text)) commits++;
    return (query as (...a: unknown[]) => unknown).apply(this, args);
  } as typeof query;
  try {
    await fn();
  } finally {
    pg.Client.prototype.query = query;
  }
  return commits;
}

async function pay(auth: string, key: string, amountCents: number): Promise<{ status: number; reason?: string }> {
  const res = await fetch(`${h.baseUrl}/ledger/refunds`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${auth}`, 'idempotency-key': key, 'x-fencing-token': '1' },
    body: JSON.stringify({ orderId: 'O-1001', amountCents, reason: 'damaged item' }),
  });
  const body = (await res.json()) as { error?: { reason?: string } };
  return { status: res.status, ...(body.error?.reason ? { reason: body.error.reason } : {}) };
}

const mint = (key: string, amountCents: number) => token({ op: key, fence: 1, target: { orderId: 'O-1001', amountCents } });

async function refundRows(key: string): Promise<number[]> {
  const r = await sql<{ amount_cents: number }>`select amount_cents from staging.refunds where idempotency_key = ${key}`.execute(h.db);
  return r.rows.map((x) => x.amount_cents);
}

describe("the token's spend and the effect (ADR 0764)", () => {
  it('a refund commits its fence, its jti and the refund in one transaction (and its request-log entry)', async () => {
    const key = newKey();
    const auth = await mint(key, 100);
    let answer: { status: number } | undefined;
    const commits = await commitsDuring(async () => {
      answer = await pay(auth, key, 100);
    });
    expect(answer?.status).toBe(201);
    expect(commits).toBe(2);
    expect(await refundRows(key)).toEqual([100]);
  });

  it('an effect refused after its writes began is rolled back, and its token stays spent', async () => {
    const key = newKey();
    expect((await pay(await mint(key, 100), key, 100)).status).toBe(201);
    // Same key, another amount: the ledger's fence row is written, then the key's reuse refused.
    const other = await mint(key, 200);
    expect(await pay(other, key, 200)).toEqual({ status: 409, reason: 'idempotency_key_reuse' });
    expect(await refundRows(key)).toEqual([100]);
    // The refused request spent its jti: the same token is refused as replayed, not judged again.
    expect(await pay(other, key, 200)).toEqual({ status: 403, reason: 'token_replayed' });
  });

  it('a refusal before the effect (the ceiling) keeps the token spent and writes no refund', async () => {
    const key = newKey();
    const auth = await mint(key, 60_000);
    expect(await pay(auth, key, 60_000)).toEqual({ status: 403, reason: 'ceiling_exceeded' });
    expect(await pay(auth, key, 60_000)).toEqual({ status: 403, reason: 'token_replayed' });
    expect(await refundRows(key)).toEqual([]);
  });
});
