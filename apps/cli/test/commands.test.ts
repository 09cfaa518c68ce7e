import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sql } from 'kysely';
import { repoRoot } from '@gatehouse/contracts';
import { createAction } from '@gatehouse/testing';
import { createTestDatabase, freePort, TEST_REDIS_URL, type TestDatabase } from '@gatehouse/test-harness';
import { COMMANDS, EXIT, findCommand } from '../src/commands.ts';
import { stagingUrlOf } from '../src/stack.ts';

// The CLI's contract with scripts (docs/product/public-contract.md#ops-cli): per-command --help,
// --json on every command that reads, and documented exit codes.
let t: TestDatabase;
let stateDir: string;
beforeAll(async () => {
  t = await createTestDatabase();
  stateDir = mkdtempSync(resolve(tmpdir(), 'gh-cli-'));
});
afterAll(async () => {
  await t?.drop();
  rmSync(stateDir, { recursive: true, force: true });
});

function gatehouse(args: string[], env: Record<string, string> = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done) => {
    execFile(
      process.execPath,
      [resolve(repoRoot, 'apps/cli/src/main.ts'), ...args],
      {
        cwd: repoRoot,
        timeout: 150_000,
        env: { ...process.env, DATABASE_URL: t.url, REDIS_URL: TEST_REDIS_URL, GATEHOUSE_STATE_DIR: stateDir, GATEHOUSE_TOKEN: '', ...env },
      },
      (err, stdout, stderr) => done({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

describe('the command catalog', () => {
  it('names exactly the commands main.ts dispatches', () => {
    const main =
      readFileSync(resolve(repoRoot, 'apps/cli/src/main.ts'), 'utf8') +
      readFileSync(resolve(repoRoot, 'apps/cli/src/release-commands.ts'), 'utf8');
    const dispatched = new Set([...main.matchAll(/case '([a-z][a-z -]*)':/g)].map((m) => m[1]!));
    expect(new Set(COMMANDS.map((c) => c.name))).toEqual(dispatched);
  });

  it('finds two-word commands before one-word ones', () => {
    expect(findCommand(['release', 'activate', 'rel-2'])?.name).toBe('release activate');
    expect(findCommand(['reconcile'])?.name).toBe('reconcile');
    expect(findCommand(['reconcile', 'resolve', 'x'])?.name).toBe('reconcile resolve');
    expect(findCommand(['nonsense'])).toBeUndefined();
  });
});

describe('gatehouse <command> --help', () => {
  it('prints that command: its synopsis, what it needs and the exit codes; exit 0, nothing runs', async () => {
    const r = await gatehouse(['release', 'activate', '--help']);
    expect(r.code).toBe(EXIT.ok);
    expect(r.stdout).toMatch(/^gatehouse release activate <id> \[--cohort/);
    expect(r.stdout).toContain('operator: needs --token');
    expect(r.stdout).toContain('exit codes:');
    expect(r.stdout).not.toContain('queues drain');
    const json = await gatehouse(['audit', 'verify', '-h']);
    expect(json.stdout).toContain('--json prints one JSON document');
  });

  it('a group word alone lists its commands: with --help exit 0, without it exit 2', async () => {
    const [help, bare] = await Promise.all([gatehouse(['queues', '--help']), gatehouse(['stack'])]);
    expect(help.code, help.stderr).toBe(EXIT.ok);
    for (const c of COMMANDS.filter((x) => x.name.startsWith('queues '))) expect(help.stdout).toContain(`gatehouse ${c.name}`);
    expect(help.stdout).not.toContain('gatehouse stack up');
    expect(bare.code).toBe(EXIT.usage);
    expect(bare.stdout).toContain('gatehouse stack up');
  });

  it('the global --help lists every command', async () => {
    const r = await gatehouse(['--help']);
    expect(r.code).toBe(EXIT.ok);
    for (const c of COMMANDS.filter((x) => x.name !== 'migrate up')) expect(r.stdout).toContain(`gatehouse ${c.name}`);
  });
});

describe('exit codes', () => {
  it('2 for an unknown command, an unknown flag, a flag the command does not take, a missing argument', async () => {
    const cases = [
      ['frobnicate'],
      ['audit', 'verify', '--frob'],
      ['stack', 'down', '--json'],
      ['token'],
      ['switch', 'off'],
      ['reconcile', 'resolve'],
      ['reconcile', 'resolve', '0123abcd', '--ratify', '--reverse'],
      // An undecided reship's outcome is <operationKey>=<shipmentId|none>, each operation once (ADR 0691).
      ['reconcile', 'resolve', '0123abcd', '--ratify', '--outcome', 'wf:action:1'],
      ['reconcile', 'resolve', '0123abcd', '--ratify', '--outcome', 'k=shp_1', '--outcome', 'k=none'],
      ['reconcile', '--outcome', 'k=none'],
    ];
    const results = await Promise.all(cases.map((args) => gatehouse(args)));
    results.forEach((r, i) => {
      expect(r.code, `${cases[i]!.join(' ')}: ${r.stderr}`).toBe(EXIT.usage);
      expect(r.stderr).toMatch(/^gatehouse: /);
    });
  });

  it('2 for an argument past those a command takes: a forgotten --witness does not verify the default witness (ADR 0783)', async () => {
    const cases = [
      ['audit', 'verify', 'witness.jsonl'],
      ['stack', 'status', 'extra'],
      ['release', 'digests', 'rel-1'],
      ['release', 'verify', 'rel-1', 'rel-2'],
      ['queues', 'drain', 'rel-1', '--release', 'rel-1'],
      ['reenable', 'status', 'issue_refund', 'reship_order'],
      ['policy', 'check', 'support-p1', 'support-p2'],
    ];
    const results = await Promise.all(cases.map((args) => gatehouse(args)));
    results.forEach((r, i) => {
      expect(r.code, `${cases[i]!.join(' ')}: ${r.stderr}`).toBe(EXIT.usage);
      expect(r.stderr).toMatch(/^gatehouse: gatehouse \S+ \S+ takes (one <[^>]+>|no argument): unexpected argument .*nothing ran/);
    });
  });

  it('an argument a command takes is still fine', async () => {
    const cases = [
      ['policy', 'check', 'support-p1'],
      ['release', 'digests'],
    ];
    const results = await Promise.all(cases.map((args) => gatehouse(args)));
    results.forEach((r, i) => expect(r.code, `${cases[i]!.join(' ')}: ${r.stderr}`).toBe(EXIT.ok));
  });

  it('2 for stack up --only naming no service of the stack: the running stack is not stopped, nothing starts', async () => {
    // A running stack's supervisor, as the pid file names it (its command line names the daemon).
    const dir = resolve(stateDir, 'stack');
    mkdirSync(dir, { recursive: true });
    const supervisor = spawn(
      process.execPath,
      ['-e', 'setInterval(() => {}, 1 << 30); console.log("up")', 'apps/cli/src/stack-daemon.ts'],
      {
        stdio: ['ignore', 'pipe', 'ignore'],
      },
    );
    try {
      await once(supervisor.stdout!, 'data');
      writeFileSync(resolve(dir, 'supervisor.pid'), String(supervisor.pid));
      for (const only of ['exector', 'executor,bogus', ',']) {
        const r = await gatehouse(['stack', 'up', '--only', only]);
        expect(r.code, `--only ${only}: ${r.stdout}${r.stderr}`).toBe(EXIT.usage);
        expect(r.stderr).toMatch(/^gatehouse: stack up --only names no service.*nothing was stopped or started/);
        expect(r.stdout).not.toMatch(/stack up, supervised/);
      }
      expect(supervisor.exitCode).toBeNull();
      expect(supervisor.signalCode).toBeNull();
    } finally {
      supervisor.kill('SIGKILL');
      rmSync(resolve(dir, 'supervisor.pid'), { force: true });
    }
  });

  it('3 when an ops command has no operator token (refused before anything runs)', async () => {
    const r = await gatehouse(['epoch', 'bump']);
    expect(r.code, r.stderr).toBe(EXIT.unauthorized);
    expect(r.stderr).toContain('refused (missing_token)');
  });

  it('4 when Redis is unreachable: a command that needs the queues ends, and changes nothing', async () => {
    const token = (await gatehouse(['token', '--user', 'ops-gus'])).stdout.trim();
    const r = await gatehouse(['queues', 'drain', '--release', 'rel-1'], {
      GATEHOUSE_TOKEN: token,
      REDIS_URL: `redis://127.0.0.1:${await freePort()}`,
    });
    expect(r.code, r.stderr).toBe(EXIT.unavailable);
    expect(r.stderr).toMatch(/Redis \(127\.0\.0\.1:\d+\) is unreachable/);
    expect(await t.db.selectFrom('releases').select('id').where('draining', '=', true).execute()).toEqual([]);
    const events = await t.db.selectFrom('audit_outbox').select('event').execute();
    expect(events.map((e) => String(e.event.type))).not.toContain('queues.drained');
  });

  it('0 for switch off and on while Redis is unreachable: containment is a ledger write; the re-enqueued job waits in the outbox (ADR 0650)', async () => {
    const token = (await gatehouse(['token', '--user', 'ops-gus'])).stdout.trim();
    const down = { GATEHOUSE_TOKEN: token, REDIS_URL: `redis://127.0.0.1:${await freePort()}` };
    const held = await createAction(t.db, { orderId: 'O-1002', tool: 'reship_order' });
    const off = await gatehouse(['switch', 'off', 'reship_order'], down);
    expect(off.code, off.stderr).toBe(EXIT.ok);
    const row = () => t.db.selectFrom('tool_switches').select('enabled').where('tool', '=', 'reship_order').executeTakeFirstOrThrow();
    expect((await row()).enabled).toBe(false);
    const on = await gatehouse(['switch', 'on', 'reship_order'], down);
    expect(on.code, on.stderr).toBe(EXIT.ok);
    expect(on.stdout).toContain('1 held action(s) re-enqueued');
    expect(on.stdout).toContain('wait in the outbox');
    expect((await row()).enabled).toBe(true);
    const waiting = await t.db
      .selectFrom('outbox')
      .select(['queue', 'published_at'])
      .where(sql<boolean>`payload->>'actionId' = ${held.actionId}`)
      .execute();
    expect(waiting).toEqual([{ queue: 'executions.rel-1', published_at: null }]);

    // A staged re-enable is a ledger write too.
    expect((await gatehouse(['switch', 'off', 'reship_order'], down)).code).toBe(EXIT.ok);
    const stage = await gatehouse(['reenable', 'advance', 'reship_order', '--reason', 'contained'], down);
    expect(stage.code, stage.stderr).toBe(EXIT.ok);
    expect(stage.stdout).toContain('reship_order: stage read_only');
  });

  it('4 when the database is unreachable', async () => {
    const r = await gatehouse(['audit', 'verify'], { DATABASE_URL: `postgres://postgres@127.0.0.1:${await freePort()}/nothing` });
    expect(r.code, r.stderr).toBe(EXIT.unavailable);
  });
});

describe('--json on commands that read', () => {
  it('audit verify, policy check, release verify and stack status print one JSON document', async () => {
    const audit = await gatehouse(['audit', 'verify', '--json']);
    expect(audit.code, audit.stderr).toBe(0);
    expect(JSON.parse(audit.stdout)).toMatchObject({ intact: true, events: 0 });
    const gate = await gatehouse(['policy', 'check', 'support-p1', '--json']);
    expect(gate.code, gate.stderr).toBe(0);
    expect(JSON.parse(gate.stdout)).toMatchObject({ revision: 'support-p1', failures: [] });
    const refused = await gatehouse([
      'policy',
      'check',
      resolve(repoRoot, 'packages/policy/test/fixtures/support-units-mistake.json'),
      '--json',
    ]);
    expect(refused.code).toBe(EXIT.failed);
    expect(JSON.parse(refused.stdout).failures.length).toBeGreaterThan(0);
    const verify = await gatehouse(['release', 'verify', 'rel-1', '--json']);
    expect(JSON.parse(verify.stdout)).toMatchObject({ release: 'rel-1', matches: true, problems: [] });
    const status = await gatehouse(['stack', 'status', '--json']);
    expect(JSON.parse(status.stdout)).toEqual({ dir: resolve(stateDir, 'stack'), supervisorPid: null, unsupervised: [], services: {} });
  });
});

describe('the staging URL of a local stack', () => {
  it('follows STAGING_PORT when STAGING_URL is not set, as the stack services do; STAGING_URL wins', () => {
    expect(stagingUrlOf({})).toBe('http://127.0.0.1:7104');
    expect(stagingUrlOf({ STAGING_PORT: '8204' })).toBe('http://127.0.0.1:8204');
    expect(stagingUrlOf({ STAGING_PORT: '8204', STAGING_URL: 'http://staging.internal:80' })).toBe('http://staging.internal:80');
  });
});
