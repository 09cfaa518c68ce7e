import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createPublicKey, generateKeyPairSync, sign } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'kysely';
import { appendWitness, chainHash, GENESIS_HASH, type Db } from '@gatehouse/ledger';
import { asAuditOwner, createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { auditVerifyCommand, witnessToRead } from '../src/audit-verify-command.ts';

// `gatehouse audit verify` with the anchor witness and the freshness limit
// (docs/decisions/0570-audit-anchors-witnessed-outside-the-ledger.md): exit 1 and the reason.

let t: TestDatabase;
let db: Db;
let dir: string;
const { privateKey } = generateKeyPairSync('ed25519');
const trustedPublicKey = createPublicKey(privateKey);

beforeAll(async () => {
  t = await createTestDatabase();
  db = t.db;
  dir = mkdtempSync(join(tmpdir(), 'gh-cli-verify-'));
});
afterAll(async () => {
  await t?.drop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});
beforeEach(async () => {
  await asOwner((trx) => sql`TRUNCATE audit_log, audit_outbox, audit_anchors`.execute(trx));
});

/** Runs `fn` with the append-only triggers off, as the database's owner could. */
const asOwner = (fn: (trx: Db) => Promise<unknown>): Promise<void> => asAuditOwner(db, fn);

/** Writes seq 1..n (service `service`) straight into audit_log, chained from genesis; returns the head hash. */
async function writeChain(n: number, service: string, trx: Db = db): Promise<string> {
  let prev = GENESIS_HASH;
  for (let seq = 1; seq <= n; seq++) {
    const event = { type: 'run.started', service, runId: `r${seq}` };
    const hash = chainHash(prev, seq, event);
    await trx
      .insertInto('audit_log')
      .values({ seq: String(seq), outbox_id: String(seq), event: JSON.stringify(event), prev_hash: prev, hash })
      .execute();
    prev = hash;
  }
  return prev;
}

/** Anchors seq `seq` with `hash` as the audit service does: a signed row, then the witness line. */
async function anchor(seq: number, hash: string, witness: string): Promise<void> {
  const signature = sign(null, Buffer.from(`${seq}:${hash}`), privateKey).toString('base64');
  const publicKey = trustedPublicKey.export({ type: 'spki', format: 'pem' }).toString();
  await db
    .insertInto('audit_anchors')
    .values({ seq: String(seq), hash, signature, public_key: publicKey })
    .execute();
  appendWitness(witness, { seq, hash, signature, at: new Date().toISOString() });
}

async function run(witness: string | undefined, env: Record<string, string | undefined>): Promise<{ code: number; lines: string[] }> {
  const lines: string[] = [];
  const code = await auditVerifyCommand(db, { trustedPublicKey, out: (l) => lines.push(l), witness: witnessToRead(witness, env) }, env);
  return { code, lines };
}

describe('gatehouse audit verify', () => {
  it('--witness: a rewritten chain with its anchors deleted exits 1 with the reason', async () => {
    const witness = join(dir, 'flag', 'anchors.jsonl');
    await anchor(5, await writeChain(5, 'real'), witness);
    expect(await run(witness, {})).toMatchObject({ code: 0, lines: [expect.stringMatching(/^intact 5 events.* 1 witnessed in /)] });
    await asOwner(async (trx) => {
      await trx.deleteFrom('audit_log').execute();
      await trx.deleteFrom('audit_anchors').execute();
      await writeChain(5, 'forged', trx);
    });
    expect(await run(undefined, {})).toMatchObject({ code: 0 }); // no witness found: the rewrite passes
    expect(await run(witness, {})).toEqual({
      code: 1,
      lines: ['BROKEN at seq 5: rewritten: the chain differs from the witnessed anchor at seq 5'],
    });
  });

  it('the local state folder holds the default witness; a named witness that does not exist is an error', async () => {
    const state = join(dir, 'state');
    await anchor(3, await writeChain(3, 'real'), join(state, 'audit-anchors.jsonl'));
    await asOwner((trx) => trx.deleteFrom('audit_anchors').execute());
    const r = await run(undefined, { GATEHOUSE_STATE_DIR: state });
    expect(r.code).toBe(1);
    expect(r.lines[0]).toMatch(/anchors deleted/);
    await expect(run(undefined, { AUDIT_ANCHOR_WITNESS_PATH: join(dir, 'nowhere.jsonl') })).rejects.toThrow(/does not exist/);
  });

  it('every anchor deleted, no witness: stale past AUDIT_ANCHOR_INTERVAL_MS + AUDIT_ANCHOR_SLACK_MS', async () => {
    await writeChain(2, 'real');
    await asOwner((trx) => sql`UPDATE audit_log SET chained_at = now() - interval '10 minutes'`.execute(trx));
    expect(await run(undefined, { GATEHOUSE_STATE_DIR: join(dir, 'empty') })).toMatchObject({
      code: 1,
      lines: [expect.stringMatching(/anchors stale: seq 1/)],
    });
    const wide = { GATEHOUSE_STATE_DIR: join(dir, 'empty'), AUDIT_ANCHOR_INTERVAL_MS: '600000', AUDIT_ANCHOR_SLACK_MS: '60000' };
    expect(await run(undefined, wide)).toMatchObject({ code: 0 });
  });
});
