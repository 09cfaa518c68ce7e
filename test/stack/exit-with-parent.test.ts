import { spawn, type ChildProcess } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import { repoRoot } from '@gatehouse/contracts';
import { PARENT_CHECK_INTERVAL_MS } from '@gatehouse/platform';
import { freePort } from '@gatehouse/test-harness';

// A test worker killed mid-start (a hook's timeout) or a demo killed with SIGKILL cannot stop the
// services it started: they were left running, each holding Postgres connections and CPU, until
// the shared Postgres refused everyone "too many clients". A service started with
// GATEHOUSE_EXIT_WITH_PARENT=1 (the test harness's and the demo's stacks) shuts down once its
// parent is gone (installShutdown, packages/platform/src/shutdown.ts). A real service process
// (the model-stub) under a real parent that is SIGKILLed.

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

const started: number[] = [];
afterEach(() => {
  for (const pid of started.splice(0)) if (alive(pid)) process.kill(pid, 'SIGKILL');
});

/** Starts the model-stub under a bash parent; resolves with the parent and the service's pid once it answers. */
async function serviceUnderParent(exitWithParent: boolean): Promise<{ parent: ChildProcess; pid: number }> {
  const port = await freePort();
  const parent = spawn('bash', ['-c', `"${process.execPath}" synthetic/model-stub/src/main.ts > /dev/null 2>&1 & echo $!; wait`], {
    cwd: repoRoot,
    env: { ...process.env, GATEHOUSE_ENV: 'test', MODEL_STUB_PORT: String(port), GATEHOUSE_EXIT_WITH_PARENT: exitWithParent ? '1' : '0' },
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  const pid = await new Promise<number>((ok) => parent.stdout!.once('data', (b: Buffer) => ok(Number(String(b).trim()))));
  started.push(pid);
  for (const until = Date.now() + 60_000; Date.now() < until; await new Promise((r) => setTimeout(r, 100))) {
    const res = await fetch(`http://127.0.0.1:${port}/healthz`).catch(() => null);
    if (res?.ok) return { parent, pid };
  }
  throw new Error('the model-stub did not answer within 60 s');
}

/** Whether `pid` has ended within `ms`. */
async function endsWithin(pid: number, ms: number): Promise<boolean> {
  for (const until = Date.now() + ms; Date.now() < until; await new Promise((r) => setTimeout(r, 100))) if (!alive(pid)) return true;
  return !alive(pid);
}

describe('a service started with GATEHOUSE_EXIT_WITH_PARENT=1', () => {
  it('shuts down once its parent is SIGKILLed', async () => {
    const { parent, pid } = await serviceUnderParent(true);
    parent.kill('SIGKILL');
    expect(await endsWithin(pid, PARENT_CHECK_INTERVAL_MS + 10_000)).toBe(true);
  });

  it('without it, the service outlives its parent (as `stack up`’s do, on purpose)', async () => {
    const { parent, pid } = await serviceUnderParent(false);
    parent.kill('SIGKILL');
    expect(await endsWithin(pid, PARENT_CHECK_INTERVAL_MS * 3)).toBe(false);
  });
});
