import { spawn } from 'node:child_process';
import { createServer, type Server, type Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

// docs/product/design.md#observability: telemetry must never fail or stall work — an unreachable collector changes nothing.
// The collector here accepts connections and never answers (worse than a refused port: every
// export waits for its timeout). A stand-in service process exports to it from the standard
// OTEL_* environment, does traced work that records metrics, and shuts down.

const FIXTURE = fileURLToPath(new URL('./fixtures/busy-service.ts', import.meta.url));
const EXPORT_TIMEOUT_MS = 6000;
let blackhole: Server;
const sockets: Socket[] = [];
let port = 0;

beforeAll(async () => {
  blackhole = createServer((s) => {
    sockets.push(s);
    s.on('error', () => {});
  });
  await new Promise<void>((r) => blackhole.listen(0, '127.0.0.1', r));
  port = (blackhole.address() as { port: number }).port;
});
afterAll(async () => {
  for (const s of sockets) s.destroy();
  await new Promise((r) => blackhole.close(r));
});

async function runService(bound: string): Promise<{ workMs: number; shutdownMs: number; completed: number; stderr: string }> {
  const child = spawn(process.execPath, [FIXTURE, bound], {
    env: {
      ...process.env,
      OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}`,
      OTEL_BSP_SCHEDULE_DELAY: '50',
      OTEL_METRIC_EXPORT_INTERVAL: '200',
      OTEL_EXPORTER_OTLP_TIMEOUT: String(EXPORT_TIMEOUT_MS),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const code = await new Promise<number | null>((r) => child.once('exit', r));
  expect(code, stderr).toBe(0);
  return { ...(JSON.parse(out.trim().split('\n').at(-1)!) as { workMs: number; shutdownMs: number; completed: number }), stderr };
}

describe('an unreachable collector', () => {
  it('changes nothing: every job completes without waiting on an export, shutdown is bounded, the log is not flooded', async () => {
    const r = await runService('1000');
    expect(r.completed).toBe(300);
    // No job waited for an export (each would wait EXPORT_TIMEOUT_MS), nor did shutdown.
    expect(r.workMs).toBeLessThan(EXPORT_TIMEOUT_MS);
    expect(r.shutdownMs).toBeLessThan(EXPORT_TIMEOUT_MS / 2);
    // The SDK's complaints are one JSON line per distinct message, not one per failed export.
    const lines = r.stderr.split('\n').filter(Boolean);
    for (const line of lines) expect(() => JSON.parse(line)).not.toThrow();
    expect(new Set(lines.map((l) => (JSON.parse(l) as { msg: string }).msg)).size).toBe(lines.length);
  });

  it('control removed: without the shutdown bound, stopping the service waits for the hung collector', async () => {
    const r = await runService('none');
    expect(r.completed).toBe(300);
    expect(r.shutdownMs).toBeGreaterThanOrEqual(EXPORT_TIMEOUT_MS / 2);
  });
});
