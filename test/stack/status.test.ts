import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { probeStackStatus, stackStatus, statusRecorder } from '@gatehouse/cli';

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
  it('keeps reporting a crash loop after the service is up again', async () => {
    const dir = fresh();
    const record = statusRecorder(dir);
    record({ type: 'exited', service: 'model-stub', code: null, signal: 'SIGKILL', restarts: 5, delayMs: 8000 });
    record({ type: 'crash-loop', service: 'model-stub', restarts: 5 });
    record({ type: 'starting', service: 'model-stub', restarts: 5 });
    record({ type: 'ready', service: 'model-stub', restarts: 5 });
    writeFileSync(resolve(dir, 'supervisor.pid'), String(process.pid));
    const [, line] = await stackStatus(dir);
    expect(line).toMatch(/model-stub\s+ready\s+restarts 5, last exit signal SIGKILL at .*, crash loop reported at /);
    expect(JSON.parse(readFileSync(resolve(dir, 'status.json'), 'utf8'))['model-stub'].crashLoopAt).toEqual(expect.any(String));
  });

  it('names services that still run when the supervisor is gone', async () => {
    const dir = fresh();
    writeFileSync(resolve(dir, 'supervisor.pid'), '2147483646'); // no such process
    writeFileSync(resolve(dir, 'executor.pid'), String(process.pid)); // a live process stands in for the service
    expect(await stackStatus(dir)).toEqual([
      `no stack supervisor running for ${dir}, but these services still run unsupervised: executor`,
      '  stop them with: ./run stack down',
    ]);
    rmSync(resolve(dir, 'executor.pid'));
    expect(await stackStatus(dir)).toEqual([`no stack supervisor running for ${dir}`]);
  });

  it('probes a ready service now: a SIGSTOPped process is reported not-answering, and ready again once continued', async () => {
    const dir = fresh();
    // A real process answering /readyz as the audit service does, then stopped as on-call might find it.
    const child: ChildProcess = spawn(
      process.execPath,
      [
        '-e',
        `const s = require('node:http').createServer((q, r) => r.end(JSON.stringify({ ready: true, service: 'audit' })));
         s.listen(0, '127.0.0.1', () => console.log(s.address().port));`,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    try {
      const [chunk] = (await once(child.stdout!, 'data')) as [Buffer];
      const port = Number(chunk.toString().trim());
      const record = statusRecorder(dir, { audit: port });
      record({ type: 'starting', service: 'audit', restarts: 0 });
      record({ type: 'ready', service: 'audit', restarts: 0 });
      writeFileSync(resolve(dir, 'supervisor.pid'), String(process.pid));
      expect((await stackStatus(dir))[1]).toMatch(/audit\s+ready\s+restarts 0/);
      process.kill(child.pid!, 'SIGSTOP');
      expect((await stackStatus(dir))[1]).toMatch(/audit\s+not-answering\s+restarts 0/);
      expect((await probeStackStatus(dir)).services.audit).toMatchObject({ state: 'not-answering', port });
      process.kill(child.pid!, 'SIGCONT');
      expect((await stackStatus(dir))[1]).toMatch(/audit\s+ready\s+restarts 0/);
    } finally {
      child.kill('SIGKILL');
    }
  });

  it('a ready service that answers 503 is not-ready with what it waits for, not not-answering', async () => {
    const dir = fresh();
    // Answers /readyz as the policy gateway does while Postgres is down.
    const server = createServer((_q, r) => {
      r.statusCode = 503;
      r.end(JSON.stringify({ ready: false, service: 'policy-gateway', failing: { postgres: 'postgres unreachable since 03:00' } }));
    });
    await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
    try {
      const port = (server.address() as AddressInfo).port;
      const record = statusRecorder(dir, { 'policy-gateway': port });
      record({ type: 'ready', service: 'policy-gateway', restarts: 0 });
      writeFileSync(resolve(dir, 'supervisor.pid'), String(process.pid));
      expect((await stackStatus(dir))[1]).toMatch(
        /policy-gateway\s+not-ready\s+restarts 0, waiting for postgres \(postgres unreachable since 03:00\)$/,
      );
      expect((await probeStackStatus(dir)).services['policy-gateway']).toMatchObject({
        state: 'not-ready',
        failing: { postgres: 'postgres unreachable since 03:00' },
      });
    } finally {
      await new Promise((done) => server.close(done));
    }
  });
});
