import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { resolve } from 'node:path';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { probeStackStatus, readStackStatus, stackStatus, statusRecorder, stopStack } from '@gatehouse/cli';
import { repoRoot } from '@gatehouse/contracts';
import { createHttpApp } from '@gatehouse/platform';

// What `gatehouse stack status` tells on-call, from the supervisor's status file and pid files.

const dirs: string[] = [];
const fresh = (): string => {
  const d = mkdtempSync(resolve(tmpdir(), 'gh-status-'));
  dirs.push(d);
  return d;
};
const children: ChildProcess[] = [];
afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  for (const c of children.splice(0)) c.kill('SIGKILL');
});

/** `gatehouse stack status [args]` over the stack folder `dir` (`<state dir>/stack`): its exit code and output. */
function statusCommand(dir: string, args: string[] = []): Promise<{ code: number; stdout: string }> {
  return new Promise((done) => {
    execFile(
      process.execPath,
      [resolve(repoRoot, 'apps/cli/src/main.ts'), 'stack', 'status', '--state-dir', resolve(dir, '..'), ...args],
      { cwd: repoRoot, timeout: 60_000 },
      (err, stdout) => done({ code: err ? Number((err as { code?: number }).code ?? 1) : 0, stdout }),
    );
  });
}

/** An HTTP server answering `/readyz` with `status` as `service` would; resolves with its port and a close. */
async function readyzServer(service: string, status: number): Promise<{ port: number; close: () => Promise<void> }> {
  const server = createServer((_q, r) => {
    r.statusCode = status;
    r.end(
      JSON.stringify(
        status === 200 ? { ready: true, service } : { ready: false, service, failing: { redis: 'redis connection is reconnecting' } },
      ),
    );
  });
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  return { port: (server.address() as AddressInfo).port, close: () => new Promise<void>((ok) => server.close(() => ok())) };
}

/**
 * A live process whose command line names `entry` (as the stack's supervisor or a service's names
 * its file), else none of the stack's: an idle Node process, killed after the test.
 */
async function standIn(entry?: string): Promise<ChildProcess> {
  const child = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1 << 30); console.log("up")', ...(entry ? [entry] : [])], {
    stdio: ['ignore', 'pipe', 'ignore'],
  });
  children.push(child);
  await once(child.stdout!, 'data');
  return child;
}
const SUPERVISOR = 'apps/cli/src/stack-daemon.ts';

