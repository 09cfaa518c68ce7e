import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createPublicKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { anchorHead, chainPending } from '@gatehouse/audit';
import { auditReplaceLostKeyCommand } from '@gatehouse/cli';
import { inTransaction, keyFingerprint, lostKeyRotationOutcome, recordAudit, verifyAuditChain, type Db } from '@gatehouse/ledger';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { approvalApi, type ApprovalApi } from '../support/approval-api.ts';

/**
 * A lost audit key (docs/decisions/0717-audit-key-rotation.md): `gatehouse audit replace-lost-key`
 * asks for a two-person override bound to exactly the handover (the newest anchor's key → the new
 * key), a policy owner or another operator — never the requester — approves it through the
 * approval service, and the next run records the rotation naming the consumed approval. The new
 * key then anchors, and the chain verifies with either key pinned. A rotation naming an approval
 * the chain does not show consumed for these two keys hands nothing over: the writer refuses to
 * anchor with the new key and verify says BROKEN.
 */
const HMAC = 'test-audit-hmac-key-0123456789';
let t: TestDatabase;
let db: Db;
let api: ApprovalApi;
let dir: string;
const newKey = (): KeyObject => generateKeyPairSync('ed25519').privateKey;

beforeAll(async () => {
  t = await createTestDatabase();
  db = t.db;
  api = approvalApi(db);
  dir = mkdtempSync(join(tmpdir(), 'gh-lost-key-'));
});
afterAll(async () => {
  await t?.drop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** Writes `key` as a PEM file of the test's folder; its path. */
function keyFile(name: string, key: KeyObject): string {
  const path = join(dir, `${name}.pem`);
  writeFileSync(path, key.export({ type: 'pkcs8', format: 'pem' }));
  return path;
}

/** `n` audit events, chained. */
async function chained(n: number): Promise<void> {
  for (let i = 0; i < n; i++) await inTransaction(db, (trx) => recordAudit(trx, { type: 'run.started', service: 'test', runId: `r-${i}` }));
  await chainPending(db);
}

/** Runs the command as `operator`; its exit code and what it printed. */
async function replace(path: string, operator = 'ops-gus'): Promise<{ code: number; out: string }> {
  const lines: string[] = [];
  const code = await auditReplaceLostKeyCommand(db, {
    newKey: path,
    reason: 'the laptop with the key was wiped',
    operator,
    hmacKey: HMAC,
    out: (l) => lines.push(l),
  });
  return { code, out: lines.join('\n') };
}

/** The `audit.key_rotated` events, chained or still in the outbox. */
const rotations = async () =>
  [
    ...(await db.selectFrom('audit_log').select('event').execute()),
    ...(await db.selectFrom('audit_outbox').select('event').execute()),
  ].filter((r) => r.event.type === 'audit.key_rotated');
const anchorKeys = async () =>
  (await db.selectFrom('audit_anchors').select('public_key').orderBy('id').execute()).map((r) => keyFingerprint(r.public_key));

describe('gatehouse audit replace-lost-key', () => {
  const lost = newKey();
  const next = newKey();
  let approvalId = '';

  it('asks a second person for an override bound to the handover, and rotates nothing until it is approved', async () => {
    await expect(replace(keyFile('next', next))).rejects.toThrow(/nothing is anchored yet/);
    await chained(3);
    expect(await anchorHead(db, lost)).toBe(3);
    const asked = await replace(keyFile('next', next));
    expect(asked.code).toBe(1);
    approvalId = /override ([0-9a-f-]{36})/.exec(asked.out)![1]!;
    expect(asked.out).toContain(`${keyFingerprint(lost).slice(0, 16)} (lost) → ${keyFingerprint(next).slice(0, 16)}`);
    expect(await rotations()).toEqual([]);
    // Asked again while pending: nothing new is asked for, nothing rotated.
    const again = await replace(keyFile('next', next));
    expect(again).toMatchObject({ code: 1 });
    expect(again.out).toContain('awaits a second person');
    expect(await db.selectFrom('approvals').select('id').execute()).toHaveLength(1);
    await chainPending(db);
    expect(await anchorHead(db, next)).toBeNull(); // the new key may not anchor yet
  });

  it('neither the requester nor a support lead may approve it; the approval names both fingerprints', async () => {
    for (const [who, why] of [
      ['ops-gus', 'requester_cannot_approve'],
      ['lead-dee', 'not_a_release_approver'],
    ] as const) {
      const r = await api.decide(who, approvalId);
      expect(r.status, `${who}: ${JSON.stringify(r.body)}`).toBe(403);
      expect(JSON.stringify(r.body)).toContain(why);
    }
    const shown = await api.show('pol-hal', approvalId);
    expect(JSON.stringify(shown.body)).toContain(`from:${keyFingerprint(lost)}`);
    expect(JSON.stringify(shown.body)).toContain(`to:${keyFingerprint(next)}`);
    expect(await rotations()).toEqual([]);
  });

  it('once approved, the next run records the rotation; the new key anchors and verify passes with either key', async () => {
    expect((await api.decide('pol-hal', approvalId)).status).toBe(200);
    const done = await replace(keyFile('next', next));
    expect(done.code).toBe(0);
    expect(done.out).toContain(`two-person override ${approvalId}`);
    expect(await rotations()).toHaveLength(1);
    // Run again before the new key anchored: already recorded, nothing asked or written.
    const again = await replace(keyFile('next', next));
    expect(again.code).toBe(0);
    expect(again.out).toContain('already recorded');
    expect(await rotations()).toHaveLength(1);
    expect(await db.selectFrom('approvals').select('id').execute()).toHaveLength(1);
    await chained(1);
    const head = Number(
      (
        await db
          .selectFrom('audit_log')
          .select((eb) => eb.fn.max('seq').as('m'))
          .executeTakeFirstOrThrow()
      ).m,
    );
    expect(await anchorHead(db, next)).toBe(head);
    expect(await anchorHead(db, lost)).toBeNull(); // handed over: the lost key may not anchor again
    expect(await anchorKeys()).toEqual([keyFingerprint(lost), keyFingerprint(next)]);
    for (const pinned of [lost, next])
      expect(await verifyAuditChain(db, { trustedPublicKey: createPublicKey(pinned) })).toMatchObject({
        intact: true,
        keyRotations: 1,
        keyRotationsByOverride: 1,
      });
    await expect(replace(keyFile('next', next))).rejects.toThrow(/already signed by this key/);
  });

  it('a denied override stops its run with the command that asks again, and rotates nothing', async () => {
    const asked = await replace(keyFile('third', newKey()));
    const id = /override ([0-9a-f-]{36})/.exec(asked.out)![1]!;
    expect((await api.decide('ops-ida', id, 'deny')).status).toBe(200);
    const run = await db
      .selectFrom('approvals as p')
      .innerJoin('workflows as w', 'w.id', 'p.workflow_id')
      .select(['w.state', 'w.stop_reason', 'w.next_step'])
      .where('p.id', '=', id)
      .executeTakeFirstOrThrow();
    expect(run).toMatchObject({ state: 'stopped', stop_reason: 'denied' });
    expect(run.next_step).toContain('gatehouse audit replace-lost-key');
    expect(await rotations()).toHaveLength(1); // the one recorded above
  });

  it('a rotation naming an approval not consumed for these two keys hands nothing over and is BROKEN', async () => {
    const stranger = newKey();
    // The approval above was consumed for lost → next, not for next → stranger.
    const outcome = lostKeyRotationOutcome(createPublicKey(next), stranger, approvalId, 'forged');
    await inTransaction(db, (trx) => recordAudit(trx, { type: 'audit.key_rotated', service: 'cli', runId: null, outcome }));
    await chained(1);
    expect(await anchorHead(db, stranger)).toBeNull();
    const r = await verifyAuditChain(db, { trustedPublicKey: createPublicKey(next) });
    expect(r.intact).toBe(false);
    expect(r.reason).toMatch(/key rotation at seq \d+ is not signed by both its keys/);
  });
});
