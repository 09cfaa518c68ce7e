import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { sql } from 'kysely';
import type { BindingTarget } from '@gatehouse/credentials';
import { startStaging, token, type StagingHarness } from './support/staging.harness.ts';

// ADR 0685: an effect whose token carries an epoch below one a committed bump raised is never
// written, however the bump and the request interleave. Barriers are row locks the test holds:
// the request is stopped after it verified its token (epoch read) and before its effect, or inside
// its effect, and the test moves the epoch at that point; no sleeps decide the order.

const REPEAT = 10;

/** One effect request with a bound token: path, body, the binding target and the headers. */
interface EffectCall {
  path: string;
  body: Record<string, unknown>;
  aud: string;
  scope: string;
  target: BindingTarget;
  sub?: string;
  /** Sent as `Idempotency-Key` and minted as the token's `op`; null for routes without a key. */
  key: string | null;
}

/** An answer's JSON: an effect's ids, or `{error: {reason}}`. */
type Answer = { error?: { reason?: string }; refundId?: string; shipmentId?: string };

const newOp = (p: string): string => `${p}-${randomBytes(6).toString('hex')}:action:1`;

async function send(h: StagingHarness, call: EffectCall, epoch: number, op: string): Promise<{ status: number; body: Answer }> {
  const auth = await token({
    aud: call.aud,
    scope: call.scope,
    epoch,
    op,
    fence: 1,
    target: call.target,
    ...(call.sub ? { sub: call.sub } : {}),
  });
  const headers: Record<string, string> = { 'content-type': 'application/json', authorization: `Bearer ${auth}`, 'x-fencing-token': '1' };
  if (call.key !== null) headers['idempotency-key'] = call.key;
  const res = await fetch(`${h.baseUrl}${call.path}`, { method: 'POST', headers, body: JSON.stringify(call.body) });
  return { status: res.status, body: (await res.json()) as Answer };
}

/** Sends `call` with a fresh token of `epoch` and expects success (a prerequisite, no barrier). */
async function must(h: StagingHarness, call: EffectCall, epoch: number): Promise<Answer> {
  const res = await send(h, call, epoch, call.key ?? newOp('pre'));
  expect(res.status, JSON.stringify(res.body)).toBe(201);
  return res.body;
}

const refundCall = (key = newOp('rf')): EffectCall => ({
  path: '/ledger/refunds',
  body: { orderId: 'O-1001', amountCents: 100, reason: 'damaged' },
  aud: 'payments',
  scope: 'refund:create',
  target: { orderId: 'O-1001', amountCents: 100 },
  key,
});

/** The seven effect routes; `prepare` makes what the effect acts on (under the current epoch). */
const ROUTES: Array<{ name: string; prepare(h: StagingHarness, epoch: number): Promise<EffectCall> }> = [
  { name: 'refund', prepare: async () => refundCall() },
  {
    name: 'refund reversal',
    async prepare(h, epoch) {
      const refundId = (await must(h, refundCall(), epoch)).refundId!;
      const key = newOp('rv');
      return {
        path: `/ledger/refunds/${refundId}/reversals`,
        body: { reason: 'undo' },
        aud: 'payments',
        scope: 'refund:reverse',
        target: { refundId },
        key,
      };
    },
  },
  {
    name: 'reship',
    prepare: async () => ({
      path: '/orders/O-1001/shipments',
      body: {},
      aud: 'orders',
      scope: 'reship:create',
      target: { orderId: 'O-1001' },
      key: null,
    }),
  },
  {
    name: 'shipment cancel',
    async prepare(h, epoch) {
      const reship: EffectCall = {
        path: '/orders/O-1001/shipments',
        body: {},
        aud: 'orders',
        scope: 'reship:create',
        target: { orderId: 'O-1001' },
        key: null,
      };
      const shipmentId = (await must(h, reship, epoch)).shipmentId!;
      return {
        path: `/orders/O-1001/shipments/${shipmentId}/cancel`,
        body: {},
        aud: 'orders',
        scope: 'shipment:cancel',
        target: { orderId: 'O-1001', shipmentId },
        key: newOp('cs'),
      };
    },
  },
  {
    name: 'mail',
    prepare: async () => ({
      path: '/mail/messages',
      body: { orderId: 'O-1001', template: 'apology' },
      aud: 'mail',
      scope: 'mail:send',
      target: { orderId: 'O-1001', template: 'apology' },
      key: null,
    }),
  },
  { name: 'change schedule', prepare: async () => scheduleCall() },
  {
    name: 'change cancel',
    async prepare(h, epoch) {
      const scheduled = scheduleCall();
      await must(h, scheduled, epoch);
      const operationKey = scheduled.key!;
      return {
        path: `/changes/operations/${encodeURIComponent(operationKey)}/cancel`,
        body: { reason: 'not needed' },
        aud: 'changes',
        scope: 'change:cancel',
        target: { operationKey },
        sub: 'eng-lou',
        key: newOp('cc'),
      };
    },
  },
];

