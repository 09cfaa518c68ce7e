// Two audit replicas — each with its own connection pool, as two processes have — chain and
// anchor the same outbox at once while producers keep appending, released together by a barrier
// and repeated: the chain stays intact, every outbox event is chained exactly once with no gap in
// seq, and every anchor of either replica matches the chain (the advisory lock in chainPending
// makes the chain single-writer across processes; ADR 0570, ADR 0684).
import { createPublicKey, type KeyObject } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDb, inTransaction, recordAudit, verifyAuditChain, type Db } from '@gatehouse/ledger';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { chainPending } from '../src/jobs/chain.writer.ts';
import { anchorHead, loadSigningKey } from '../src/domain/anchor.ts';

const ROUNDS = 5;
const PRODUCERS = 4;
const PER_PRODUCER = 15;

let t: TestDatabase;
let replicas: Db[];
let keyDir: string;
let key: KeyObject;

beforeAll(async () => {
  t = await createTestDatabase();
  replicas = [createDb(t.url, 4), createDb(t.url, 4)];
  keyDir = mkdtempSync(join(tmpdir(), 'gh-audit-replicas-'));
  key = loadSigningKey(join(keyDir, 'anchor.pem'));
});
afterAll(async () => {
  await Promise.all((replicas ?? []).map((r) => r.destroy()));
  await t?.drop();
  if (keyDir) rmSync(keyDir, { recursive: true, force: true });
});

/** A promise every one of `n` callers awaits; it resolves once all `n` have arrived. */
function barrier(n: number): () => Promise<void> {
  let arrived = 0;
  let release!: () => void;
  const all = new Promise<void>((r) => (release = r));
  return () => {
    if (++arrived === n) release();
    return all;
  };
}

/** One replica's loop: chain in small batches and anchor the head, until the producers are done and the outbox is empty. */
async function replica(db: Db, ready: () => Promise<void>, producing: { done: boolean }): Promise<void> {
  await ready();
  for (;;) {
    const n = await chainPending(db, 5);
    await anchorHead(db, key);
    if (n === 0 && producing.done) return;
  }
}

/** One producer: `PER_PRODUCER` events, one transaction each, the first after the barrier. */
async function producer(round: number, p: number, ready: () => Promise<void>): Promise<void> {
  await ready();
  for (let i = 0; i < PER_PRODUCER; i++)
    await inTransaction(t.db, (trx) => recordAudit(trx, { type: 'run.started', service: 'test', runId: `r${round}-p${p}`, step: i }));
}

describe('two audit replicas chaining at once', () => {
  it(`keep the chain intact and chain each event once, over ${ROUNDS} rounds`, async () => {
    for (let round = 1; round <= ROUNDS; round++) {
      const ready = barrier(PRODUCERS + replicas.length);
      const producing = { done: false };
      const chaining = replicas.map((db) => replica(db, ready, producing));
      await Promise.all(Array.from({ length: PRODUCERS }, (_, p) => producer(round, p, ready)));
      producing.done = true;
      await Promise.all(chaining);

      const total = round * PRODUCERS * PER_PRODUCER;
      const rows = await t.db.selectFrom('audit_log').select(['seq', 'outbox_id']).orderBy('seq').execute();
      expect(rows.map((r) => Number(r.seq))).toEqual(Array.from({ length: total }, (_, i) => i + 1));
      expect(new Set(rows.map((r) => r.outbox_id)).size).toBe(total);
      expect(await t.db.selectFrom('audit_outbox').select('id').execute()).toEqual([]);
      const v = await verifyAuditChain(t.db, { trustedPublicKey: createPublicKey(key) });
      expect(v).toMatchObject({ intact: true, events: total, newestAnchorSeq: total, reason: null });
      expect(v.anchorsChecked).toBeGreaterThan(0);
    }
  });
});
