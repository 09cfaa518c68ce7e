import { spawn, type ChildProcess } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inTransaction, keyFingerprint, recordAudit } from '@gatehouse/ledger';
import { createTestDatabase, freePort, TEST_REDIS_URL, testQueuePrefix, type TestDatabase } from '@gatehouse/test-harness';
import { chainPending } from '../src/jobs/chain.writer.ts';
import { anchorHead } from '../src/domain/anchor.ts';

// The refusal is loud (docs/decisions/0717-audit-key-rotation.md): an audit process started with a
// key other than the one that signed the ledger's newest anchor is not ready — `/readyz` fails on
// `anchorKey` with the message — logs both fingerprints and the rotation command, and still chains.

const MAIN = resolve(import.meta.dirname, '../src/main.ts');
let t: TestDatabase;
let dir: string;
let child: ChildProcess | undefined;
let log = '';

beforeAll(async () => {
  t = await createTestDatabase();
  dir = mkdtempSync(join(tmpdir(), 'gh-audit-readiness-'));
});
afterAll(async () => {
  child?.kill('SIGKILL');
  await t?.drop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

const event = (runId: string) => inTransaction(t.db, (trx) => recordAudit(trx, { type: 'run.started', service: 'test', runId }));

describe('an audit process of the wrong key', () => {
  it('is not ready, says why with both fingerprints and the rotation command, and keeps chaining', async () => {
    const first = generateKeyPairSync('ed25519').privateKey;
    await event('r-1');
    await chainPending(t.db);
    await anchorHead(t.db, first);
    const second = generateKeyPairSync('ed25519').privateKey;
    const keyPath = join(dir, 'second.pem');
    writeFileSync(keyPath, second.export({ type: 'pkcs8', format: 'pem' }), { mode: 0o600 });
    const port = await freePort();
    child = spawn(process.execPath, [MAIN], {
      env: {
        ...process.env,
        GATEHOUSE_ENV: 'test',
        DATABASE_URL: t.url,
        REDIS_URL: TEST_REDIS_URL,
        QUEUE_PREFIX: testQueuePrefix(),
        AUDIT_PORT: String(port),
        AUDIT_SIGNING_KEY_PATH: keyPath,
        AUDIT_ANCHOR_WITNESS_PATH: join(dir, 'witness.jsonl'),
        AUDIT_ANCHOR_INTERVAL_MS: '200',
        LOG_LEVEL: 'info',
        OTEL_SDK_DISABLED: 'true',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stdout!.on('data', (b: Buffer) => (log += b.toString()));
    child.stderr!.on('data', (b: Buffer) => (log += b.toString()));
    let ready: { status: number; body: { failing?: Record<string, string> } } | undefined;
    for (let i = 0; i < 600 && !ready?.body.failing?.anchorKey; i++) {
      await new Promise((r) => setTimeout(r, 100));
      try {
        const res = await fetch(`http://127.0.0.1:${port}/readyz`);
        ready = { status: res.status, body: (await res.json()) as { failing?: Record<string, string> } };
      } catch {
        // not listening yet
      }
    }
    expect(ready?.status, log).toBe(503);
    const why = JSON.stringify(ready!.body.failing!.anchorKey);
    expect(why).toContain(keyFingerprint(first).slice(0, 16));
    expect(why).toContain('gatehouse audit rotate-key');
    for (let i = 0; i < 100 && !log.includes('audit anchoring refused'); i++) await new Promise((r) => setTimeout(r, 100));
    expect(log).toContain(keyFingerprint(first));
    expect(log).toContain(keyFingerprint(second));
    await event('r-2');
    for (let i = 0; i < 100 && (await t.db.selectFrom('audit_outbox').select('id').execute()).length; i++)
      await new Promise((r) => setTimeout(r, 100));
    expect(await t.db.selectFrom('audit_outbox').select('id').execute()).toEqual([]); // still chained
    const anchors = await t.db.selectFrom('audit_anchors').select('public_key').execute();
    expect(anchors.map((a) => keyFingerprint(a.public_key))).toEqual([keyFingerprint(first)]);
  }, 120_000);
});