describe('stack status', () => {
  it('keeps reporting a crash loop after the service is up again', async () => {
    const dir = fresh();
    const record = statusRecorder(dir);
    record({ type: 'exited', service: 'model-stub', code: null, signal: 'SIGKILL', restarts: 5, delayMs: 8000 });
    record({ type: 'crash-loop', service: 'model-stub', restarts: 5 });
    record({ type: 'starting', service: 'model-stub', restarts: 5 });
    record({ type: 'ready', service: 'model-stub', restarts: 5 });
    writeFileSync(resolve(dir, 'supervisor.pid'), String((await standIn(SUPERVISOR)).pid));
    const [, line] = await stackStatus(dir);
    expect(line).toMatch(/model-stub\s+ready\s+restarts 5, last exit signal SIGKILL at .*, crash loop reported at /);
    expect(JSON.parse(readFileSync(resolve(dir, 'status.json'), 'utf8'))['model-stub'].crashLoopAt).toEqual(expect.any(String));
  });

  it('names services that still run when the supervisor is gone', async () => {
    const dir = fresh();
    writeFileSync(resolve(dir, 'supervisor.pid'), '2147483646'); // no such process
    writeFileSync(resolve(dir, 'executor.pid'), String((await standIn('services/executor/src/main.ts')).pid)); // stands in for the service
    expect(await stackStatus(dir)).toEqual([
      `no stack supervisor running for ${dir}, but these services still run unsupervised: executor`,
      '  stop them with: ./run stack down',
    ]);
    rmSync(resolve(dir, 'executor.pid'));
    expect(await stackStatus(dir)).toEqual([`no stack supervisor running for ${dir}`]);
  });

  it('a stale pid file naming another program (a reboot, a SIGKILLed supervisor) is not the stack: down leaves that program alone', async () => {
    const dir = fresh();
    const bystander = await standIn(); // some other program of the same user that got the old pids
    for (const name of ['supervisor', 'executor', 'agent-loop']) writeFileSync(resolve(dir, `${name}.pid`), String(bystander.pid));
    expect(readStackStatus(dir)).toMatchObject({ supervisorPid: null, unsupervised: [] });
    expect(await stackStatus(dir)).toEqual([`no stack supervisor running for ${dir}`]);
    expect(await stopStack(dir, 500)).toEqual([]);
    await new Promise((r) => setTimeout(r, 300));
    expect(bystander.exitCode).toBeNull();
    expect(bystander.signalCode).toBeNull();
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
      writeFileSync(resolve(dir, 'supervisor.pid'), String((await standIn(SUPERVISOR)).pid));
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

  it('exits 0 only when the supervisor runs and every service is ready now; 1 otherwise, --json too', async () => {
    const dir = resolve(fresh(), 'stack');
    mkdirSync(dir);
    const [up, waiting] = await Promise.all([readyzServer('audit', 200), readyzServer('executor', 503)]);
    try {
      writeFileSync(resolve(dir, 'supervisor.pid'), String((await standIn(SUPERVISOR)).pid));
      const record = statusRecorder(dir, { audit: up.port, executor: waiting.port });
      record({ type: 'ready', service: 'audit', restarts: 0 });
      expect((await statusCommand(dir)).code).toBe(0);
      record({ type: 'ready', service: 'executor', restarts: 0 });
      const notReady = await statusCommand(dir, ['--json']);
      expect(notReady.code).toBe(1);
      expect(JSON.parse(notReady.stdout).services.executor.state).toBe('not-ready');
      writeFileSync(resolve(dir, 'supervisor.pid'), '2147483646'); // the supervisor is gone
      const gone = await statusCommand(dir);
      expect(gone.code).toBe(1);
      expect(gone.stdout).toContain('no stack supervisor running');
    } finally {
      await Promise.all([up.close(), waiting.close()]);
    }
  }, 60_000);

  it('a service whose Postgres hangs is not-ready, waiting for postgres, not not-answering (ADR 0730)', async () => {
    const dir = fresh();
    // The services' own /readyz, with a Postgres check that never settles (a SIGSTOPped server):
    // it answers 503 once the check's bound runs out, which is longer than a 1 s probe waited.
    const app = createHttpApp('executor', { postgres: () => new Promise<void>(() => undefined) });
    const server = createServer(app);
    await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
    try {
      const port = (server.address() as AddressInfo).port;
      const record = statusRecorder(dir, { executor: port });
      record({ type: 'ready', service: 'executor', restarts: 0 });
      writeFileSync(resolve(dir, 'supervisor.pid'), String((await standIn(SUPERVISOR)).pid));
      for (let round = 0; round < 3; round++) {
        expect((await stackStatus(dir))[1]).toMatch(/executor\s+not-ready\s+restarts 0, waiting for postgres \(timed out after \d+ ms\)$/);
      }
    } finally {
      server.closeAllConnections();
      await new Promise((done) => server.close(done));
    }
  }, 60_000);

  it('a service still starting that answers 503 shows what it waits for (restarted during an outage, ADR 0730)', async () => {
    const dir = fresh();
    // Restarted by the supervisor while Redis is down: it listens, its /readyz names Redis, and the
    // supervisor still records it `starting` (it was never ready since).
    const app = createHttpApp('agent-loop', { redis: () => Promise.reject(new Error('redis connection is reconnecting')) });
    const server = createServer(app);
    await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
    try {
      const port = (server.address() as AddressInfo).port;
      const record = statusRecorder(dir, { 'agent-loop': port });
      record({ type: 'ready', service: 'agent-loop', restarts: 0 });
      record({ type: 'exited', service: 'agent-loop', code: null, signal: 'SIGKILL', restarts: 1, delayMs: 500 });
      record({ type: 'starting', service: 'agent-loop', restarts: 1 });
      writeFileSync(resolve(dir, 'supervisor.pid'), String((await standIn(SUPERVISOR)).pid));
      expect((await stackStatus(dir))[1]).toMatch(
        /agent-loop\s+starting\s+restarts 1, last exit signal SIGKILL at .*, waiting for redis \(redis connection is reconnecting\)$/,
      );
      expect((await probeStackStatus(dir)).services['agent-loop']).toMatchObject({
        state: 'starting',
        failing: { redis: 'redis connection is reconnecting' },
      });
    } finally {
      server.closeAllConnections();
      await new Promise((done) => server.close(done));
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
      writeFileSync(resolve(dir, 'supervisor.pid'), String((await standIn(SUPERVISOR)).pid));
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
