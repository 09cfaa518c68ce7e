// The repository stands on its own: a clone of HEAD into an empty folder, with no specification
// folder or anything else beside it, runs the README's first command (`./run demo`) to DEMO OK.
// It catches any run-time read outside the repository (e.g. a world file or a document looked
// up in a sibling folder), which a test run inside the developer's tree would never see.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { SERVICES } from '@gatehouse/cli';
import { repoRoot } from '@gatehouse/contracts';
import { dropDatabase, dropQueuePrefix, freePort, testQueuePrefix, TEST_REDIS_URL } from '@gatehouse/test-harness';

const parent = mkdtempSync(resolve(tmpdir(), 'gh-clone-'));
const clone = resolve(parent, 'gatehouse');
const database = `gh_clone_${process.pid}_${Date.now().toString(36)}`;
const prefix = testQueuePrefix();

/** Runs `cmd` in `cwd` to its end; resolves with its exit code and combined output. */
function run(cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv): Promise<{ code: number | null; output: string }> {
  return new Promise((done) => {
    const child = spawn(cmd, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    child.on('close', (code) => done({ code, output }));
  });
}

describe('a clone with nothing beside it', () => {
  afterAll(async () => {
    await dropDatabase(database);
    await dropQueuePrefix(TEST_REDIS_URL, prefix);
    rmSync(parent, { recursive: true, force: true });
  });

  it('runs ./run demo to DEMO OK', async () => {
    const cloned = spawnSync('git', ['clone', '--quiet', '--no-hardlinks', repoRoot, clone], { encoding: 'utf8' });
    expect(cloned.status, cloned.stderr).toBe(0);
    expect(readdirSync(parent)).toEqual(['gatehouse']);
    expect(existsSync(resolve(clone, '.tools')) || existsSync(resolve(clone, 'node_modules'))).toBe(false);

    // Free ports, its own database and queue prefix: the demo must not disturb a developer's stack
    // or another test. No world or release override: the clone must find its own.
    const env: NodeJS.ProcessEnv = { ...process.env, DEMO_DATABASE: database, DEMO_QUEUE_PREFIX: prefix, REDIS_URL: TEST_REDIS_URL };
    for (const key of [
      'GATEHOUSE_WORLD',
      'RELEASES_DIR',
      'AUDIT_SIGNING_KEY_PATH',
      'GATEHOUSE_ENV',
      'VITEST',
      'VITEST_POOL_ID',
      'VITEST_WORKER_ID',
      'NODE_OPTIONS',
    ]) {
      delete env[key];
    }
    for (const svc of SERVICES) env[svc.portVar] = String(await freePort());
    const { code, output } = await run('bash', ['./run', 'demo'], clone, env);
    expect(output).toContain('DEMO OK');
    expect(code, output.slice(-4000)).toBe(0);
  });
});
