import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { repoRoot } from '@gatehouse/contracts';
import { createTestDatabase, dropQueuePrefix, TEST_REDIS_URL, testQueuePrefix, type TestDatabase } from '@gatehouse/test-harness';
import { evaluateMonitors } from '@gatehouse/audit';
import { knownMigrations, migrateOneDown } from '@gatehouse/ledger';

/**
 * A service whose tool catalog, prompt or audit schema differs from its release manifest
 * refuses to boot and leaves the evidence the audit service alerts on
 * (docs/decisions/0220-monitors-before-damage.md).
 */
let t: TestDatabase;
const prefix = testQueuePrefix();
const dir = mkdtempSync(resolve(tmpdir(), 'gh-boot-'));

beforeAll(async () => {
  t = await createTestDatabase();
  const m = JSON.parse(readFileSync(resolve(repoRoot, 'releases/rel-1.json'), 'utf8')) as { toolCatalog: { support: string } };
  m.toolCatalog.support = '0'.repeat(64);
  writeFileSync(resolve(dir, 'rel-1.json'), JSON.stringify(m));
});
afterAll(async () => {
  await dropQueuePrefix(TEST_REDIS_URL, prefix);
  await t?.drop();
});

function boot(service: string, releasesDir: string | undefined): Promise<{ code: number | null; out: string }> {
  return bootOn(service, t.url, releasesDir);
}

/** Starts `service` on the database `databaseUrl` (with `releasesDir` as RELEASES_DIR when given) and reports how it ended. */
function bootOn(service: string, databaseUrl: string, releasesDir?: string): Promise<{ code: number | null; out: string }> {
  return new Promise((done) => {
    const child = execFile(
      process.execPath,
      [resolve(repoRoot, `services/${service}/src/main.ts`)],
      {
        cwd: repoRoot,
        timeout: 60_000,
        env: {
          ...process.env,
          GATEHOUSE_ENV: 'test',
          DATABASE_URL: databaseUrl,
          REDIS_URL: TEST_REDIS_URL,
          QUEUE_PREFIX: prefix,
          POLICY_GATEWAY_PORT: '0',
          LOG_LEVEL: 'info',
          ...(releasesDir ? { RELEASES_DIR: releasesDir } : {}),
        },
      },
      (err, stdout, stderr) => done({ code: err ? (typeof err.code === 'number' ? err.code : null) : 0, out: stdout + stderr }),
    );
    // A service that boots keeps running: stop it once it says it is ready.
    child.stdout?.on('data', (d: Buffer) => {
      if (d.toString().includes('ready')) child.kill('SIGTERM');
    });
  });
}

describe('a service boots only as the release it serves', () => {
  it(
    'a differing tool catalog digest: exit 1, the alert logged, service.boot_refused recorded, the monitor fires',
    { timeout: 120_000 },
    async () => {
      const r = await boot('policy-gateway', dir);
      expect(r.code, r.out).toBe(1);
      expect(r.out).toContain('release_digest_mismatch');
      expect(r.out).toMatch(/toolCatalog\.support digest differs from the code/);
      const events = await t.db.selectFrom('audit_outbox').select('event').execute();
      expect(events.map((e) => e.event)).toContainEqual(
        expect.objectContaining({ type: 'service.boot_refused', service: 'policy-gateway', outcome: 'toolCatalog.support' }),
      );
      const alert = (await evaluateMonitors(t.db, { autoApproveLimitCents: 5000, maxFailedUnknownPerHour: 3 })).find(
        (a) => a.monitor === 'release_digest_mismatch',
      );
      expect(alert?.examples).toEqual(['policy-gateway']);
    },
  );

  it('a database without the newest migration: boot refused, naming the migration and `migrate up`', { timeout: 120_000 }, async () => {
    const other = await createTestDatabase();
    try {
      const down = await migrateOneDown(other.db as never);
      expect(down).toBe(knownMigrations().at(-1));
      const r = await bootOn('policy-gateway', other.url);
      expect(r.code, r.out).toBe(1);
      expect(r.out).toContain('release_digest_mismatch');
      expect(r.out).toContain(`migration(s) not applied: ${down} (run gatehouse migrate up)`);
    } finally {
      await other.drop();
    }
  });

  it('the manifest that matches the code boots', { timeout: 120_000 }, async () => {
    const r = await boot('policy-gateway', undefined);
    expect(r.out).toContain('ready');
    expect(r.out).not.toContain('release_digest_mismatch');
  });
});
