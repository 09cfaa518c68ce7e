import { createServer, type Server, type Socket } from 'node:net';
import { readdirSync, readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runDemo } from '@gatehouse/cli';
import { demoTarget, startE2EStack, type E2EStack } from '@gatehouse/test-harness';

// docs/product/design.md#observability: telemetry must never fail or stall work. Every service exports traces and metrics to
// a collector that accepts connections and never answers; the demo runs exactly as without one,
// and every service still stops cleanly within its grace period.

let blackhole: Server;
const sockets: Socket[] = [];
let s: E2EStack;

beforeAll(async () => {
  blackhole = createServer((c) => {
    sockets.push(c);
    c.on('error', () => {});
  });
  await new Promise<void>((r) => blackhole.listen(0, '127.0.0.1', r));
  const port = (blackhole.address() as { port: number }).port;
  s = await startE2EStack({
    OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}`,
    OTEL_BSP_SCHEDULE_DELAY: '200',
    OTEL_METRIC_EXPORT_INTERVAL: '500',
  });
});
afterAll(async () => {
  await s?.close();
  for (const c of sockets) c.destroy();
  if (blackhole) await new Promise((r) => blackhole.close(r));
});

describe('an unreachable collector', () => {
  it('changes nothing: the demo completes, audit intact, and every service stops cleanly', async () => {
    const report = await runDemo(demoTarget(s));
    expect(report.failures).toEqual([]);
    expect(report.workflow.state).toBe('completed');
    expect(report.redelivery).toBe('replay:succeeded');
    expect(report.audit).toMatchObject({ intact: true });

    await s.stack.stop();
    const exits = Object.fromEntries([...s.stack.processes].map(([name, child]) => [name, child.exitCode]));
    expect(exits).toEqual(Object.fromEntries([...s.stack.processes.keys()].map((name) => [name, 0])));
    // The SDK's export failures are rate-limited JSON lines, not a flood.
    for (const f of readdirSync(s.dir).filter((x) => x.endsWith('.log'))) {
      const otel = readFileSync(`${s.dir}/${f}`, 'utf8')
        .split('\n')
        .filter((l) => l.includes('opentelemetry'));
      expect(otel.length, f).toBeLessThanOrEqual(10);
    }
  });
});
