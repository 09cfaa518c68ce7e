import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { repoRoot } from '@gatehouse/contracts';
import { alive } from '@gatehouse/cli';
import { createTestDatabase, freePort, type TestDatabase } from '@gatehouse/test-harness';

// `gatehouse stack up` as a user runs it: a detached supervisor per state folder. Two stacks
// (the model-stub only, to stay light) side by side in two state folders on two ports.
const run = promisify(execFile);
let db: TestDatabase;
const stacks: Array<{ root: string; port: number }> = [];

async function gatehouse(args: string[], stack: { root: string; port: number }): Promise<string> {
  const env = { ...process.env, DATABASE_URL: db.url, MODEL_STUB_PORT: String(stack.port), GATEHOUSE_ENV: 'test', LOG_LEVEL: 'warn' };
  const { stdout } = await run(process.execPath, ['apps/cli/src/main.ts', ...args, '--state-dir', stack.root], {
    cwd: repoRoot,
    env,
    timeout: 150_000,
  });
  return stdout;
}

const pidOf = (root: string, name: string): number | undefined => {
  const file = resolve(root, 'stack', `${name}.pid`);
  return existsSync(file) ? Number(readFileSync(file, 'utf8')) : undefined;
};

const ready = async (port: number): Promise<boolean> =>
  fetch(`http://127.0.0.1:${port}/readyz`, { signal: AbortSignal.timeout(1000) }).then(
    (r) => r.ok,
    () => false,
  );

beforeAll(async () => {
  db = await createTestDatabase();
  for (const name of ['a', 'b']) stacks.push({ root: mkdtempSync(resolve(tmpdir(), `gh-state-${name}-`)), port: await freePort() });
});

afterAll(async () => {
  for (const s of stacks) await gatehouse(['stack', 'down'], s).catch(() => undefined);
  await db?.drop();
});

describe('gatehouse stack up / down', () => {
  it('two stacks with their own state folders run side by side; a killed service comes back; down stops only its own', async () => {
    const [a, b] = stacks as [(typeof stacks)[0], (typeof stacks)[0]];
    const upA = await gatehouse(['stack', 'up', '--only', 'model-stub'], a);
    expect(upA).toContain('ready  model-stub (1/1)');
    expect(upA).toContain(`stack up, supervised; logs in ${resolve(a.root, 'stack')}`);
    await gatehouse(['stack', 'up', '--only', 'model-stub'], b);
    expect([await ready(a.port), await ready(b.port)]).toEqual([true, true]);
    const supervisorA = pidOf(a.root, 'supervisor')!;
    expect(alive(supervisorA)).toBe(true);

    // kill -9 A's model-stub: A's supervisor (not this test) starts it again.
    const killed = pidOf(a.root, 'model-stub')!;
    process.kill(killed, 'SIGKILL');
    // Until the supervisor itself saw it ready (its status follows its own probe, up to a second
    // after the port answers; the status is recorded before this line is logged).
    const supervisorLog = () => readFileSync(resolve(a.root, 'stack', 'supervisor.log'), 'utf8');
    await vi.waitFor(
      async () => {
        expect(pidOf(a.root, 'model-stub')).not.toBe(killed);
        expect(await ready(a.port)).toBe(true);
        expect(supervisorLog()).toContain('model-stub is ready again');
      },
      { timeout: 60_000, interval: 200 },
    );
    const log = supervisorLog();
    expect(log).toContain('model-stub exited (signal SIGKILL); restart 1 in 500 ms');
    expect(await gatehouse(['stack', 'status'], a)).toMatch(/model-stub +ready +restarts 1, last exit signal SIGKILL at /);

    expect(await gatehouse(['stack', 'down'], a)).toContain('stopped model-stub');
    expect(alive(supervisorA)).toBe(false);
    await sleep(1500); // three times the first backoff: an orphan restart would be listening by now
    expect(await ready(a.port)).toBe(false);
    expect(await ready(b.port)).toBe(true);
    // No supervisor: the answer is no, exit 1, and the output says why.
    const down = await gatehouse(['stack', 'status'], a).then(
      () => ({ code: 0, stdout: '' }),
      (e: { code?: number; stdout?: string }) => ({ code: e.code, stdout: e.stdout ?? '' }),
    );
    expect(down).toEqual({ code: 1, stdout: expect.stringContaining('no stack supervisor running') });
    expect(await gatehouse(['stack', 'down'], b)).toContain('stopped model-stub');
    expect(await ready(b.port)).toBe(false);
  });
});