function scheduleCall(): EffectCall {
  const target = { planId: 'plan_abcdefgh12345678', changeId: 'CHG-101', window: 'manual-window', note: null };
  return { path: '/changes/operations', body: target, aud: 'changes', scope: 'change:schedule', target, sub: 'eng-lou', key: newOp('sc') };
}

/** Rows of every effect table (cancellations counted by their mark), to see that nothing was written. */
async function effects(h: StagingHarness): Promise<Record<string, number>> {
  const r = await sql<Record<string, string>>`select
    (select count(*) from staging.refunds) as refunds,
    (select count(*) from staging.refund_reversals) as reversals,
    (select count(*) from staging.shipments) as shipments,
    (select count(*) from staging.shipments where cancelled_at is not null) as shipment_cancels,
    (select count(*) from staging.messages) as messages,
    (select count(*) from staging.change_operations) as changes,
    (select count(*) from staging.change_operations where cancelled_at is not null) as change_cancels`.execute(h.db);
  return Object.fromEntries(Object.entries(r.rows[0]!).map(([k, v]) => [k, Number(v)]));
}

async function currentEpoch(h: StagingHarness): Promise<number> {
  const r = await sql<{ epoch: number }>`select epoch from public.credential_epochs where id = 1`.execute(h.epochDb);
  return Number(r.rows[0]!.epoch);
}

/** A client holding a transaction open: the barrier's owner. */
async function client(url: string): Promise<pg.Client & { pid: number }> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  const pid = Number((await c.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid);
  return Object.assign(c, { pid });
}

/** Waits until some backend of `db` other than `except` waits on a lock (the request reached the barrier). */
async function untilSomeoneWaits(h: StagingHarness, url: string, except: number[] = []): Promise<void> {
  const name = new URL(url).pathname.slice(1);
  for (;;) {
    const r = await sql<{ n: string }>`select count(*) as n from pg_stat_activity
      where datname = ${name} and wait_event_type = 'Lock' and pid <> all(${except})`.execute(h.db);
    if (Number(r.rows[0]!.n) > 0) return;
    await new Promise((res) => setTimeout(res, 5));
  }
}

/** Raises the epoch as `gatehouse epoch bump` does (an UPDATE of row 1), on `c`. */
async function bump(c: pg.Client): Promise<void> {
  await c.query('UPDATE public.credential_epochs SET epoch = epoch + 1 WHERE id = 1');
}

