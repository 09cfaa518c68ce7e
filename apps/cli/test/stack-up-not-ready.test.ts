import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, TEST_REDIS_URL, testQueuePrefix, dropQueuePrefix, type TestDatabase } from '@gatehouse/test-harness';
import { EXIT } from '../src/commands.ts';
import { runGatehouse } from './support/gatehouse-process.ts';

// `stack up` over a database an earlier stack anchored, with a fresh state folder (a new audit
// key): the audit service is never ready — its anchor key guard refuses the new key (ADR 0717) —
// and `stack up` printed "… waiting for audit (N s)" for its whole ready timeout (120 s), without
// saying why, then "audit not ready in time". The audit service now marks that check as one only
// an operator clears (`needsOperator` in its /readyz), and `stack up` prints the failing check
// with its reason as soon as /readyz answers, then stops waiting: exit 1 naming the service, the
// check and the fixes, the stack stopped (ADR 0729).

let t: TestDatabase;
let dir: string;
let env: Record<string, string>;
const prefix = testQueuePrefix();

/** A port nobody listens on now. */
function freePort(): Promise<number> {
  return new Promise((done, fail) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => done(port));
    });
    server.once('error', fail);
  });
}

beforeAll(async () => {
  t = await createTestDatabase();
  dir = mkdtempSync(resolve(tmpdir(), 'gh-stack-not-ready-'));
  // The earlier stack's anchor, signed by a key the fresh state folder does not have.
  const earlier = generateKeyPairSync('ed25519').publicKey.export({ type: 'spki', format: 'pem' }).toString();
  await t.db
    .insertInto('audit_anchors')
    .values({ seq: '1', hash: '0'.repeat(64), signature: 'earlier', public_key: earlier })
    .execute();
  env = {
    DATABASE_URL: t.url,
    REDIS_URL: TEST_REDIS_URL,
    QUEUE_PREFIX: prefix,
    AUDIT_PORT: String(await freePort()),
    GATEHOUSE_STATE_DIR: dir,
    AUDIT_ANCHOR_WITNESS_PATH: resolve(dir, 'witness.jsonl'),
    GATEHOUSE_ENV: 'local',
    LOG_LEVEL: 'warn',
  };
});

afterAll(async () => {
  if (env) await runGatehouse(['stack', 'down'], env, 30_000);
  await dropQueuePrefix(TEST_REDIS_URL, prefix);
  await t?.drop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe('stack up with a service that only an operator can make ready (ADR 0729)', () => {
  it(
    'prints the failing check and its reason, stops waiting, exits 1 naming the fixes: the stack is stopped',
    { timeout: 150_000 },
    async () => {
      // Killed after 90 s, before its ready timeout (120 s): a stack up that waits it out fails the assertions below.
      const up = await runGatehouse(['stack', 'up', '--only', 'audit'], env, 90_000);
      expect(up.code, `${up.stdout}\n${up.stderr}`).toBe(EXIT.failed);
      expect(up.stdout).toContain('not ready  audit: anchorKey (will not clear by itself) — audit anchoring refused');
      expect(up.stderr).toContain('audit is not ready and will not become ready by itself — its /readyz fails anchorKey');
      for (const fix of ['gatehouse audit rotate-key --old-key', 'gatehouse stack up --fresh']) expect(up.stderr).toContain(fix);
      const status = await runGatehouse(['stack', 'status'], env, 30_000);
      expect(status.code).toBe(EXIT.failed);
      expect(status.stdout).toContain('no stack supervisor running');
      const probe = await fetch(`http://127.0.0.1:${env.AUDIT_PORT}/healthz`).then(
        () => 'answers',
        () => 'down',
      );
      expect(probe).toBe('down');
    },
  );
});
