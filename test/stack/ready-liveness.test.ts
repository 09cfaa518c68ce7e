import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { startStack, type RunningStack, type StackEvent } from '@gatehouse/cli';
import { freePort } from '@gatehouse/test-harness';

// The supervisor's liveness probe of a process that has been ready (ADR 0760): `/healthz` every
// period, killed (SIGKILL) and restarted after `healthFailures` failed probes in a row. Two
// model-stub stacks (no database, no queues) side by side: one is SIGSTOPped — as a process whose
// event loop hangs looks from outside — and must be killed and come back; the other stays healthy
// over the same time and must never be killed. Period cut from 10 s to 500 ms.

const HEALTH_PERIOD_MS = 500;
const HEALTH_FAILURES = 3;
/** The stated bound: killed at most failures × period + the probe's 3 s timeout after its last answer. */
const KILL_BOUND_MS = HEALTH_FAILURES * HEALTH_PERIOD_MS + 3_000;
/** Room for a loaded machine (2 shared cores) on top of the bound; only an upper limit for waiting. */
const SLACK_MS = 15_000;

interface Supervised {
  stack: RunningStack;
  dir: string;
  events: StackEvent[];
}

const stacks: Supervised[] = [];

async function stub(): Promise<Supervised> {
  const dir = mkdtempSync(resolve(tmpdir(), 'gh-ready-liveness-'));
  const events: StackEvent[] = [];
  const stack = await startStack({
    env: { MODEL_STUB_PORT: String(await freePort()), LOG_LEVEL: 'warn', GATEHOUSE_ENV: 'test' },
    dir,
    only: ['model-stub'],
    restartPolicy: { initialMs: 100, maxMs: 400, crashLoopAfter: 10 },
    liveness: { healthPeriodMs: HEALTH_PERIOD_MS, healthFailures: HEALTH_FAILURES },
    onEvent: (e) => events.push(e),
  });
  const s = { stack, dir, events };
  stacks.push(s);
  return s;
}

const supervisorLog = (dir: string): string => readFileSync(resolve(dir, 'supervisor.log'), 'utf8');

let hung: Supervised;
let healthy: Supervised;

beforeAll(async () => {
  hung = await stub();
  healthy = await stub();
}, 120_000);

afterAll(async () => {
  for (const s of stacks.splice(0)) await s.stack.stop(2000);
});

describe('the supervisor kills a ready process that stops answering /healthz (ADR 0760)', () => {
  it(
    'a ready process SIGSTOPped is killed within the bound and restarted; a healthy one beside it is never killed',
    { timeout: 90_000 },
    async () => {
      const stopped = hung.stack.processes.get('model-stub')!;
      const healthyPid = healthy.stack.processes.get('model-stub')!.pid;
      const stoppedAt = Date.now();
      process.kill(stopped.pid!, 'SIGSTOP');
      try {
        await vi.waitFor(() => expect(hung.events).toContainEqual(expect.objectContaining({ type: 'exited', signal: 'SIGKILL' })), {
          timeout: KILL_BOUND_MS + SLACK_MS,
          interval: 100,
        });
      } finally {
        if (stopped.exitCode === null && stopped.signalCode === null) stopped.kill('SIGKILL'); // never leave a stopped process behind
      }
      // It cannot have been killed before its third failed probe (two full periods after the stop).
      expect(Date.now() - stoppedAt).toBeGreaterThanOrEqual((HEALTH_FAILURES - 1) * HEALTH_PERIOD_MS);
      expect(stopped.signalCode).toBe('SIGKILL');
      expect(supervisorLog(hung.dir)).toMatch(
        /model-stub was ready but did not answer \/healthz 3 times in a row, 500 ms apart \(no answer for \d+ ms: hung\); killing it/,
      );
      await vi.waitFor(() => expect(hung.events).toContainEqual({ type: 'ready', service: 'model-stub', restarts: 1 }), {
        timeout: 60_000,
        interval: 100,
      });
      expect(hung.stack.restarts('model-stub')).toBe(1);
      expect(hung.stack.processes.get('model-stub')).not.toBe(stopped);

      // The healthy stack was probed all along, and more: many periods, no kill.
      await sleep(4 * KILL_BOUND_MS);
      expect(healthy.stack.restarts('model-stub')).toBe(0);
      expect(healthy.stack.processes.get('model-stub')!.pid).toBe(healthyPid);
      expect(healthy.events.filter((e) => e.type === 'exited')).toEqual([]);
      expect(supervisorLog(healthy.dir)).not.toContain('killing it');
      // The restarted process is healthy too: it is not killed again.
      expect(hung.stack.restarts('model-stub')).toBe(1);
    },
  );
});