for (const epochDatabase of ['same', 'separate'] as const) {
  describe(`the epoch fence at the systems of record (epoch in the ${epochDatabase} database)`, () => {
    let h: StagingHarness;
    let bumper: pg.Client & { pid: number };
    beforeAll(async () => {
      h = await startStaging({ epochDatabase });
      bumper = await client(h.epochUrl);
    });
    afterAll(async () => {
      await bumper?.end();
      await h?.stop();
    });

    for (const route of ROUTES) {
      it(`${route.name}: a bump committed between the token's check and the effect refuses it (403 revoked_epoch, nothing written), ×${REPEAT}`, async () => {
        for (let i = 0; i < REPEAT; i++) {
          const epoch = await currentEpoch(h);
          const call = await route.prepare(h, epoch);
          const op = call.key ?? newOp('op');
          const before = await effects(h);
          // Barrier: the token binding's fence row for this op, inserted and not committed — the
          // request stops there, after its epoch read and before its effect.
          const barrier = await client(h.url);
          await barrier.query('BEGIN');
          await barrier.query(`INSERT INTO staging.fencing_tokens (target, idempotency_key, highest) VALUES ($1, $2, 0)`, [
            `delegation:${call.aud}`,
            op,
          ]);
          const answer = send(h, call, epoch, op);
          await untilSomeoneWaits(h, h.url, [barrier.pid]);
          await bump(bumper); // commits: the epoch is raised while the request is past its check
          await barrier.query('COMMIT');
          await barrier.end();
          const res = await answer;
          expect({ status: res.status, reason: res.body?.error?.reason }).toEqual({ status: 403, reason: 'revoked_epoch' });
          expect(await effects(h)).toEqual(before);
        }
      });
    }

    it(`a bump started while an effect is in flight waits for it: the effect commits first, ×${REPEAT}`, async () => {
      for (let i = 0; i < REPEAT; i++) {
        const epoch = await currentEpoch(h);
        const call = refundCall();
        // Barrier inside the effect: the ledger's own fence row for the key (refunds.create's first write).
        const barrier = await client(h.url);
        await barrier.query('BEGIN');
        await barrier.query(`INSERT INTO staging.fencing_tokens (target, idempotency_key, highest) VALUES ('payments', $1, 0)`, [call.key]);
        const answer = send(h, call, epoch, call.key!);
        await untilSomeoneWaits(h, h.url, [barrier.pid]);
        let bumped = false;
        const bumping = bump(bumper).then(() => {
          bumped = true;
        });
        // Either the bump finishes (it did not wait: the effect would commit after it) or it waits on a lock.
        const bumperState = async (): Promise<string> => {
          const r = await sql<{ w: string | null }>`select wait_event_type as w from pg_stat_activity where pid = ${bumper.pid}`.execute(
            h.db,
          );
          return r.rows[0]?.w ?? '';
        };
        while (!bumped && (await bumperState()) !== 'Lock') await new Promise((res) => setTimeout(res, 5));
        expect(bumped, 'the bump committed while an effect of the old epoch was in flight').toBe(false);
        await barrier.query('COMMIT');
        await barrier.end();
        const res = await answer;
        expect(res.status, JSON.stringify(res.body)).toBe(201);
        await bumping;
        expect(await currentEpoch(h)).toBe(epoch + 1);
      }
    });

    if (epochDatabase === 'separate')
      it(`the epoch's connection ends inside the effect: 503 epoch_unavailable, nothing written (the rollback's connection error does not replace the reason), ×${REPEAT}`, async () => {
        const epochName = new URL(h.epochUrl).pathname.slice(1);
        for (let i = 0; i < REPEAT; i++) {
          const epoch = await currentEpoch(h);
          const call = refundCall();
          const before = await effects(h);
          // Barrier inside the effect, as above; meanwhile the epoch transaction holds its lock.
          const barrier = await client(h.url);
          await barrier.query('BEGIN');
          await barrier.query(`INSERT INTO staging.fencing_tokens (target, idempotency_key, highest) VALUES ('payments', $1, 0)`, [
            call.key,
          ]);
          const answer = send(h, call, epoch, call.key!);
          await untilSomeoneWaits(h, h.url, [barrier.pid]);
          // A failover, an operator: the session holding the epoch's lock is ended mid-effect.
          await sql`select pg_terminate_backend(pid) from pg_stat_activity
            where datname = ${epochName} and state = 'idle in transaction' and query ilike '%credential_epochs%'`.execute(h.db);
          await barrier.query('COMMIT');
          await barrier.end();
          const res = await answer;
          expect({ status: res.status, reason: res.body?.error?.reason }).toEqual({ status: 503, reason: 'epoch_unavailable' });
          expect(await effects(h)).toEqual(before);
        }
      });
  });
}
