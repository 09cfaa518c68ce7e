import express from 'express';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { listen, closeServer } from '@gatehouse/platform';
import { runDemo } from '@gatehouse/cli';
import { demoTarget, startE2EStack, type E2EStack } from '../support/stack.ts';
import type { Server } from 'node:http';

// Issue 7 (OpenTelemetry): one trace per workflow crosses the services through the queues — the
// trace context stored with every job, and with the approval the decision continues.

type OtlpSpan = { traceId: string; spanId: string; parentSpanId?: string; name: string };
type Received = { service: string; span: OtlpSpan };

const received: Received[] = [];
let raw = '';
let collector: Server;
let s: E2EStack;

beforeAll(async () => {
  // An OTLP/HTTP JSON receiver standing in for a collector.
  const app = express();
  app.use(express.json({ limit: '20mb' }));
  app.post('/v1/traces', (req, res) => {
    raw += JSON.stringify(req.body);
    const body = req.body as {
      resourceSpans?: Array<{
        resource?: { attributes?: Array<{ key: string; value: { stringValue?: string } }> };
        scopeSpans?: Array<{ spans?: OtlpSpan[] }>;
      }>;
    };
    for (const rs of body.resourceSpans ?? []) {
      const service = rs.resource?.attributes?.find((a) => a.key === 'service.name')?.value.stringValue ?? '?';
      for (const ss of rs.scopeSpans ?? []) for (const span of ss.spans ?? []) received.push({ service, span });
    }
    res.json({});
  });
  const c = await listen(app, 0);
  collector = c.server;
  s = await startE2EStack({
    OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${c.port}`,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    OTEL_BSP_SCHEDULE_DELAY: '100',
  });
});
afterAll(async () => {
  await s?.close();
  if (collector) await closeServer(collector);
});

describe('OpenTelemetry across the queues', () => {
  it('the T-1 workflow is one trace from intake through gateway, approval and executor back to the loop', async () => {
    const report = await runDemo(demoTarget(s));
    expect(report.workflow.state).toBe('completed');
    const intake = await waitForSpan('intake ticket');
    const until = Date.now() + 10_000;
    let services = new Set<string>();
    while (Date.now() < until) {
      services = new Set(received.filter((r) => r.span.traceId === intake.span.traceId).map((r) => r.service));
      if (['agent-loop', 'policy-gateway', 'approval', 'executor'].every((n) => services.has(n))) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    expect([...services].sort()).toEqual(expect.arrayContaining(['agent-loop', 'approval', 'executor', 'policy-gateway']));
    const names = new Set(received.filter((r) => r.span.traceId === intake.span.traceId).map((r) => r.span.name));
    for (const n of ['turns process', 'proposals process', 'approval-requests process', 'executions process', 'results process'])
      expect(names).toContain(n);
    // The executions after each approval (refund, reship) continue the trace, not only the lookup.
    const executions = received.filter((r) => r.span.traceId === intake.span.traceId && r.span.name === 'executions process');
    expect(executions.length).toBeGreaterThanOrEqual(3);
    // Spans carry no ticket text or arguments.
    expect(raw).not.toContain('cracked item');
  });
});

async function waitForSpan(name: string): Promise<Received> {
  for (let i = 0; i < 100; i++) {
    const hit = received.find((r) => r.span.name === name);
    if (hit) return hit;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`no span ${name} received (${received.length} spans)`);
}
