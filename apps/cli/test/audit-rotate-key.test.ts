import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { generateKeyPairSync, createPublicKey } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { keyFingerprint, parseRotation, rotationSigned, type Db } from '@gatehouse/ledger';
import { createTestDatabase, type TestDatabase } from '@gatehouse/test-harness';
import { auditRotateKeyCommand } from '../src/audit-rotate-command.ts';
import { UsageError } from '../src/commands.ts';

// `gatehouse audit rotate-key` (docs/decisions/0717-audit-key-rotation.md): bad key files are
// usage errors that write nothing; a rotation is one `audit.key_rotated` event signed by both keys.

let t: TestDatabase;
let db: Db;
let dir: string;
const pem = (): string => generateKeyPairSync('ed25519').privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();

beforeAll(async () => {
  t = await createTestDatabase();
  db = t.db;
  dir = mkdtempSync(join(tmpdir(), 'gh-cli-rotate-'));
});
afterAll(async () => {
  await t?.drop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const outbox = (): Promise<{ event: Record<string, unknown> }[]> => db.selectFrom('audit_outbox').select('event').execute();
const run = (oldKey: string, newKey: string): Promise<number> =>
  auditRotateKeyCommand(db, { oldKey, newKey, reason: 'new laptop', operator: 'ops-gus', hmacKey: 'k'.repeat(32), out: () => {} });

describe('gatehouse audit rotate-key', () => {
  it('refuses a missing file, a file without a key and the same key twice as usage errors, writing nothing', async () => {
    const a = join(dir, 'a.pem');
    writeFileSync(a, pem());
    writeFileSync(join(dir, 'junk.pem'), 'not a key');
    await expect(run(join(dir, 'missing.pem'), a)).rejects.toThrow(UsageError);
    await expect(run(join(dir, 'junk.pem'), a)).rejects.toThrow(/holds no private key/);
    await expect(run(a, a)).rejects.toThrow(/same key/);
    expect(await outbox()).toEqual([]);
  });

  it('records one audit.key_rotated event that both keys signed', async () => {
    const oldPem = pem();
    const newPem = pem();
    writeFileSync(join(dir, 'old.pem'), oldPem);
    writeFileSync(join(dir, 'new.pem'), newPem);
    expect(await run(join(dir, 'old.pem'), join(dir, 'new.pem'))).toBe(0);
    const events = await outbox();
    expect(events).toHaveLength(1);
    expect(events[0]!.event).toMatchObject({ type: 'audit.key_rotated', service: 'cli' });
    const r = parseRotation(1, String(events[0]!.event.outcome))!;
    expect(rotationSigned(r)).toBe(true);
    expect(keyFingerprint(r.from)).toBe(keyFingerprint(createPublicKey(oldPem)));
    expect(keyFingerprint(r.to)).toBe(keyFingerprint(createPublicKey(newPem)));
    expect(r.reason).toBe('new laptop');
  });
});
