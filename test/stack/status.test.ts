import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { stackStatus, statusRecorder } from '@gatehouse/cli';

// What `gatehouse stack status` tells on-call, from the supervisor's status file and pid files.

const dirs: string[] = [];
const fresh = (): string => {
  const d = mkdtempSync(resolve(tmpdir(), 'gh-status-'));
  dirs.push(d);
  return d;
};
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe('stack status', () => {
  it('keeps reporting a crash loop after the service is up again', () => {
    const dir = fresh();
    const record = statusRecorder(dir);
    record({ type: 'exited', service: 'model-stub', code: null, signal: 'SIGKILL', restarts: 5, delayMs: 8000 });
    record({ type: 'crash-loop', service: 'model-stub', restarts: 5 });
    record({ type: 'starting', service: 'model-stub', restarts: 5 });
    record({ type: 'ready', service: 'model-stub', restarts: 5 });
    writeFileSync(resolve(dir, 'supervisor.pid'), String(process.pid));
    const [, line] = stackStatus(dir);
    expect(line).toMatch(/model-stub\s+ready\s+restarts 5, last exit signal SIGKILL at .*, crash loop reported at /);
    expect(JSON.parse(readFileSync(resolve(dir, 'status.json'), 'utf8'))['model-stub'].crashLoopAt).toEqual(expect.any(String));
  });

  it('names services that still run when the supervisor is gone', () => {
    const dir = fresh();
    writeFileSync(resolve(dir, 'supervisor.pid'), '2147483646'); // no such process
    writeFileSync(resolve(dir, 'executor.pid'), String(process.pid)); // a live process stands in for the service
    expect(stackStatus(dir)).toEqual([
      `no stack supervisor running for ${dir}, but these services still run unsupervised: executor`,
      '  stop them with: ./run stack down',
    ]);
    rmSync(resolve(dir, 'executor.pid'));
    expect(stackStatus(dir)).toEqual([`no stack supervisor running for ${dir}`]);
  });
});
