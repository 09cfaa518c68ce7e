import { mkdtempSync, readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { startStack, type RunningStack, type StackEvent } from '@gatehouse/cli';
import { freePort } from '@gatehouse/test-harness';

// The model-stub alone (no database, no queues) is enough to exercise the supervisor over a
// real service process; a short backoff keeps each test to a few seconds.
const running: RunningStack[] = [];
afterEach(async () => {
  for (const s of running.splice(0)) await s.stop(2000);
});

interface LogLine {
  level: number;
  msg: string;
  supervised?: string;
  signal?: string | null;
  exitCode?: number | null;
  restarts?: number;
  delayMs?: number;
}

const logLines = (dir: string): LogLine[] =>
  readFileSync(resolve(dir, 'supervisor.log'), 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as LogLine);

async function stub(
  opts: { supervise?: boolean; events?: StackEvent[] } = {},
): Promise<{ stack: RunningStack; dir: string; port: number }> {
  const dir = mkdtempSync(resolve(tmpdir(), 'gh-supervise-'));
  const port = await freePort();
  const stack = await startStack({
    env: { MODEL_STUB_PORT: String(port), LOG_LEVEL: 'warn', GATEHOUSE_ENV: 'test' },
    dir,
    only: ['model-stub'],
    supervise: opts.supervise,
    restartPolicy: { initialMs: 100, maxMs: 400, crashLoopAfter: 3 },
    onEvent: (e) => opts.events?.push(e),
  });
  running.push(stack);
  return { stack, dir, port };
}

const answers = async (port: number): Promise<boolean> =>
  fetch(`http://127.0.0.1:${port}/healthz`, { signal: AbortSignal.timeout(1000) }).then(
    () => true,
    () => false,
  );

describe('the stack supervisor', () => {
  it('restarts a service killed with SIGKILL, logs the restart, and it is ready again', async () => {
    const events: StackEvent[] = [];
    const { stack, dir } = await stub({ events });
    const first = stack.processes.get('model-stub')!.pid;
    expect(await stack.kill('model-stub', 'SIGKILL')).toEqual({ code: null, signal: 'SIGKILL' });

    await vi.waitFor(() => expect(events).toContainEqual({ type: 'ready', service: 'model-stub', restarts: 1 }), {
      timeout: 60_000,
      interval: 100,
    });
    await stack.ready('model-stub');
    expect(stack.restarts('model-stub')).toBe(1);
    expect(stack.processes.get('model-stub')!.pid).not.toBe(first);
    const restart = logLines(dir).find((l) => l.supervised === 'model-stub' && l.signal === 'SIGKILL');
    expect(restart).toMatchObject({ exitCode: null, restarts: 1, delayMs: 100 });
    expect(restart!.msg).toBe('model-stub exited (signal SIGKILL); restart 1 in 100 ms');
  });

  it('stop ends supervision first: no restart after the stack is down', async () => {
    const { stack, port } = await stub();
    await stack.stop(5000);
    const last = stack.processes.get('model-stub')!;
    expect(last.exitCode ?? last.signalCode).not.toBeNull();
    await sleep(1500); // fifteen times the backoff a restart would have waited
    expect(stack.processes.get('model-stub')).toBe(last);
    expect(stack.restarts('model-stub')).toBe(0);
    expect(await answers(port)).toBe(false);
  });

  it('reports a crash loop, keeps retrying at the capped delay, and recovers once the cause is gone', async () => {
    const events: StackEvent[] = [];
    const { stack, dir, port } = await stub({ events });
    await stack.kill('model-stub', 'SIGKILL');
    // Take the service's port before the restart (100 ms later): each new process fails to listen and exits.
    // (Readiness probes that reach it are cut at once: close() waits for open connections.)
    const blocker: Server = createServer((socket) => socket.destroy());
    await new Promise<void>((r) => blocker.listen(port, '127.0.0.1', r));
    try {
      await vi.waitFor(() => expect(events.map((e) => e.type)).toContain('crash-loop'), { timeout: 90_000, interval: 100 });
    } finally {
      await new Promise((r) => blocker.close(r));
    }
    const loop = logLines(dir).find((l) => l.msg.includes('crash-looping'))!;
    expect(loop).toMatchObject({ level: 50, supervised: 'model-stub' });
    expect(logLines(dir).filter((l) => l.exitCode === 1).length).toBeGreaterThanOrEqual(2);
    await vi.waitFor(() => expect(events.at(-1)).toMatchObject({ type: 'ready', service: 'model-stub' }), {
      timeout: 60_000,
      interval: 100,
    });
    await stack.ready('model-stub');
    expect(stack.restarts('model-stub')).toBeGreaterThanOrEqual(3);
  });

  it('control removed (supervise: false): the killed service stays dead', async () => {
    const events: StackEvent[] = [];
    const { stack, dir, port } = await stub({ supervise: false, events });
    const killed = stack.processes.get('model-stub')!;
    await stack.kill('model-stub', 'SIGKILL');
    await sleep(1500); // fifteen times the backoff a supervised restart waits
    expect(stack.processes.get('model-stub')).toBe(killed);
    expect(stack.restarts('model-stub')).toBe(0);
    expect(await answers(port)).toBe(false);
    expect(events.filter((e) => e.type === 'starting')).toHaveLength(1);
    expect(logLines(dir).map((l) => l.msg)).toContain('model-stub exited (signal SIGKILL); not restarted: supervision is off');
  });

  it('kill with keepDown holds supervision until restart()', async () => {
    const { stack, port } = await stub();
    await stack.kill('model-stub', 'SIGKILL', { keepDown: true });
    await sleep(1500);
    expect(await answers(port)).toBe(false);
    await stack.restart('model-stub');
    expect(await answers(port)).toBe(true);
    await stack.kill('model-stub', 'SIGKILL'); // supervised again
    await vi.waitFor(() => expect(stack.restarts('model-stub')).toBe(1), { timeout: 30_000, interval: 100 });
    await stack.ready('model-stub');
  });
});
