import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { createDb, type Db, type Trx } from '@gatehouse/ledger';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { bumpEpoch } from '@gatehouse/operations';

// docs/decisions/0685-the-epoch-fences-the-effect.md: the systems of record write each effect while
// holding the epoch row FOR SHARE (synthetic/staging withEpochFence). A bump waits for the effects
// in flight; an effect arriving while the bump waits must queue behind it and read the new epoch —
// not join the share lock and commit an old-epoch effect before the bump (under steady traffic the
// bump could then wait on and on). Barriers: a share holder the test controls; no sleeps decide
// the order.

const REPEAT = 10;

let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(async () => {
  await t?.drop();
});

/** The statement staging's epoch fence runs (readRevocationEpoch with lock 'share'), in `trx`. */
async function shareLock(trx: Trx): Promise<number> {
  const r = await sql<{ epoch: number }>`SELECT epoch FROM public.credential_epochs WHERE id = 1 FOR SHARE`.execute(trx);
  return Number(r.rows[0]!.epoch);
}

/**
 * An effect's transaction on its own connection: `body` runs in it (its backend pid passed first);
 * it commits when `release` is called.
 */
function effect<T>(db: Db, body: (trx: Trx) => Promise<T>) {
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let pid!: (n: number) => void;
  const pidOf = new Promise<number>((r) => (pid = r));
  let value: T | undefined;
  let settled = false;
  const done = db.transaction().execute(async (trx) => {
    pid(Number((await sql<{ p: number }>`select pg_backend_pid() as p`.execute(trx)).rows[0]!.p));
    value = await body(trx);
    settled = true;
    await gate;
  });
  return { pid: pidOf, release, done, read: () => (settled ? value : undefined) };
}

/** Whether backend `pid` waits on a lock; polled until it does or `finished()` (then false). */
async function waitsOnLock(db: Db, pid: number, finished: () => boolean): Promise<boolean> {
  for (;;) {
    if (finished()) return false;
    const r = await sql<{ w: string | null }>`select wait_event_type as w from pg_stat_activity where pid = ${pid}`.execute(db);
    if (r.rows[0]?.w === 'Lock') return true;
    await new Promise((res) => setTimeout(res, 5));
  }
}

describe('epoch bump and the share lock of effects in flight', () => {
  it(`an effect arriving while a bump waits queues behind the bump and reads the new epoch, ×${REPEAT}`, async () => {
    const [a, b, c] = [createDb(t.url, 1), createDb(t.url, 1), createDb(t.url, 1)];
    const open: Array<ReturnType<typeof effect>> = []; // released on a failure, so the pools close
    try {
      for (let i = 0; i < REPEAT; i++) {
        const inFlight = effect(a, shareLock);
        open.push(inFlight);
        await inFlight.pid;
        while (inFlight.read() === undefined) await new Promise((res) => setTimeout(res, 1));
        const before = inFlight.read()!;
        let bumped = false;
        const bump = bumpEpoch(c, 'ops-gus', 'k'.repeat(32)).then((e) => ((bumped = true), e));
        // The bump is under way: it waits for the effect in flight.
        expect(await waitsOnLockAny(t.db, () => bumped), 'the bump did not wait for the effect in flight').toBe(true);
        const late = effect(b, shareLock);
        open.push(late);
        const lateWaits = await waitsOnLock(t.db, await late.pid, () => late.read() !== undefined);
        expect(lateWaits, `round ${i}: the late effect read epoch ${late.read()}`).toBe(true);
        inFlight.release();
        await inFlight.done;
        const epoch = await bump;
        while (late.read() === undefined) await new Promise((res) => setTimeout(res, 1));
        expect([epoch, late.read()]).toEqual([before + 1, before + 1]);
        late.release();
        await late.done;
      }
    } finally {
      for (const e of open) e.release();
      await Promise.all(open.map((e) => e.done.catch(() => undefined)));
      await Promise.all([a.destroy(), b.destroy(), c.destroy()]);
    }
  });
});

/** Whether some backend of the database waits on a lock; polled until one does or `finished()` (then false). */
async function waitsOnLockAny(db: Db, finished: () => boolean): Promise<boolean> {
  for (;;) {
    if (finished()) return false;
    const r = await sql<{ n: number }>`select count(*)::int as n from pg_stat_activity
      where datname = current_database() and wait_event_type = 'Lock'`.execute(db);
    if (r.rows[0]!.n > 0) return true;
    await new Promise((res) => setTimeout(res, 5));
  }
}
