import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { ZodError } from 'zod';
import { auditEventWhen, inTransaction, recordAudit, verifyAuditChain, withAuditEvent, type Db } from '@gatehouse/ledger';
import { chainPending } from '../src/jobs/chain.writer.ts';
import { asAuditOwner, createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';

// ADR 0684: events round-trip through Postgres jsonb twice (audit_outbox, then audit_log) between
// the writer and the verifier; jsonb normalizes numbers and reorders keys. Whatever it stores must
// verify intact (no false tamper alarm), and what it cannot store is refused at append, clearly.

let t: TestDatabase;
let db: Db;
beforeAll(async () => {
  t = await createTestDatabase();
  db = t.db;
});
afterAll(async () => {
  await t?.drop();
});
beforeEach(async () => {
  await asAuditOwner(db, (trx) => sql`TRUNCATE audit_log, audit_outbox, audit_anchors`.execute(trx));
});

async function drain(): Promise<void> {
  while ((await chainPending(db, 7)) > 0);
}

const NUMBERS = [
  -0,
  0,
  1,
  -1,
  0.1 + 0.2,
  1e21,
  1e-7,
  5e-324,
  Number.MAX_VALUE,
  -Number.MAX_VALUE,
  Number.MAX_SAFE_INTEGER,
  Number.MIN_SAFE_INTEGER,
  2 ** 31,
  123.456e-10,
];
const TEXTS = [
  '',
  'plain',
  'é (U+00E9) and e\u0301 (combining)',
  '😀 astral 𝄞',
  '\ufeffBOM',
  'line\u2028sep\u2029para',
  'ctl \u0001\u001f\u007f tab\t nl\n',
  'quote " backslash \\ slash /',
  '\\u0041 written out',
  '\ud83d\ude00 pair',
];

describe('audit events through jsonb', () => {
  it('edge numbers and texts written by recordAudit chain and verify intact, and read back unchanged', async () => {
    await inTransaction(db, async (trx) => {
      for (const [i, n] of NUMBERS.entries())
        await recordAudit(trx, { type: 'run.started', service: 'test', runId: `n${i}`, latencyMs: n });
      for (const [i, s] of TEXTS.entries())
        await recordAudit(trx, { type: 'run.started', service: 'test', runId: `s${i}`, outcome: s, tool: s });
      await recordAudit(trx, {
        type: 'run.started',
        service: 'test',
        runId: 'int',
        step: Number.MAX_SAFE_INTEGER,
        atMs: Number.MIN_SAFE_INTEGER,
      });
    });
    await drain();
    const v = await verifyAuditChain(db);
    expect(v).toMatchObject({ intact: true, events: NUMBERS.length + TEXTS.length + 1, reason: null });
    const events = (await db.selectFrom('audit_log').select('event').orderBy('seq').execute()).map((r) => r.event);
    expect(events.slice(0, NUMBERS.length).map((e) => e.latencyMs)).toEqual(NUMBERS.map((n) => (Object.is(n, -0) ? 0 : n)));
    expect(events.slice(NUMBERS.length, -1).map((e) => e.outcome)).toEqual(TEXTS);
  });

  it('events written around the schema (non-ASCII keys, empty objects, 1.0, -0, integers beyond 2^53) verify intact', async () => {
    const raw = [
      '{"type":"x","é":1,"e":2,"ée":{},"z":[],"a":{"b":{},"":{"":[]}},"\\u00e9\\u0301":"k","😀":0,"Z":null}',
      '{"type":"x","one":1.0,"onePointZeroZero":1.00,"negZero":-0,"negZeroFloat":-0.0,"big":123456789012345678901234567890,"e21":1e21,"E":2E+3,"tiny":1e-7}',
      '{"type":"x","nested":[[],{},[{}],{"k":[1,[2,[3]]]}],"dup":1,"dup":2,"s":"\\u00e9\\ud83d\\ude00\\"\\\\\\/\\b\\f\\n\\r\\t"}',
    ];
    for (const r of raw) await sql`INSERT INTO audit_outbox (event) VALUES (${r}::jsonb)`.execute(db);
    await drain();
    expect(await verifyAuditChain(db)).toMatchObject({ intact: true, events: 3, reason: null });
  });

  // The hash covers the event as JavaScript reads it; jsonb keeps the digits as written. A stored
  // number rewritten to other digits of the same float64 (5 → 5.0, atMs + 1e-7) read the same and
  // hashed the same, while SQL readers (event->>'atMs') saw the new value.
  it('a stored number rewritten to other digits of the same float64 is reported', async () => {
    await inTransaction(db, async (trx) => {
      for (let i = 1; i <= 4; i++)
        await recordAudit(trx, { type: 'run.started', service: 'test', runId: `r${i}`, step: i, latencyMs: 0.5 });
    });
    await drain();
    expect(await verifyAuditChain(db)).toMatchObject({ intact: true, events: 4 });
    const rewrites = [
      { seq: 2, set: sql`jsonb_set(event, '{step}', '2.0'::jsonb)` },
      { seq: 3, set: sql`jsonb_set(event, '{atMs}', ((event->>'atMs') || '.0000001')::jsonb)` },
      { seq: 4, set: sql`jsonb_set(event, '{latencyMs}', '0.50000000000000000001'::jsonb)` },
    ];
    for (const { seq, set } of rewrites) {
      const { rows } = await sql<{ original: string }>`SELECT event::text AS original FROM audit_log WHERE seq = ${seq}`.execute(db);
      await asAuditOwner(db, (trx) => sql`UPDATE audit_log SET event = ${set} WHERE seq = ${seq}`.execute(trx));
      const v = await verifyAuditChain(db);
      expect(v).toMatchObject({ intact: false, firstBadSeq: seq });
      expect(v.reason).toMatch(/stored event differs from the one hashed/);
      await asAuditOwner(db, (trx) => sql`UPDATE audit_log SET event = ${rows[0]!.original}::jsonb WHERE seq = ${seq}`.execute(trx));
      expect(await verifyAuditChain(db)).toMatchObject({ intact: true, events: 4 });
    }
  });

  it('a text jsonb cannot store (lone surrogate, NUL) is refused at append by the schema, naming the field, before any statement', async () => {
    for (const bad of ['a\ud800b', '\udc00', 'x\ud83d', 'nul\u0000']) {
      const event = { type: 'run.started' as const, service: 'test', runId: 'r', effectRef: bad };
      const refused = await inTransaction(db, (trx) => recordAudit(trx, event)).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(ZodError);
      expect((refused as ZodError).issues[0]?.path).toEqual(['effectRef']);
      expect((refused as Error).message).toMatch(/jsonb cannot store/);
      await inTransaction(db, async (trx) => {
        expect(() => withAuditEvent(trx, event)).toThrow(ZodError);
      });
      expect(() => auditEventWhen(event, 'source')).toThrow(ZodError);
    }
    expect(await db.selectFrom('audit_outbox').select('id').execute()).toEqual([]);
  });
});
