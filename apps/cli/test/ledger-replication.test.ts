import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startPrivatePostgres, startPrivateStandby, type PrivatePostgres, type PrivateStandby } from '@gatehouse/test-harness';
import { EXIT } from '../src/commands.ts';
import { runGatehouse } from './support/gatehouse-process.ts';

// `gatehouse ledger replication` against a real primary with a real streaming standby (a private
// cluster of this test): the check an operator or a deploy pipeline runs for docs/decisions/0775.
// Asynchronous as pg_basebackup leaves it (exit 1), synchronous once the primary names it
// (exit 0), waiting when the named standby is down (exit 1), and the standby's own URL refused.

let primary: PrivatePostgres;
let standby: PrivateStandby;

beforeAll(async () => {
  primary = await startPrivatePostgres();
  standby = await startPrivateStandby(primary, { name: 'ledger_standby' });
}, 120_000);
afterAll(async () => {
  await standby?.stop({ mode: 'immediate' }).catch(() => undefined);
  await primary?.destroy();
});

/** Sets the primary's `synchronous_standby_names` and reloads its configuration. */
async function requireStandby(names: string): Promise<void> {
  const c = new pg.Client({ connectionString: `${primary.url}/postgres` });
  await c.connect();
  try {
    await c.query(`ALTER SYSTEM SET synchronous_standby_names = '${names}'`);
    await c.query('SELECT pg_reload_conf()');
  } finally {
    await c.end();
  }
}

/** Runs the check on `url` until its verdict is `kind` (a reload or a reconnect takes a moment), at most 30 s. */
async function checkUntil(url: string, kind: string): Promise<{ code: number | null; report: { verdict: { kind: string; why: string } } }> {
  const until = Date.now() + 30_000;
  for (;;) {
    const run = await runGatehouse(['ledger', 'replication', '--json'], { DATABASE_URL: `${url}/postgres` }, 30_000);
    const report = JSON.parse(run.stdout) as { verdict: { kind: string; why: string } };
    if (report.verdict.kind === kind || Date.now() > until) return { code: run.code, report };
    await new Promise((done) => setTimeout(done, 300));
  }
}

describe('gatehouse ledger replication', () => {
  it(
    'asynchronous standby: exit 1, named; synchronous once required: exit 0; required and down: exit 1',
    { timeout: 180_000 },
    async () => {
      const async = await checkUntil(primary.url, 'asynchronous');
      expect(async.report.verdict).toEqual({
        kind: 'asynchronous',
        why: 'ledger_standby streams asynchronously: synchronous_standby_names is empty; name the standby there',
      });
      expect(async.code).toBe(EXIT.failed);

      await requireStandby('ledger_standby');
      const sync = await checkUntil(primary.url, 'synchronous');
      expect(sync.report.verdict).toEqual({ kind: 'synchronous', why: 'ledger_standby confirms every commit' });
      expect(sync.code).toBe(EXIT.ok);

      const onStandby = await checkUntil(standby.url, 'standby');
      expect([onStandby.report.verdict.kind, onStandby.code]).toEqual(['standby', EXIT.failed]);

      await standby.stop();
      const waiting = await checkUntil(primary.url, 'waiting');
      expect(waiting.report.verdict.why).toMatch(/no synchronous standby is streaming: every commit waits/);
      expect(waiting.code).toBe(EXIT.failed);
    },
  );
});
